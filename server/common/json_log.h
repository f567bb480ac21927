// An spdlog flag that writes the log message escaped for a JSON string, so
// that --log-format json gives one valid JSON object per line whatever the
// message holds (quotes, backslashes, control characters).
#ifndef DELAYD_SERVER_COMMON_JSON_LOG_H_
#define DELAYD_SERVER_COMMON_JSON_LOG_H_

#include <spdlog/pattern_formatter.h>

#include <memory>
#include <string_view>

namespace delayd {

// Appends `text` to `dest` escaped for the inside of a JSON string (quotes,
// backslashes, control characters). `Out` has push_back(char) and
// append(const char*, const char*).
template <typename Out>
void AppendJsonEscaped(std::string_view text, Out& dest) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      dest.push_back('\\');
      dest.push_back(c);
    } else if (u < 0x20) {
      const char esc[] = {'\\', 'u', '0', '0', kHex[u >> 4], kHex[u & 15]};
      dest.append(esc, esc + sizeof esc);
    } else {
      dest.push_back(c);
    }
  }
}

class JsonEscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    AppendJsonEscaped(std::string_view(msg.payload.data(), msg.payload.size()),
                      dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_JSON_LOG_H_
