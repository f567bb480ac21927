#include "server/api/stream.h"

#include <unordered_set>

namespace delayd {

StreamSubscription::StreamSubscription(
    Scheduler& scheduler, StreamWriter* writer, grpc::ServerContextBase* ctx,
    std::string ns, const SubscribeOptions& options, MethodMetrics& metrics)
    : scheduler_(scheduler),
      ns_(std::move(ns)),
      id_(scheduler.NewSubscriberId()),
      metrics_(metrics),
      who_("subscriber " + std::to_string(id_) + " (" + ctx->peer() +
           ", namespace '" + ns_ + "', " +
           (options.watcher ? "watcher" : "worker")),
      sink_(std::make_shared<StreamSink>(
          writer, ctx, scheduler.timers(),
          scheduler.limits().stream_write_timeout)) {
  LogSampled(
      "subscriber",
      who_ + (options.watcher
                  ? ") connected"
                  : ", max in flight " + std::to_string(options.max_in_flight) +
                        ") connected"));
}

void StreamSubscription::Begin(const SubscribeOptions& options,
                               const Attach& attach) {
  if (attach) at_end_ = attach(sink_);
  scheduler_.Subscribe(ns_, id_, sink_, options,
                       [sink = sink_] { sink->SendRegistered(); });
}

void StreamSubscription::Done() {
  const grpc::StatusCode code = sink_->Detach();
  if (at_end_) at_end_();
  metrics_.Observe(code, std::nullopt);
  LogSampled("subscriber", who_ + ") disconnected: " + CodeName(code));
  scheduler_.Unsubscribe(ns_, id_);
  scheduler_.counters().subscribers.fetch_sub(1);
}

StreamSink::Backlog StreamSink::Deliver(std::string_view ns,
                                        std::span<const Event* const> events) {
  Action next;
  {
    MutexLock lock(&mu_);
    // (Events beyond the stream's limit, which relayed events may have
    // reached since the dispatcher looked, are never written.)
    const std::size_t take = TakeEvents(events.size());
    for (const Event* e : events.subspan(take)) unwritten_ids_.push_back(e->id);
    events = events.first(take);
    if (reactor_ == nullptr || ending_) {
      for (const Event* e : events) unwritten_ids_.push_back(e->id);
      return {};
    }
    std::size_t bytes = 0;
    for (const Event* e : events) {
      const std::size_t b = EventBytes(ns, *e);
      if (queue_.empty() || !queue_.back().source.empty() ||
          (queue_.back().bytes + b > kMaxMessageBytes &&
           queue_.back().msg.events_size() > 0)) {
        queue_.emplace_back();
      }
      Message& m = queue_.back();
      ToProto(ns, *e, m.msg.add_events());
      m.bytes += b;
      bytes += b;
    }
    unwritten_events_.fetch_add(events.size());
    unwritten_bytes_.fetch_add(bytes);
    next = NextOrGather();
  }
  Run(next);
  return Unwritten();
}

void StreamSink::Acked(std::span<const std::uint64_t> ids) {
  MutexLock lock(&mu_);
  if (!writing_ || !in_write_source_.empty() || in_write_ids_.empty()) return;
  // (A write's events are at most the worker's max_in_flight; an ack's
  // usually a message's worth.)
  const std::unordered_set<std::uint64_t> acked(ids.begin(), ids.end());
  const std::size_t found = std::erase_if(
      in_write_ids_, [&](std::uint64_t id) { return acked.count(id) != 0; });
  in_write_ -= found;
  unwritten_events_.fetch_sub(found);
}

std::uint64_t StreamSink::TakeEvents(std::uint64_t want) {
  std::uint64_t left = events_left_.load();
  std::uint64_t take;
  do {
    take = std::min(left, want);
  } while (!events_left_.compare_exchange_weak(left, left - take));
  return take;
}

void StreamSink::LimitEvents(std::uint64_t max_events) {
  if (max_events != 0) events_left_.store(max_events);
}

std::vector<std::uint64_t> StreamSink::DeliverRelayed(v1::SubscribeResponse msg,
                                                      const std::string& source,
                                                      Backlog* backlog) {
  std::vector<std::uint64_t> beyond;
  const auto take = static_cast<int>(TakeEvents(msg.events_size()));
  for (int k = take; k < msg.events_size(); ++k) {
    beyond.push_back(msg.events(k).id());
  }
  msg.mutable_events()->DeleteSubrange(take, msg.events_size() - take);
  Action next;
  {
    MutexLock lock(&mu_);
    if (reactor_ == nullptr || ending_) {
      auto& ids = unwritten_relayed_[source];
      for (const v1::Event& e : msg.events()) ids.push_back(e.id());
      *backlog = Unwritten();
      return beyond;
    }
    if (msg.events_size() > 0) {
      const std::size_t bytes = msg.ByteSizeLong();
      unwritten_events_.fetch_add(msg.events_size());
      unwritten_bytes_.fetch_add(bytes);
      queue_.push_back({std::move(msg), bytes, source});
    }
    next = Next();
  }
  Run(next);
  *backlog = Unwritten();
  return beyond;
}

std::map<std::string, std::vector<std::uint64_t>>
StreamSink::TakeUnwrittenRelayed() {
  MutexLock lock(&mu_);
  auto ids = std::move(unwritten_relayed_);
  unwritten_relayed_.clear();
  if (!in_write_source_.empty()) {
    auto& mine = ids[in_write_source_];
    mine.insert(mine.end(), in_write_ids_.begin(), in_write_ids_.end());
    in_write_ids_.clear();
    in_write_source_.clear();
  }
  std::erase_if(queue_, [&](const Message& m) {
    if (m.source.empty()) return false;
    for (const v1::Event& e : m.msg.events()) ids[m.source].push_back(e.id());
    return true;
  });
  return ids;
}

void StreamSink::SetRelayDrained(std::function<void()> drained) {
  MutexLock lock(&mu_);
  relay_drained_ = std::move(drained);
}

void StreamSink::End(const Status& status) {
  Action next;
  {
    MutexLock lock(&mu_);
    if (reactor_ == nullptr || ending_) return;
    ending_ = true;
    end_status_ = status;
    next = Next();
  }
  Run(next);
}

bool StreamSink::Answer(v1::WorkAnswer answer) {
  Action next;
  {
    MutexLock lock(&mu_);
    if (reactor_ == nullptr || ending_) return false;
    // (With the events of this node queued last, if any: an answer takes
    // no message of its own while events wait.)
    if (queue_.empty() || !queue_.back().source.empty()) {
      queue_.emplace_back();
    }
    // (Not counted in the backlog's bytes, which are events': at most 16
    // answers await writing, each within a request's size.)
    *queue_.back().msg.add_answers() = std::move(answer);
    next = NextOrGather();
  }
  Run(next);
  return true;
}

void StreamSink::AwaitRegistration() {
  MutexLock lock(&mu_);
  ++registration_waits_;
}

void StreamSink::SendRegistered() {
  Action next;
  {
    MutexLock lock(&mu_);
    if (--registration_waits_ > 0) return;
    if (reactor_ == nullptr || ending_) return;
    force_write_ = true;
    next = Next();
  }
  Run(next);
}

void StreamSink::OnWriteDone(bool ok) {
  Action next;
  std::function<void()> drained, relay_drained;
  std::size_t answers;
  {
    MutexLock lock(&mu_);
    writing_ = false;
    answers = std::exchange(in_write_answers_, 0);
    unwritten_events_.fetch_sub(in_write_);
    unwritten_bytes_.fetch_sub(in_write_bytes_);
    in_write_ = in_write_bytes_ = 0;
    if (!ok) {
      auto& ids = in_write_source_.empty()
                      ? unwritten_ids_
                      : unwritten_relayed_[in_write_source_];
      ids.insert(ids.end(), in_write_ids_.begin(), in_write_ids_.end());
    }
    in_write_ids_.clear();
    in_write_source_.clear();
    if (!ok && !ending_) {
      ending_ = true;
      end_status_ = Status::Unavailable("stream broken");
    }
    next = Next();
    if (ok && !writing_ && !ending_) {
      drained = on_drained;
      relay_drained = relay_drained_;
    }
  }
  Run(next);
  if (drained) drained();
  if (relay_drained) relay_drained();
  if (answers > 0 && answers_written_) answers_written_(answers);
}

std::vector<std::uint64_t> StreamSink::TakeUnwritten() {
  MutexLock lock(&mu_);
  std::vector<std::uint64_t> ids = std::move(unwritten_ids_);
  unwritten_ids_.clear();
  // (A write still under way when the stream is over never completed.)
  if (in_write_source_.empty()) {
    ids.insert(ids.end(), in_write_ids_.begin(), in_write_ids_.end());
    in_write_ids_.clear();
  }
  std::erase_if(queue_, [&](const Message& m) {
    if (!m.source.empty()) return false;
    for (const v1::Event& e : m.msg.events()) ids.push_back(e.id());
    return true;
  });
  return ids;
}

grpc::StatusCode StreamSink::Detach() {
  MutexLock lock(&mu_);
  // A write timeout's TryCancel on another thread still uses the call's
  // context: it outlives that.
  while (cancelling_ && *cancelling_ != std::this_thread::get_id()) {
    cancelled_.Wait(&mu_);
  }
  write_timer_.cancel();
  reactor_ = nullptr;
  return finish_code_;
}

StreamSink::Action StreamSink::NextOrGather() {
  if (!Turn::Open()) return Next();
  if (!flush_due_) {
    flush_due_ = true;
    Turn::Defer([self = weak_from_this()] {
      if (auto alive = self.lock()) {
        static_cast<StreamSink*>(alive.get())->Flush();
      }
    });
  }
  return {};
}

void StreamSink::Flush() {
  Action next;
  {
    MutexLock lock(&mu_);
    flush_due_ = false;
    next = Next();
  }
  Run(next);
}

StreamSink::Action StreamSink::Next() {
  if (reactor_ == nullptr || writing_ || finished_ || flush_due_) return {};
  if (ending_) {
    finished_ = true;
    const grpc::Status end = ToGrpc(end_status_);
    finish_code_ = end.error_code();
    return {Action::kFinish, reactor_, end};
  }
  if (queue_.empty() && !force_write_) return {};
  force_write_ = false;
  in_write_ = in_write_bytes_ = 0;
  const v1::SubscribeResponse* msg = &v1::SubscribeResponse::default_instance();
  if (!queue_.empty()) {
    msg = &queue_.front().msg;
    in_write_ = static_cast<std::size_t>(msg->events_size());
    in_write_bytes_ = queue_.front().bytes;
    in_write_source_ = queue_.front().source;
    in_write_answers_ = static_cast<std::size_t>(msg->answers_size());
    for (const v1::Event& e : msg->events()) in_write_ids_.push_back(e.id());
  }
  bool own_buffer;
  in_flight_.Clear();
  const grpc::Status serialized =
      grpc::SerializationTraits<v1::SubscribeResponse>::Serialize(
          *msg, &in_flight_, &own_buffer);
  if (!queue_.empty()) queue_.pop_front();
  if (!serialized.ok()) {
    finished_ = true;
    finish_code_ = serialized.error_code();
    return {Action::kFinish, reactor_, serialized};
  }
  writing_ = true;
  write_started_ = std::chrono::steady_clock::now();
  ArmWriteTimer(write_started_ + write_timeout_);
  return {Action::kWrite, reactor_, {}};
}

void StreamSink::ArmWriteTimer(std::chrono::steady_clock::time_point at) {
  if (write_timer_armed_) return;
  write_timer_armed_ = true;
  write_timer_.expires_at(at);
  write_timer_.async_wait(
      [self = weak_from_this()](const asio::error_code& ec) {
        if (ec) return;
        if (auto alive = self.lock()) {
          static_cast<StreamSink*>(alive.get())->OnWriteTimeout();
        }
      });
}

void StreamSink::Run(const Action& action) {
  switch (action.kind) {
    case Action::kNone:
      return;
    case Action::kWrite:
      // (in_flight_ stays untouched until OnWriteDone: writing_ is set.)
      action.reactor->WriteMessage(&in_flight_);
      return;
    case Action::kFinish:
      action.reactor->FinishStream(action.end);
      return;
  }
}

void StreamSink::OnWriteTimeout() {
  {
    MutexLock lock(&mu_);
    write_timer_armed_ = false;
    if (!writing_ || reactor_ == nullptr || cancelling_) return;
    if (const auto due = write_started_ + write_timeout_;
        std::chrono::steady_clock::now() < due) {
      ArmWriteTimer(due);  // (A later write than the one that armed it.)
      return;
    }
    LogLimitHit("stream-write-timeout",
                "subscriber " + ctx_->peer() +
                    ": a write did not complete in time; the stream is "
                    "ended (" +
                    std::to_string(unwritten_events_.load()) +
                    " events unwritten)");
    cancelling_ = std::this_thread::get_id();
  }
  ctx_->TryCancel();
  {
    MutexLock lock(&mu_);
    cancelling_.reset();
  }
  cancelled_.SignalAll();
}

}  // namespace delayd
