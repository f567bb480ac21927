// Logs that a limit was hit, rate-limited: at most one line per limit every
// 10 s, saying how many hits the previous interval had. A client that hits a
// limit in a loop cannot flood the log.
//
// Thread safety: may be called from any thread.
#ifndef DELAYD_SERVER_COMMON_LIMIT_LOG_H_
#define DELAYD_SERVER_COMMON_LIMIT_LOG_H_

#include <string_view>

namespace delayd {

// `limit` names the limit (a flag, e.g. "max-batch-ops"); `detail` is the
// message the client got.
void LogLimitHit(std::string_view limit, std::string_view detail);

// Logs an error that may repeat (e.g. a store read failing on every retry),
// rate-limited the same way, keyed by `what` (a fixed name from delayd's
// code).
void LogRepeated(std::string_view what, std::string_view detail);

// Logs a routine event (a subscriber connecting), at info level: at most
// kSampledLines lines per `what` every 10 s; the next line after a full
// interval says how many were left out.
inline constexpr int kSampledLines = 20;
void LogSampled(std::string_view what, std::string_view detail);

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_LIMIT_LOG_H_
