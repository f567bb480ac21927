// A turn: one handler's run on a thread (a dispatcher's handling of an ack),
// during which what a subscriber would write is gathered and written once
// the turn is over. An ack lets the next events go and is answered in the
// same turn: gathered, the answer and those events leave in one message
// instead of two, and the worker reads once per ack instead of twice.
//
// Thread-confined: a turn belongs to the thread that opened it, and what it
// defers runs on that thread, in order, when the outermost turn closes.
#ifndef DELAYD_SERVER_CORE_TURN_H_
#define DELAYD_SERVER_CORE_TURN_H_

#include <functional>
#include <utility>
#include <vector>

namespace delayd {

class Turn {
 public:
  Turn() { ++Depth(); }
  ~Turn() {
    if (Depth() > 1) {
      --Depth();
      return;
    }
    // (What runs here may defer more: it runs before the turn closes.)
    for (std::size_t i = 0; i < Deferred().size(); ++i) {
      std::function<void()> f = std::move(Deferred()[i]);
      f();
    }
    Deferred().clear();
    --Depth();
  }
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;

  // Whether this thread is in a turn.
  static bool Open() { return Depth() > 0; }
  // Runs `f` when this thread's turn closes. Only while Open().
  static void Defer(std::function<void()> f) {
    Deferred().push_back(std::move(f));
  }

 private:
  static int& Depth() {
    thread_local int depth = 0;
    return depth;
  }
  static std::vector<std::function<void()>>& Deferred() {
    thread_local std::vector<std::function<void()>> deferred;
    return deferred;
  }
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_TURN_H_
