// A TimingWheel with one Asio timer armed for its earliest deadline, on the
// time of a Clock (clock.h).
//
// One owner, one wake-up: the timer is armed for the earliest due time only
// (never a fixed ticker), so an idle owner with millions of pending timers
// uses no CPU. At each wake-up the owner takes every due timer out of the
// wheel first (TakeDue), acts on them (it may change the wheel), then
// re-arms (Rearm) for the next deadline, or kCoalesce after the pass.
//
// Thread safety: none of its own. It belongs to one owner, which calls
// every method holding its lock (a partition) or on its strand (a
// dispatcher). The timer's completion, which holds neither, only calls the
// owner's `on_alarm(at)`; the owner, once it holds its lock or strand, asks
// Alarmed(at) whether that wake-up still stands. After a change of the
// clock other than time passing, the owner takes what is due at once: the
// armed wake-up may then be early or late.
//
// The end of a pass arms no sooner than kCoalesce after the pass's instant
// (the timer slack Linux gives a sleeping thread): timers due within it
// wait for the next pass together, later by at most kCoalesce, never
// earlier. Each wake-up costs a timerfd_settime and a thread's wake: in a
// burst of timers microseconds apart, timerfd_settime alone took about 38 %
// of the scheduler threads' CPU on this virtual machine (tests/bench/
// README.md). Outside a pass (a timer set sooner than the armed wake-up) it
// arms for the exact time.
#ifndef DELAYD_SERVER_CORE_ALARM_WHEEL_H_
#define DELAYD_SERVER_CORE_ALARM_WHEEL_H_

#include <algorithm>
#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "server/core/clock.h"
#include "wheel/timing_wheel.h"

namespace delayd {

class AlarmWheel {
 public:
  using Time = wheel::TimingWheel::Time;
  using Expired = wheel::TimingWheel::Expired;

  // The least time from a pass to the wake-up its Rearm() arms: timers due
  // within it wait for the next pass, later by at most this, never earlier.
  // (See the top.)
  static constexpr std::chrono::nanoseconds kCoalesce{50'000};
  // Wheel time 0 is `epoch`; completions call on_alarm(at) on `executor`.
  // The timer waits on `timers` (the same executor, or the timer thread's
  // of a loop: loop_executor.h).
  AlarmWheel(asio::any_io_executor executor, asio::any_io_executor timers,
             const Clock& clock, std::chrono::nanoseconds tick,
             SteadyTime epoch, std::function<void(Time)> on_alarm)
      : clock_(clock),
        executor_(std::move(executor)),
        timer_(std::move(timers)),
        epoch_(epoch),
        wheel_(tick),
        on_alarm_(std::move(on_alarm)) {}

  wheel::TimingWheel& wheel() { return wheel_; }
  const wheel::TimingWheel& wheel() const { return wheel_; }

  // The wheel time of a steady instant.
  Time ToWheel(SteadyTime t) const { return t - epoch_; }
  Time Now() const { return ToWheel(clock_.Steady()); }

  // Call after scheduling or rescheduling `handle`: arms the timer for it if
  // it is due before the armed wake-up. Removing timers needs no call: the
  // armed wake-up (no later than the earliest timer, or kCoalesce after a
  // pass) then finds nothing due and re-arms. So operations never pay for
  // NextDeadline(), and an idle owner never wakes for nothing. Between
  // TakeDue() and Rearm() it does nothing: Rearm() arms once for what the
  // pass scheduled (a timer set due now in a pass would otherwise arm the
  // timer, then be taken by the pass and the wake-up re-armed: a system
  // call and a spent completion each).
  void Scheduled(wheel::TimingWheel::Handle handle) {
    if (stopped_ || in_pass_) return;
    const auto due = wheel_.Due(handle);
    if (due && (!armed_ || *due < *armed_)) ArmAt(*due);
  }

  // Whether the wake-up armed for `at` still stands (not superseded by an
  // earlier one, nor stopped); if so, it is spent, and the owner calls
  // TakeDue() and Rearm().
  bool Alarmed(Time at) {
    if (stopped_ || !armed_ || *armed_ != at) return false;
    armed_.reset();
    return true;
  }

  // Takes every timer due now out of the wheel into `due` (cleared first),
  // in order. Nothing if stopped. Begins a pass, which the owner ends with
  // Rearm().
  void TakeDue(std::vector<Expired>* due) {
    due->clear();
    if (stopped_) return;
    in_pass_ = true;
    const Time now = Now();
    pass_at_ = now;
    // An armed wake-up already passed (the clock jumped past it): its
    // completion will find itself superseded.
    if (armed_ && *armed_ <= now) armed_.reset();
    wheel_.Advance(now, [due](const Expired& e) { due->push_back(e); });
  }

  // Arms the timer for the wheel's next deadline (no sooner than kCoalesce
  // after the pass), if that comes before the armed wake-up. Ends a pass.
  void Rearm() {
    in_pass_ = false;
    if (stopped_) return;
    if (const auto next = wheel_.NextDeadline()) {
      const Time at = std::max<Time>(*next, pass_at_ + kCoalesce);
      if (!armed_ || at < *armed_) ArmAt(at);
    }
  }

  bool stopped() const { return stopped_; }
  // How many times the timer was armed: each is a system call, and each
  // superseded one a spent completion.
  std::uint64_t arms() const { return arms_; }
  // The wheel time the timer is armed for, if it is.
  std::optional<Time> armed() const { return armed_; }

  // Fires nothing more.
  void Stop() {
    stopped_ = true;
    armed_.reset();
    timer_.cancel();
  }

 private:
  void ArmAt(Time at) {
    armed_ = at;
    ++arms_;
    // (Waits out the difference on the clock: exact for the system clock;
    // a fake clock's changes come through the owner.)
    timer_.expires_after(epoch_ + at - clock_.Steady());
    timer_.async_wait(
        asio::bind_executor(executor_, [this, at](const asio::error_code& ec) {
          if (!ec) on_alarm_(at);
        }));
  }

  const Clock& clock_;
  const asio::any_io_executor executor_;
  asio::steady_timer timer_;
  const SteadyTime epoch_;
  wheel::TimingWheel wheel_;
  std::function<void(Time)> on_alarm_;
  std::optional<Time> armed_;
  bool in_pass_ = false;  // between TakeDue() and Rearm()
  Time pass_at_{};        // the last pass's instant
  std::uint64_t arms_ = 0;
  bool stopped_ = false;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_ALARM_WHEEL_H_
