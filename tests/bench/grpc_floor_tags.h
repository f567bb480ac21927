// What grpc_floor's completion-queue servers share: an operation's tag as
// the closure its completion runs, and one turn of a queue's loop.
#ifndef DELAYD_TESTS_BENCH_GRPC_FLOOR_TAGS_H_
#define DELAYD_TESTS_BENCH_GRPC_FLOOR_TAGS_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <utility>

namespace delayd::bench::floor {

// What a completion-queue operation does when it completes.
struct Tag {
  std::function<void(bool)> done;
};
inline void* NewTag(std::function<void(bool)> done) {
  return new Tag{std::move(done)};
}

// Waits on `cq` until `deadline` for one completion and runs its Tag (the
// process ends if the queue shuts down).
inline void RunNext(grpc::CompletionQueue* cq,
                    std::chrono::system_clock::time_point deadline) {
  void* tag;
  bool ok;
  switch (cq->AsyncNext(&tag, &ok, deadline)) {
    case grpc::CompletionQueue::SHUTDOWN:
      std::_Exit(0);
    case grpc::CompletionQueue::TIMEOUT:
      return;
    case grpc::CompletionQueue::GOT_EVENT: {
      auto* t = static_cast<Tag*>(tag);
      t->done(ok);
      delete t;
    }
  }
}

}  // namespace delayd::bench::floor

#endif  // DELAYD_TESTS_BENCH_GRPC_FLOOR_TAGS_H_
