// The scheduler's io_context, run either by a pool of threads or by one
// loop that also waits on something else between its polls of the
// io_context (the gRPC completion queue: server/api/loop_server.h). A
// thread blocked in that other wait does not see work posted to the
// io_context, nor the io_context's timers expiring; so under a loop:
// - every post goes through a LoopExecutor, which wakes the loop when the
//   post comes from another thread (LoopWake);
// - timers wait on a timer thread of their own (Scheduler::timers()) and
//   hand their completions to a LoopExecutor.
// Without a loop, LoopWake wakes nothing and a LoopExecutor is the
// io_context's own executor.
#ifndef DELAYD_SERVER_CORE_LOOP_EXECUTOR_H_
#define DELAYD_SERVER_CORE_LOOP_EXECUTOR_H_

#include <asio.hpp>
#include <functional>
#include <utility>

namespace delayd {

class LoopWake {
 public:
  // Set once, before anything is posted: how another thread wakes the loop.
  void Set(std::function<void()> wake) { wake_ = std::move(wake); }
  bool set() const { return static_cast<bool>(wake_); }
  // The loop's thread marks itself before it first polls.
  static void EnterLoop() { OnLoopFlag() = true; }
  static bool OnLoop() { return OnLoopFlag(); }
  // Called after work was posted to the io_context: wakes the loop, unless
  // this is the loop's thread (it polls again before it waits).
  void Posted() const {
    if (wake_ && !OnLoop()) wake_();
  }

 private:
  static bool& OnLoopFlag() {
    thread_local bool on = false;
    return on;
  }
  std::function<void()> wake_;
};

// An executor of the io_context whose execute() also tells `wake` (null:
// nobody). Every property is the inner executor's.
template <typename Inner>
class BasicLoopExecutor {
 public:
  BasicLoopExecutor(Inner inner, const LoopWake* wake)
      : inner_(std::move(inner)), wake_(wake) {}

  template <typename Property>
  auto query(const Property& p) const
      -> decltype(asio::query(std::declval<const Inner&>(), p)) {
    return asio::query(inner_, p);
  }
  template <typename Property>
  auto require(const Property& p) const -> BasicLoopExecutor<
      std::decay_t<decltype(asio::require(std::declval<const Inner&>(), p))>> {
    return {asio::require(inner_, p), wake_};
  }

  template <typename F>
  void execute(F&& f) const {
    asio::execution::execute(inner_, std::forward<F>(f));
    if (wake_ != nullptr) wake_->Posted();
  }

  // Whether the caller runs on the io_context (any of its threads).
  bool running_in_this_thread() const noexcept {
    return inner_.running_in_this_thread();
  }

  friend bool operator==(const BasicLoopExecutor& a,
                         const BasicLoopExecutor& b) noexcept {
    return a.inner_ == b.inner_ && a.wake_ == b.wake_;
  }
  friend bool operator!=(const BasicLoopExecutor& a,
                         const BasicLoopExecutor& b) noexcept {
    return !(a == b);
  }

 private:
  template <typename>
  friend class BasicLoopExecutor;
  Inner inner_;
  const LoopWake* wake_;
};

using LoopExecutor = BasicLoopExecutor<asio::io_context::executor_type>;

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_LOOP_EXECUTOR_H_
