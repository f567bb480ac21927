// Dispatcher: watchers, the streams that see each event once, when it is
// published, and never acknowledge (dispatcher.h), and the per-stream
// counts of subscribers.
#include <algorithm>
#include <limits>

#include "server/common/limit_log.h"
#include "server/core/dispatcher.h"

namespace delayd {

void Dispatcher::ToWatchers(std::span<const Event* const> events) {
  if (watchers_.empty()) return;
  if (store_ == nullptr) {
    for (std::size_t from = 0; from < events.size() && !watchers_.empty();
         from += kWatchChunk) {
      DeliverToWatchers(
          events.subspan(from, std::min(kWatchChunk, events.size() - from)),
          std::numeric_limits<std::uint64_t>::max());
    }
    return;
  }
  // Their payloads are read on the pool (StartWatchRead); the copies wait
  // meanwhile, no more of them than a watcher may fall behind.
  std::uint64_t upto = 0;
  for (const auto& [id, sink] : watchers_) upto = std::max(upto, id);
  const std::shared_ptr<const Store::View> view = store_->NewView();
  for (const Event* e : events) {
    if (watch_queue_.size() >= limits_.watcher_backlog) {
      ClearWatchQueue();
      EndWatchers(WatchersBehind());
      return;
    }
    watch_queue_.push_back(
        {CopyWithPayload(*e, e->blob.payload()), upto, view});
    watch_pending_.insert(e->id);
  }
  if (!watch_reading_) StartWatchRead();
}

Status Dispatcher::WatchersBehind() const {
  return Status::ResourceExhausted(
      "watcher fell more than " + std::to_string(limits_.watcher_backlog) +
      " events or " + std::to_string(limits_.watcher_backlog_bytes) +
      " bytes behind (the watcher-backlog limits)");
}

void Dispatcher::Count(const Subscriber& s, bool watcher, bool joined) {
  if (s.relayed) return;
  auto& all = watcher ? counters_.watchers : counters_.workers;
  auto& mine = watcher ? mine_.watchers : mine_.workers;
  if (joined) {
    all.fetch_add(1);
    mine.fetch_add(1, std::memory_order_relaxed);
  } else {
    all.fetch_sub(1);
    mine.fetch_sub(1, std::memory_order_relaxed);
  }
}

Dispatcher::Watchers::iterator Dispatcher::DropWatcher(Watchers::iterator it) {
  Count(*it->second, true, false);
  refs_->Release(id_);
  return watchers_.erase(it);
}

void Dispatcher::EndWatchers(const Status& status) {
  LogLimitHit("watcher-backlog", status.message());
  while (!watchers_.empty()) {
    watchers_.back().second->End(status);
    DropWatcher(watchers_.end() - 1);
  }
}

void Dispatcher::DeliverToWatchers(std::span<const Event* const> view,
                                   std::uint64_t upto) {
  if (view.empty()) return;
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    if (it->first > upto) {  // Came after these were published.
      ++it;
      continue;
    }
    const Subscriber::Backlog b = it->second->Deliver(name_, view);
    if (b.events > limits_.watcher_backlog ||
        b.bytes > limits_.watcher_backlog_bytes) {
      const Status ended = WatchersBehind();
      LogLimitHit("watcher-backlog", ended.message());
      it->second->End(ended);
      it = DropWatcher(it);
    } else {
      ++it;
    }
  }
}

}  // namespace delayd
