// Durations as delayd's users write them, like Go's: "1h30m", "500ms",
// "90s", "2d", "250us". The daemon's flags and delayctl read them the same
// way: this library (delayd_text) is what the two share beside the .proto.
#ifndef DELAYD_PROTO_DELAYD_TEXT_DURATION_H_
#define DELAYD_PROTO_DELAYD_TEXT_DURATION_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace delayd {

// A sequence of <digits><unit> with units ns, us, ms, s, m, h, d. Returns
// nullopt for anything else (empty, a sign, an unknown unit, overflow).
std::optional<std::chrono::nanoseconds> ParseDuration(std::string_view text);

// `d` written as ParseDuration reads it, largest units first: "1h30m",
// "36500d", "100ms", "0s".
std::string FormatDuration(std::chrono::nanoseconds d);

}  // namespace delayd

#endif  // DELAYD_PROTO_DELAYD_TEXT_DURATION_H_
