// What keeps each namespace alive: its pending timers, its events not yet
// acknowledged, its subscribers, and the calls in progress that resolved it
// (pins). A namespace whose count falls to zero is freed, in memory and in
// the store, and its id can serve a new namespace.
//
// Increments from zero happen only under the scheduler's namespace lock
// (a pin taken by a lookup, a subscriber registered) or while the caller
// holds a pin (a timer set); so the scheduler, holding that lock
// exclusively, can tell for sure that a namespace is unused. Decrements of
// stored things (a timer removed, an event acknowledged) happen only once
// that change is durable, so a freed namespace's records are all deleted in
// the store before its name is.
//
// Thread safety: every method may be called from any thread.
#ifndef DELAYD_SERVER_CORE_NAMESPACE_REFS_H_
#define DELAYD_SERVER_CORE_NAMESPACE_REFS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "server/common/types.h"

namespace delayd {

class NamespaceRefs {
 public:
  // `on_zero(ns)` runs on the thread whose Release brought ns to zero; it
  // must not block.
  NamespaceRefs(std::size_t namespaces,
                std::function<void(NamespaceId)> on_zero)
      : counts_(new std::atomic<std::int64_t>[namespaces]()),
        on_zero_(std::move(on_zero)) {}

  void Add(NamespaceId ns, std::int64_t n = 1) {
    counts_[ns].fetch_add(n, std::memory_order_relaxed);
  }
  void Release(NamespaceId ns, std::int64_t n = 1) {
    if (n != 0 && counts_[ns].fetch_sub(n, std::memory_order_acq_rel) == n) {
      on_zero_(ns);
    }
  }
  std::int64_t Get(NamespaceId ns) const {
    return counts_[ns].load(std::memory_order_acquire);
  }

 private:
  std::unique_ptr<std::atomic<std::int64_t>[]> counts_;
  std::function<void(NamespaceId)> on_zero_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_NAMESPACE_REFS_H_
