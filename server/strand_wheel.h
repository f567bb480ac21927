// A TimingWheel driven by an Asio steady_timer on a strand.
//
// One owner, one wake-up: the steady_timer is armed for the earliest due
// time only (never a fixed ticker), so an idle owner with millions of
// pending timers uses no CPU. Each wake-up takes every due timer out of the
// wheel first, then hands them to the owner's callback (which may change the
// wheel), then re-arms for the wheel's exact NextDeadline().
//
// Thread safety: every method runs on the strand given at construction.
#ifndef DELAYD_SERVER_STRAND_WHEEL_H_
#define DELAYD_SERVER_STRAND_WHEEL_H_

#include <asio.hpp>
#include <cassert>
#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "wheel/timing_wheel.h"

namespace delayd {

using Strand = asio::strand<asio::io_context::executor_type>;
using SteadyTime = std::chrono::steady_clock::time_point;

class StrandWheel {
 public:
  using Expired = wheel::TimingWheel::Expired;
  // Called on the strand with every timer due at a wake-up, in order.
  using OnExpired = std::function<void(std::vector<Expired>& due)>;

  // `epoch` is the steady instant that wheel time 0 stands for.
  StrandWheel(Strand& strand, std::chrono::nanoseconds tick, SteadyTime epoch,
              OnExpired on_expired)
      : strand_(strand),
        timer_(strand),
        epoch_(epoch),
        wheel_(tick),
        on_expired_(std::move(on_expired)) {}

  wheel::TimingWheel& wheel() { return wheel_; }
  const wheel::TimingWheel& wheel() const { return wheel_; }

  // The wheel time of a steady instant.
  wheel::TimingWheel::Time ToWheel(SteadyTime t) const { return t - epoch_; }
  wheel::TimingWheel::Time Now() const {
    return ToWheel(std::chrono::steady_clock::now());
  }

  // Call after scheduling or rescheduling `handle`: arms the timer for it if
  // it is due before the armed wake-up. Removing timers needs no call: the
  // armed wake-up (never later than the earliest timer) then finds nothing
  // due and re-arms for the exact next deadline. So operations never pay for
  // NextDeadline(), and an idle owner never wakes for nothing.
  void Scheduled(wheel::TimingWheel::Handle handle) {
    assert(strand_.running_in_this_thread());
    if (stopped_) return;
    const auto due = wheel_.Due(handle);
    if (due && (!armed_ || *due < *armed_)) ArmAt(*due);
  }

  // Processes whatever is due now and re-arms for the next deadline. Runs on
  // the strand.
  void Fire() {
    assert(strand_.running_in_this_thread());
    if (stopped_) return;
    due_.clear();
    wheel_.Advance(Now(), [this](const Expired& e) { due_.push_back(e); });
    if (!due_.empty()) on_expired_(due_);
    if (const auto next = wheel_.NextDeadline()) {
      if (!armed_ || *next < *armed_) ArmAt(*next);
    }
  }

  // Fires nothing more. Runs on the strand.
  void Stop() {
    stopped_ = true;
    armed_.reset();
    timer_.cancel();
  }

 private:
  void ArmAt(wheel::TimingWheel::Time at) {
    armed_ = at;
    timer_.expires_at(epoch_ + at);
    timer_.async_wait([this, at](const asio::error_code& ec) {
      if (ec || !armed_ || *armed_ != at) return;  // Superseded.
      armed_.reset();
      Fire();
    });
  }

  Strand& strand_;
  asio::steady_timer timer_;
  const SteadyTime epoch_;
  wheel::TimingWheel wheel_;
  OnExpired on_expired_;
  std::optional<wheel::TimingWheel::Time> armed_;
  bool stopped_ = false;
  std::vector<Expired> due_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_STRAND_WHEEL_H_
