// A clock that moves only when a test moves it. Each change is acted on by
// the schedulers listening (Scheduler::ClockChanged) before the call
// returns: what came due has fired, been retried or been delivered to its
// subscribers' queues by then.
#ifndef DELAYD_TESTS_COMMON_FAKE_CLOCK_H_
#define DELAYD_TESTS_COMMON_FAKE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>

#include "server/core/clock.h"

namespace delayd::testing {

class FakeClock : public Clock {
 public:
  // Starts at a fixed wall time (2026-01-01T00:00:00Z) and an arbitrary
  // steady time.
  static constexpr WallNanos kStart = 1'767'225'600'000'000'000;

  WallNanos Wall() const override { return wall_.load(); }
  SteadyTime Steady() const override {
    return SteadyTime(std::chrono::nanoseconds(steady_.load()));
  }
  void Listen(const void* owner, std::function<void()> listener) override {
    std::lock_guard lock(mu_);
    if (listener) {
      listeners_[owner] = std::move(listener);
    } else {
      listeners_.erase(owner);
    }
  }

  // Time passes: both clocks move on by `d`.
  void Advance(std::chrono::nanoseconds d) {
    wall_ += d.count();
    steady_ += d.count();
    Tell();
  }
  // The wall clock is set forward (d > 0) or back (d < 0); steady time
  // does not move.
  void StepWall(std::chrono::nanoseconds d) {
    wall_ += d.count();
    Tell();
  }
  // The monotonic clock stood still for `d` (a suspend) while wall time
  // passed.
  void PauseSteady(std::chrono::nanoseconds d) { StepWall(d); }

 private:
  void Tell() {
    std::lock_guard lock(mu_);
    for (auto& [owner, listener] : listeners_) listener();
  }

  std::atomic<WallNanos> wall_{kStart};
  std::atomic<std::int64_t> steady_{3'600'000'000'000'000};  // 1000 h.
  std::mutex mu_;
  std::map<const void*, std::function<void()>> listeners_;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_FAKE_CLOCK_H_
