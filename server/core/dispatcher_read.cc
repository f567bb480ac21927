// Payloads read back for delivery, off the dispatcher's strand (see
// dispatcher.h, "Reads").
#include <algorithm>

#include "server/common/limit_log.h"
#include "server/core/dispatcher.h"
#include "server/core/payload_ref.h"

namespace delayd {

void Dispatcher::StartRead(std::shared_ptr<Read> read) {
  // Recent payloads are still in RocksDB's memory: read without waiting for
  // the disk, they go out now, without the read pool's two hand-overs. Only
  // when nothing else is ready, and a few at a time: under load, reads on
  // the pool run beside the strand (a durable burst, or firing throughput,
  // measured 3-6 % lower with every small read on the strand).
  if (ready_.empty() && read->payload_ids.size() <= kStrandRead &&
      store_->ReadCached(read->payload_ids, &read->payloads, &read->readable)) {
    Send(*read);
    return;
  }
  reading_ = true;
  // The read pool reads; the strand goes on with acks, publishing and
  // timeouts. (The dispatcher outlives the read pool's threads:
  // Scheduler::Stop joins them first, and a dispatcher is never destroyed
  // before the scheduler, only renamed when its namespace is freed.)
  asio::post(reads_, [this, read = std::move(read)] {
    read->status = store_->GetPayloads(read->payload_ids, &read->payloads,
                                       &read->readable);
    asio::post(strand_, [this, read] {
      on_strand_.Enter();
      FinishRead(*read);
    });
  });
}

void Dispatcher::FinishRead(Read& read) {
  reading_ = false;
  Send(read);
  observed_.AddTo(metrics_.delivery_lateness());
  Pump();
}

void Dispatcher::Send(Read& read) {
  std::vector<std::uint64_t> unreadable;
  std::vector<std::uint64_t> back;  // Not sent after all: ready again.
  std::size_t sent = 0;
  std::size_t i = 0;
  for (Read::Part& part : read.parts) {
    Worker* w = FindWorker(part.worker);
    if (w != nullptr) w->reading -= part.events.size();
    // Closed, paused since, or the worker left: ready again, unattempted.
    const bool send = w != nullptr && !closed_ && !policy_.paused;
    std::vector<const Event*> batch;
    std::vector<Event> full;
    full.reserve(part.events.size());
    for (std::uint64_t id : part.events) {
      std::string& payload = read.payloads[i];
      const bool readable = read.readable[i++];
      auto it = outstanding_.find(id);
      // (Acknowledged while its payload was read: an ack may name a ready
      // event. Nothing else takes an event out of ready_'s hands meanwhile.)
      if (it == outstanding_.end()) continue;
      const Event& e = it->second.event;
      if (!readable) {
        unreadable.push_back(id);
        LogUnreadable(e, read.status);
        continue;
      }
      if (!watch_pending_.empty()) StashForWatchers(id, payload);
      if (!send) {
        back.push_back(id);
        continue;
      }
      full.push_back(CopyWithPayload(e, payload));
      batch.push_back(&e);
    }
    sent += batch.size();
    if (!batch.empty()) Deliver(*w, batch, &full);
  }
  // The rate limit counts deliveries: what Pump took for events not sent
  // after all (unreadable, given back, acknowledged meanwhile) is returned.
  if (!bucket_.unlimited()) bucket_.Return(read.payload_ids.size() - sent);
  ready_.insert(ready_.begin(), back.begin(), back.end());
  if (!unreadable.empty()) Hold(unreadable);
}

void Dispatcher::StartWatchRead() {
  watch_reading_ = true;
  // A chunk of copies published while the same watchers were there.
  auto read = std::make_shared<WatchRead>();
  read->upto = watch_queue_.front().watchers_upto;
  read->view = watch_queue_.front().view;
  while (!watch_queue_.empty() && read->events.size() < kWatchChunk &&
         watch_queue_.front().view == read->view) {
    read->payload_ids.push_back(PayloadIdOf(watch_queue_.front().event.blob));
    read->events.push_back(std::move(watch_queue_.front().event));
    watch_queue_.pop_front();
  }
  asio::post(reads_, [this, read] {
    store_->GetPayloads(read->payload_ids, *read->view, &read->payloads,
                        &read->readable, &read->gone);
    asio::post(strand_, [this, read] {
      on_strand_.Enter();
      FinishWatchRead(*read);
    });
  });
}

void Dispatcher::FinishWatchRead(WatchRead& read) {
  watch_reading_ = false;
  if (closed_) return;
  // One acknowledged and deleted since the view (gone) was read for its
  // worker first: its payload was kept for them. One whose payload cannot
  // be read is left out for them (workers get it once it can be read;
  // their read logs it).
  std::vector<Event> full;
  full.reserve(read.events.size());
  for (std::size_t i = 0; i < read.events.size(); ++i) {
    const std::uint64_t id = read.events[i].id;
    auto kept = watch_payloads_.find(id);
    if (read.readable[i]) {
      full.push_back(CopyWithPayload(read.events[i], read.payloads[i]));
    } else if (kept != watch_payloads_.end()) {
      full.push_back(CopyWithPayload(read.events[i], kept->second));
    }
    if (kept != watch_payloads_.end()) {
      watch_payload_bytes_ -= kept->second.size();
      watch_payloads_.erase(kept);
    }
    watch_pending_.erase(id);
  }
  std::vector<const Event*> view;
  view.reserve(full.size());
  for (const Event& e : full) view.push_back(&e);
  DeliverToWatchers(view, read.upto);
  if (watchers_.empty()) {
    ClearWatchQueue();
  } else if (!watch_queue_.empty()) {
    StartWatchRead();
  }
}

void Dispatcher::StashForWatchers(std::uint64_t id,
                                  const std::string& payload) {
  if (!watch_pending_.contains(id) || watch_payloads_.contains(id)) return;
  if (watch_payload_bytes_ + payload.size() > limits_.watcher_backlog_bytes) {
    ClearWatchQueue();
    EndWatchers(WatchersBehind());
    return;
  }
  watch_payload_bytes_ += payload.size();
  watch_payloads_.emplace(id, payload);
}

void Dispatcher::ClearWatchQueue() {
  watch_queue_.clear();
  watch_pending_.clear();
  watch_payloads_.clear();
  watch_payload_bytes_ = 0;
}

void Dispatcher::LogUnreadable(const Event& e, const Status& s) const {
  LogRepeated("unreadable-payload",
              "namespace '" + name_ + "', key '" + std::string(e.blob.key()) +
                  "', event " + std::to_string(e.id) +
                  ": its payload cannot be read; the event is held and tried "
                  "again (" +
                  s.message() + ")");
}

void Dispatcher::Hold(const std::vector<std::uint64_t>& ids) {
  held_.insert(held_.end(), ids.begin(), ids.end());
  if (retry_armed_ || closed_) return;
  retry_armed_ = true;
  retry_timer_.expires_after(kRetryRead);
  retry_timer_.async_wait(
      asio::bind_executor(strand_, [this](const asio::error_code& ec) {
        on_strand_.Enter();
        retry_armed_ = false;
        if (ec || closed_) return;
        ready_.insert(ready_.begin(), held_.begin(), held_.end());
        held_.clear();
        Pump();
      }));
}

}  // namespace delayd
