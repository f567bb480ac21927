// A namespace's delivery policy: how failed deliveries retry, the default
// ack timeout, how fast and how many events may reach its workers, and
// whether delivery is paused. Kept by name, durably with a store, whether
// or not the namespace is in use.
#ifndef DELAYD_SERVER_COMMON_POLICY_H_
#define DELAYD_SERVER_COMMON_POLICY_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/common/push_target.h"
#include "server/common/retry.h"

namespace delayd {

struct Policy {
  // Deliveries an event gets; when the last fails it becomes a dead letter.
  // 0: unlimited.
  std::uint32_t max_attempts = 0;
  RetryPolicy retry;
  // For workers that subscribe without an ack timeout of their own.
  std::chrono::nanoseconds ack_timeout = std::chrono::seconds(30);
  // Events per second to all the namespace's workers together, and the
  // most at once after a quiet spell; 0: unlimited.
  double max_dispatch_rate = 0;
  std::uint32_t dispatch_burst = 0;  // 0: a second's worth (at least 1).
  // Events in flight across all workers; 0: only each worker's own limit.
  std::uint32_t max_in_flight = 0;
  // Timers still fire; their events wait until delivery resumes.
  bool paused = false;
  // Where events are pushed, if anywhere (push_target.h).
  PushTarget push;
  // How long a key that fired or was removed refuses a create-only set
  // (dedup_table.h); 0: not at all.
  std::chrono::nanoseconds dedup_window{0};

  bool operator==(const Policy&) const = default;
};

// The stored form: a version byte, the fields of fixed size, and then:
// version 1, nothing (the form builds before push delivery read); version
// 2, the push target; version 3, the dedup window, then whether a push
// target follows, and it. Each policy is written in the lowest version
// that holds it, so a store keeps the forms older builds read until a
// newer field is used.
std::string EncodePolicy(const Policy& p);
// Nullopt if `bytes` is not a policy this version wrote (a damaged record).
std::optional<Policy> DecodePolicy(std::string_view bytes);

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_POLICY_H_
