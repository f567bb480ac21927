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
#include <utility>

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

// A hold on a namespace in use by a call: while any pin of it lives, the
// namespace is not freed (its id keeps its name). Copying a pin adds a hold
// and destroying one releases it, so a pin captured by a callback lasts
// until the callback is gone. Thread safety: as NamespaceRefs.
class NamespacePin {
 public:
  NamespacePin() = default;
  // Takes over a hold `refs` already counts for `id`.
  static NamespacePin Adopt(NamespaceRefs* refs, NamespaceId id) {
    NamespacePin pin;
    pin.refs_ = refs;
    pin.id_ = id;
    return pin;
  }
  NamespacePin(const NamespacePin& other) : refs_(other.refs_), id_(other.id_) {
    if (refs_ != nullptr) refs_->Add(id_);
  }
  NamespacePin(NamespacePin&& other) noexcept
      : refs_(std::exchange(other.refs_, nullptr)), id_(other.id_) {}
  NamespacePin& operator=(NamespacePin other) noexcept {
    std::swap(refs_, other.refs_);
    std::swap(id_, other.id_);
    return *this;
  }
  ~NamespacePin() {
    if (refs_ != nullptr) refs_->Release(id_);
  }
  NamespaceId id() const { return id_; }

 private:
  NamespaceRefs* refs_ = nullptr;
  NamespaceId id_ = 0;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_NAMESPACE_REFS_H_
