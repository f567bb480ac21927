// A wall-clock instant as RFC 3339 text in UTC, to the millisecond
// ("2026-11-29T10:15:00.000Z"), for messages and headers.
#ifndef DELAYD_SERVER_COMMON_RFC3339_H_
#define DELAYD_SERVER_COMMON_RFC3339_H_

#include <cstdio>
#include <ctime>
#include <string>

#include "server/common/types.h"

namespace delayd {

inline std::string Rfc3339Millis(WallNanos t) {
  const std::time_t secs = static_cast<std::time_t>(t / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  const std::size_t n =
      std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char frac[16];
  std::snprintf(frac, sizeof frac, ".%03dZ",
                static_cast<int>((t / 1'000'000) % 1000));
  return std::string(buf, n) + frac;
}

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_RFC3339_H_
