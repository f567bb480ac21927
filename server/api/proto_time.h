// Time conversions between the core's nanoseconds and protobuf's types.
#ifndef DELAYD_SERVER_API_PROTO_TIME_H_
#define DELAYD_SERVER_API_PROTO_TIME_H_

#include <google/protobuf/timestamp.pb.h>

#include <cstdint>

#include "server/common/types.h"

namespace delayd {

inline constexpr std::int64_t kNanosPerSecond = 1'000'000'000;

// Writes `ns` into `t` in place (a Timestamp built apart and copied in costs
// a construction, a copy and a destruction per result).
inline void SetTimestamp(WallNanos ns, google::protobuf::Timestamp* t) {
  std::int64_t s = ns / kNanosPerSecond;
  std::int64_t n = ns % kNanosPerSecond;
  if (n < 0) {
    n += kNanosPerSecond;
    --s;
  }
  t->set_seconds(s);
  t->set_nanos(static_cast<std::int32_t>(n));
}

}  // namespace delayd

#endif  // DELAYD_SERVER_API_PROTO_TIME_H_
