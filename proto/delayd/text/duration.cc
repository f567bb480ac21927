#include "delayd/text/duration.h"

#include <cstdint>

namespace delayd {

std::optional<std::chrono::nanoseconds> ParseDuration(std::string_view text) {
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

std::string FormatDuration(std::chrono::nanoseconds d) {
  static constexpr struct {
    const char* unit;
    std::int64_t ns;
  } kUnits[] = {{"d", 86'400'000'000'000},
                {"h", 3'600'000'000'000},
                {"m", 60'000'000'000},
                {"s", 1'000'000'000},
                {"ms", 1'000'000},
                {"us", 1'000},
                {"ns", 1}};
  std::int64_t left = d.count();
  if (left <= 0) return "0s";
  std::string out;
  for (const auto& u : kUnits) {
    if (left >= u.ns) {
      out += std::to_string(left / u.ns) + u.unit;
      left %= u.ns;
    }
  }
  return out;
}

}  // namespace delayd
