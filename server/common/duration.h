// Parses durations written like Go's: "1h30m", "500ms", "90s", "2d", "250us".
// Used by delayd's flags and by delayctl.
#ifndef DELAYD_SERVER_COMMON_DURATION_H_
#define DELAYD_SERVER_COMMON_DURATION_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace delayd {

// A sequence of <digits><unit> with units ns, us, ms, s, m, h, d. Returns
// nullopt for anything else (empty, a sign, an unknown unit, overflow).
inline std::optional<std::chrono::nanoseconds> ParseDuration(
    std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::int64_t total = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    std::int64_t n = 0;
    const std::size_t digits_start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (n > (INT64_MAX - 9) / 10) return std::nullopt;
      n = n * 10 + (text[i++] - '0');
    }
    if (i == digits_start) return std::nullopt;
    std::size_t unit_start = i;
    while (i < text.size() && text[i] >= 'a' && text[i] <= 'z') ++i;
    const std::string_view unit = text.substr(unit_start, i - unit_start);
    std::int64_t scale;
    if (unit == "ns") {
      scale = 1;
    } else if (unit == "us") {
      scale = 1'000;
    } else if (unit == "ms") {
      scale = 1'000'000;
    } else if (unit == "s") {
      scale = 1'000'000'000;
    } else if (unit == "m") {
      scale = 60'000'000'000;
    } else if (unit == "h") {
      scale = 3'600'000'000'000;
    } else if (unit == "d") {
      scale = 86'400'000'000'000;
    } else {
      return std::nullopt;
    }
    if (n > (INT64_MAX - total) / scale) return std::nullopt;
    total += n * scale;
  }
  return std::chrono::nanoseconds(total);
}

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_DURATION_H_
