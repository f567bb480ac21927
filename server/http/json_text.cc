#include "server/http/json_text.h"

#include <simdjson.h>

#include <cstdio>

namespace delayd::http::json {

namespace {

// The length of the valid UTF-8 sequence at the start of `s` (its lead byte
// gives the length, simdjson checks it), or 0.
std::size_t ValidSequence(std::string_view s) {
  const auto lead = static_cast<unsigned char>(s[0]);
  const std::size_t n = lead < 0xc0 ? 0 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
  if (n == 0 || n > s.size()) return 0;
  return simdjson::validate_utf8(s.data(), n) ? n : 0;
}

}  // namespace

std::string Quote(std::string_view s) {
  std::string out = "\"";
  const bool valid = simdjson::validate_utf8(s.data(), s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (!valid && static_cast<unsigned char>(c) >= 0x80) {
      if (const std::size_t n = ValidSequence(s.substr(i))) {
        out.append(s, i, n);
        i += n - 1;
      } else {
        out += "\\ufffd";
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == '<' || c == '>' ||
            c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;  // (UTF-8 passes through as it is)
        }
    }
  }
  return out + "\"";
}

std::string Object(const Members& members) {
  std::string out = "{";
  for (const auto& [name, value] : members) {
    if (out.size() > 1) out += ',';
    out += Quote(name) + ":" + value;
  }
  return out + "}";
}

std::string Array(const std::vector<std::string>& values) {
  std::string out = "[";
  for (const std::string& v : values) {
    if (out.size() > 1) out += ',';
    out += v;
  }
  return out + "]";
}

}  // namespace delayd::http::json
