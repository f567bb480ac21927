// When a failed delivery is tried again.
//
// A delivery fails when its worker says so (Nack without a time) or lets the
// ack deadline pass. The event then waits a backoff that grows with its
// attempts: initial × multiplier^(attempt - 1), at most `max`. Without the
// wait, a poison event whose worker crashes on it would come back at once,
// over and over, taking the workers from every other event.
#ifndef DELAYD_SERVER_COMMON_RETRY_H_
#define DELAYD_SERVER_COMMON_RETRY_H_

#include <chrono>
#include <cmath>
#include <cstdint>

namespace delayd {

struct RetryPolicy {
  std::chrono::nanoseconds initial_backoff = std::chrono::seconds(1);
  double multiplier = 2.0;
  std::chrono::nanoseconds max_backoff = std::chrono::minutes(10);
  // 0 .. 1: the wait is cut by up to this fraction, at random, so events
  // that failed together do not all come back together.
  double jitter = 0;

  bool operator==(const RetryPolicy&) const = default;
};

// The wait after failed attempt `attempt` (1 for the first delivery);
// `random` in [0, 1) draws the jitter: the wait is in
// [backoff × (1 - jitter), backoff].
inline std::chrono::nanoseconds Backoff(const RetryPolicy& p,
                                        std::uint32_t attempt,
                                        double random = 0) {
  const double max = static_cast<double>(p.max_backoff.count());
  double wait = static_cast<double>(p.initial_backoff.count()) *
                std::pow(p.multiplier, attempt == 0 ? 0.0 : attempt - 1.0);
  // (Compared as doubles: a large attempt overflows any integer.)
  if (!(wait < max)) wait = max;
  wait *= 1.0 - p.jitter * random;
  return std::chrono::nanoseconds(static_cast<std::int64_t>(wait));
}

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_RETRY_H_
