// Dispatcher: the state of an outstanding event (ready, in flight to a
// worker, retrying), its ack deadline and retry time on the ack wheel, and
// its last error (dispatcher.h).
#include <cassert>

#include "server/core/dispatcher.h"

namespace delayd {

Dispatcher::Worker* Dispatcher::FindWorker(std::uint64_t id) {
  for (Worker& w : workers_) {
    if (w.id == id) return &w;
  }
  return nullptr;
}

bool Dispatcher::LeaveState(std::uint64_t event_id, Outstanding& o) {
  if (o.worker != 0) {
    if (Worker* w = FindWorker(o.worker)) w->in_flight.erase(event_id);
    LeaveFlight(o);
    return true;
  }
  if (o.retrying) {
    CancelAckTimer(o);
    counters_.retrying.fetch_sub(1);
    mine_.retrying.fetch_sub(1, std::memory_order_relaxed);
  } else {
    // Ready: (ready_ and held_ skip ids no longer outstanding).
    counters_.ready.fetch_sub(1);
    mine_.ready.fetch_sub(1, std::memory_order_relaxed);
  }
  return false;
}

void Dispatcher::LeaveFlight(Outstanding& o) {
  assert(o.worker != 0);
  CancelAckTimer(o);
  o.worker = 0;
  counters_.in_flight.fetch_sub(1);
  mine_.in_flight.fetch_sub(1, std::memory_order_relaxed);
}

void Dispatcher::Requeue(std::uint64_t event_id, Outstanding& o) {
  LeaveFlight(o);
  ready_.push_front(event_id);
  counters_.ready.fetch_add(1);
  counters_.redelivered.fetch_add(1);
  mine_.ready.fetch_add(1);
  mine_.redelivered.fetch_add(1, std::memory_order_relaxed);
}

void Dispatcher::TakeBack(std::uint64_t event_id, Outstanding& o) {
  LeaveFlight(o);
  if (o.event.attempt > 0) --o.event.attempt;
  ready_.push_front(event_id);
  counters_.ready.fetch_add(1);
  mine_.ready.fetch_add(1);
  // (It stays counted as delivered, when it was handed over: the total
  // only grows, as a Prometheus counter must.)
}

void Dispatcher::StartAckTimer(std::uint64_t event_id, Outstanding& o,
                               std::chrono::nanoseconds timeout) {
  if (free_cookies_.empty()) {
    o.ack_cookie = static_cast<std::uint32_t>(cookie_ids_.size());
    cookie_ids_.push_back(event_id);
  } else {
    o.ack_cookie = free_cookies_.back();
    free_cookies_.pop_back();
    cookie_ids_[o.ack_cookie] = event_id;
  }
  o.ack_timer =
      ack_wheel_.wheel().Schedule(ack_wheel_.Now() + timeout, o.ack_cookie);
  ack_wheel_.Scheduled(o.ack_timer);
}

void Dispatcher::CancelAckTimer(Outstanding& o) {
  if (o.ack_timer == wheel::TimingWheel::kNoHandle) return;
  ack_wheel_.wheel().Cancel(o.ack_timer);
  free_cookies_.push_back(o.ack_cookie);
  o.ack_timer = wheel::TimingWheel::kNoHandle;
}

const std::string& Dispatcher::ErrorOf(std::uint64_t id,
                                       const Outstanding& o) const {
  static const std::string kNone;
  return o.has_error ? errors_.at(id) : kNone;
}

void Dispatcher::SetError(std::uint64_t id, Outstanding& o, std::string text) {
  if (text.empty()) {
    if (o.has_error) errors_.erase(id);
    o.has_error = false;
    return;
  }
  errors_.insert_or_assign(id, std::move(text));
  o.has_error = true;
}

void Dispatcher::Forget(
    std::unordered_map<std::uint64_t, Outstanding>::iterator it) {
  if (it->second.has_error) errors_.erase(it->first);
  outstanding_.erase(it);
}

void Dispatcher::OnAckAlarm(AlarmWheel::Time at) {
  if (ack_wheel_.Alarmed(at)) TakeAckTimeouts();
}

void Dispatcher::TakeAckTimeouts() {
  ack_wheel_.TakeDue(&due_);
  for (const auto& e : due_) {
    // A visited timer was never cancelled, so its event is still in flight,
    // or still retrying.
    const std::uint64_t event_id = cookie_ids_[e.cookie];
    free_cookies_.push_back(e.cookie);
    Outstanding& o = outstanding_.at(event_id);
    o.ack_timer = wheel::TimingWheel::kNoHandle;
    if (o.retrying) {
      // Its retry time: ready again, ahead of events never delivered.
      o.retrying = false;
      ready_.push_front(event_id);
      counters_.retrying.fetch_sub(1);
      counters_.ready.fetch_add(1);
      mine_.retrying.fetch_sub(1, std::memory_order_relaxed);
      mine_.ready.fetch_add(1);
    } else {
      // Its ack deadline: the delivery failed.
      Fail(event_id, o, BackoffFor(o));
    }
  }
  ack_wheel_.Rearm();
  WriteFates();
  Pump();
}

}  // namespace delayd
