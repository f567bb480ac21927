// The executor under a dispatcher's strand: the pool, except that a turn of
// the strand asked for from a thread outside any such turn runs there.
//
// A worker's Ack comes in on one of gRPC's threads. Posted to the strand, it
// woke a pool thread, which also wrote the ack to the store (under
// `--fsync 1s` or `never`): at a steady pace, a sleeping thread woken per
// ack. Over InlineFirst, asio::dispatch(strand, f) from gRPC's thread runs
// the strand's turn on that thread when the strand is free (when it is
// not, f waits in the strand's queue for the turn under way, as a post
// would), and what the turn defers with Later() runs on that thread once
// the turn is over (tests/bench/README.md: "Acks handled on the thread that
// took them").
//
// What stays on the pool: asio::post and asio::defer (both ask for
// blocking.never), the rest of the strand's queue after an inline turn (asio
// asks for blocking.never to schedule it), timers' completions, and a turn
// asked for while one runs on this thread already — so turns never nest,
// and a thread that asked for one turn runs that one only.
//
// An inline turn is a Turn (turn.h): what it defers runs when it is over,
// on its thread, before dispatch() returns. So the caller must hold no lock
// that the strand's work takes (see Dispatcher::Ack).
#ifndef DELAYD_SERVER_CORE_INLINE_FIRST_H_
#define DELAYD_SERVER_CORE_INLINE_FIRST_H_

#include <asio.hpp>
#include <functional>
#include <utility>

#include "server/core/loop_executor.h"
#include "server/core/turn.h"

namespace delayd {

class InlineFirst {
 public:
  // `never`: every execute() posts (what asio's require(blocking.never)
  // gives).
  explicit InlineFirst(LoopExecutor pool, bool never = false)
      : pool_(std::move(pool)), never_(never) {}

  asio::execution_context& query(asio::execution::context_t) const noexcept {
    return asio::query(pool_, asio::execution::context);
  }
  asio::execution::blocking_t query(
      asio::execution::blocking_t) const noexcept {
    if (never_) return asio::execution::blocking.never;
    return asio::execution::blocking.possibly;
  }
  InlineFirst require(asio::execution::blocking_t::never_t) const {
    return InlineFirst(pool_, true);
  }
  InlineFirst require(asio::execution::blocking_t::possibly_t) const {
    return InlineFirst(pool_, false);
  }

  // Runs `f` here, in a turn, if this may block and no inline turn runs on
  // this thread; else posts it to the pool.
  template <typename F>
  void execute(F&& f) const {
    if (never_ || Depth() > 0) {
      asio::post(pool_, std::forward<F>(f));
      return;
    }
    ++Depth();
    {
      Turn turn;
      f();
    }
    --Depth();
  }

  // Runs `f` on this thread once the inline turn running here is over, if
  // one is; else defers it to the pool (asio::defer: from a pool thread,
  // on that thread once its handler returns).
  void Later(std::function<void()> f) const {
    if (Depth() > 0) {
      Turn::Defer(std::move(f));
    } else {
      asio::defer(pool_, std::move(f));
    }
  }

  friend bool operator==(const InlineFirst& a, const InlineFirst& b) noexcept {
    return a.pool_ == b.pool_ && a.never_ == b.never_;
  }
  friend bool operator!=(const InlineFirst& a, const InlineFirst& b) noexcept {
    return !(a == b);
  }

 private:
  // Inline turns under way on this thread (0 or 1).
  static int& Depth() {
    thread_local int depth = 0;
    return depth;
  }

  LoopExecutor pool_;
  bool never_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_INLINE_FIRST_H_
