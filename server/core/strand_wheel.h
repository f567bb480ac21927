// A TimingWheel driven by an Asio steady_timer on a strand, on the time of
// a Clock (clock.h).
//
// One owner, one wake-up: the steady_timer is armed for the earliest due
// time only (never a fixed ticker), so an idle owner with millions of
// pending timers uses no CPU. Each wake-up takes every due timer out of the
// wheel first, then hands them to the owner's callback (which may change the
// wheel), then re-arms for the wheel's exact NextDeadline().
//
// Thread safety: every method runs on the strand given at construction or,
// if an Exclusive is given too, holding it (the timer's completion then takes
// it before it fires). After a change of the clock other than time passing,
// the owner calls Fire(): the armed wake-up may then be early or late.
#ifndef DELAYD_SERVER_CORE_STRAND_WHEEL_H_
#define DELAYD_SERVER_CORE_STRAND_WHEEL_H_

#include <asio.hpp>
#include <atomic>
#include <cassert>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "server/core/clock.h"
#include "wheel/timing_wheel.h"

namespace delayd {

using Strand = asio::strand<asio::io_context::executor_type>;

// Mutual exclusion for state that lives on a strand but that other threads
// may also enter directly when it is free (see Partition::Run): whoever holds
// it owns the state. Debug builds record the holder, so that confined code can
// assert that it holds it; release builds keep the lock alone (it is taken by
// every operation and every strand handler of a partition).
class Exclusive {
 public:
  void lock() {
    mu_.lock();
    NoteOwner(true);
  }
  bool try_lock() {
    if (!mu_.try_lock()) return false;
    NoteOwner(true);
    return true;
  }
  void unlock() {
    NoteOwner(false);
    mu_.unlock();
  }
  // Whether the calling thread holds it. For assertions: always true in
  // release builds, which do not track the holder.
  bool held() const {
#ifndef NDEBUG
    return owner_.load(std::memory_order_relaxed) == std::this_thread::get_id();
#else
    return true;
#endif
  }

 private:
  void NoteOwner([[maybe_unused]] bool held) {
#ifndef NDEBUG
    owner_.store(held ? std::this_thread::get_id() : std::thread::id(),
                 std::memory_order_relaxed);
#endif
  }

  std::mutex mu_;
#ifndef NDEBUG
  std::atomic<std::thread::id> owner_{};
#endif
};

class StrandWheel {
 public:
  using Expired = wheel::TimingWheel::Expired;
  // Called on the strand with every timer due at a wake-up, in order.
  using OnExpired = std::function<void(std::vector<Expired>& due)>;

  // `epoch` is the steady instant that wheel time 0 stands for.
  StrandWheel(Strand& strand, Exclusive* exclusive, const Clock& clock,
              std::chrono::nanoseconds tick, SteadyTime epoch,
              OnExpired on_expired)
      : strand_(strand),
        exclusive_(exclusive),
        clock_(clock),
        timer_(strand),
        epoch_(epoch),
        wheel_(tick),
        on_expired_(std::move(on_expired)) {}

  wheel::TimingWheel& wheel() { return wheel_; }
  const wheel::TimingWheel& wheel() const { return wheel_; }

  // The wheel time of a steady instant.
  wheel::TimingWheel::Time ToWheel(SteadyTime t) const { return t - epoch_; }
  wheel::TimingWheel::Time Now() const { return ToWheel(clock_.Steady()); }

  // Call after scheduling or rescheduling `handle`: arms the timer for it if
  // it is due before the armed wake-up. Removing timers needs no call: the
  // armed wake-up (never later than the earliest timer) then finds nothing
  // due and re-arms for the exact next deadline. So operations never pay for
  // NextDeadline(), and an idle owner never wakes for nothing.
  void Scheduled(wheel::TimingWheel::Handle handle) {
    assert(Owned());
    if (stopped_) return;
    const auto due = wheel_.Due(handle);
    if (due && (!armed_ || *due < *armed_)) ArmAt(*due);
  }

  // Processes whatever is due now and re-arms for the next deadline.
  void Fire() {
    assert(Owned());
    if (stopped_) return;
    due_.clear();
    const wheel::TimingWheel::Time now = Now();
    // An armed wake-up already passed (the clock jumped past it): its timer
    // will find itself superseded.
    if (armed_ && *armed_ <= now) armed_.reset();
    wheel_.Advance(now, [this](const Expired& e) { due_.push_back(e); });
    if (!due_.empty()) on_expired_(due_);
    if (const auto next = wheel_.NextDeadline()) {
      if (!armed_ || *next < *armed_) ArmAt(*next);
    }
  }

  bool stopped() const { return stopped_; }

  // Fires nothing more.
  void Stop() {
    assert(Owned());
    stopped_ = true;
    armed_.reset();
    timer_.cancel();
  }

 private:
  void ArmAt(wheel::TimingWheel::Time at) {
    armed_ = at;
    // (Waits out the difference on the clock: exact for the system clock;
    // a fake clock's changes come through the owner's Fire.)
    timer_.expires_after(epoch_ + at - clock_.Steady());
    timer_.async_wait([this, at](const asio::error_code& ec) {
      if (ec) return;
      std::unique_lock<Exclusive> lock;
      if (exclusive_) lock = std::unique_lock(*exclusive_);
      if (!armed_ || *armed_ != at) return;  // Superseded.
      armed_.reset();
      Fire();
    });
  }

  bool Owned() const {
    return exclusive_ ? exclusive_->held() : strand_.running_in_this_thread();
  }

  Strand& strand_;
  Exclusive* const exclusive_;
  const Clock& clock_;
  asio::steady_timer timer_;
  const SteadyTime epoch_;
  wheel::TimingWheel wheel_;
  OnExpired on_expired_;
  std::optional<wheel::TimingWheel::Time> armed_;
  bool stopped_ = false;
  std::vector<Expired> due_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_STRAND_WHEEL_H_
