// Payloads read back for delivery, off the dispatcher's strand (see
// dispatcher.h, "Reads").
#include <algorithm>

#include "server/common/limit_log.h"
#include "server/core/dispatcher.h"

namespace delayd {
namespace {

// `e` (whose blob holds its payload's id) with its payload.
Event WithPayload(const Event& e, std::string payload) {
  return Event{e.id,      e.ns,        Blob(e.blob.key(), std::move(payload)),
               e.version, e.fire_time, e.fired_at,
               e.attempt, e.reason};
}

}  // namespace

void Dispatcher::StartRead(std::shared_ptr<Read> read) {
  reading_ = true;
  // The pool reads; the strand goes on with acks, publishing and timeouts.
  // (The dispatcher outlives the pool's threads: Scheduler::Stop joins them
  // first, and a namespace with events outstanding is never freed.)
  asio::post(strand_.get_inner_executor(), [this, read = std::move(read)] {
    read->status = store_->GetPayloads(read->payload_ids, &read->payloads,
                                       &read->readable);
    asio::post(strand_, [this, read] { FinishRead(*read); });
  });
}

void Dispatcher::FinishRead(Read& read) {
  reading_ = false;
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
      if (!send) {
        back.push_back(id);
        continue;
      }
      full.push_back(WithPayload(e, std::move(payload)));
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
  observed_.AddTo(metrics_.delivery_lateness());
  Pump();
}

void Dispatcher::ReadPayloads(std::vector<const Event*>& events,
                              std::vector<Event>& out,
                              std::vector<std::uint64_t>& unreadable) {
  std::vector<std::uint64_t> ids;
  ids.reserve(events.size());
  for (const Event* e : events) ids.push_back(PayloadIdOf(e->blob));
  std::vector<std::string> payloads;
  std::vector<bool> readable;
  const Status s = store_->GetPayloads(ids, &payloads, &readable);
  out.clear();
  out.reserve(events.size());
  std::size_t kept = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event& e = *events[i];
    if (!readable[i]) {
      unreadable.push_back(e.id);
      LogUnreadable(e, s);
      continue;
    }
    out.push_back(WithPayload(e, std::move(payloads[i])));
    events[kept++] = events[i];
  }
  events.resize(kept);
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
  retry_timer_.async_wait([this](const asio::error_code& ec) {
    retry_armed_ = false;
    if (ec || closed_) return;
    ready_.insert(ready_.begin(), held_.begin(), held_.end());
    held_.clear();
    Pump();
  });
}

}  // namespace delayd
