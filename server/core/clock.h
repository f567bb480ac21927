// The core's one source of time. Partitions, dispatchers and ack timeouts
// read the clock the scheduler is given, never the system clocks, so tests
// drive time with a fake one (tests/common/fake_clock.h).
//
// Two readings: wall time, which fire times are in (what clients see), and
// steady time, which the wheels run on (it never goes back). A timer's steady
// deadline is derived from its wall fire time by the offset between the two.
// When that offset moves (the wall clock was stepped either way, or the
// monotonic clock stood still through a suspend), the scheduler
// re-derives every pending deadline (Scheduler::ClockChanged), so a timer
// fires at its wall-clock time; a timer is never fired before it either way.
//
// Thread safety: every method may be called from any thread.
#ifndef DELAYD_SERVER_CORE_CLOCK_H_
#define DELAYD_SERVER_CORE_CLOCK_H_

#include <chrono>
#include <functional>

#include "server/common/types.h"

namespace delayd {

using SteadyTime = std::chrono::steady_clock::time_point;

// The first multiple of `period` of the system's steady clock after now:
// for Asio's timers, which run on that clock (not on a Clock).
// Periodic work armed on this grid (the clock poll, the layers' own checks,
// all on Scheduler::housekeeping()) falls due together and is run by one
// wake-up of one thread, not a wake-up each: an idle daemon's CPU is its
// wake-ups.
inline std::chrono::steady_clock::time_point NextTick(
    std::chrono::nanoseconds period) {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  if (period.count() <= 0) return std::chrono::steady_clock::time_point(now);
  return std::chrono::steady_clock::time_point((now / period + 1) * period);
}

class Clock {
 public:
  virtual ~Clock() = default;
  virtual WallNanos Wall() const = 0;
  virtual SteadyTime Steady() const = 0;
  // Wall time minus steady time: what a step or a pause moves.
  std::chrono::nanoseconds Offset() const {
    return std::chrono::nanoseconds(Wall()) - Steady().time_since_epoch();
  }
  // `listener` is called after each change of the clock other than time
  // passing (a fake clock's advance or step), and returns once the change
  // has been acted on; a null listener removes `owner`'s. The system clock
  // never calls it: the scheduler has the kernel report its steps and
  // resumes, and polls it as a net (Scheduler::Options::clock_poll).
  virtual void Listen(const void* owner, std::function<void()> listener) {
    (void)owner;
    (void)listener;
  }

  // The system's clocks: system_clock and steady_clock.
  static Clock& System();
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_CLOCK_H_
