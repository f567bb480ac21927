// Dispatcher: events published, workers subscribed and gone, acks, and
// the pump that hands ready events to workers (dispatcher.h).
#include "server/core/dispatcher.h"

#include <algorithm>
#include <limits>

#include "server/core/payload_ref.h"
#include "server/core/turn.h"

namespace delayd {
namespace {
// Events per stream message to one worker at most.
constexpr std::size_t kMaxBatch = 256;
}  // namespace

Dispatcher::Dispatcher(LoopExecutor pool, asio::any_io_executor timers,
                       asio::any_io_executor reads, const Clock& clock,
                       std::string name, NamespaceId id, Counters& counters,
                       Metrics& metrics, const Limits& limits, Store* store,
                       NamespaceRefs* refs)
    : name_(std::move(name)),
      id_(id),
      refs_(refs),
      counters_(counters),
      mine_(counters.of(id)),
      metrics_(metrics),
      limits_(limits),
      clock_(clock),
      store_(store),
      strand_(InlineFirst(pool)),
      rate_timer_(timers),
      random_(std::random_device()()),
      ack_wheel_(strand_, timers, clock, std::chrono::milliseconds(1),
                 clock.Steady(),
                 [this](AlarmWheel::Time at) {
                   on_strand_.Enter();
                   OnAckAlarm(at);
                 }),
      retry_timer_(timers),
      observed_(LatencyBuckets()),
      reads_(std::move(reads)) {}

void Dispatcher::Publish(std::vector<Event> events) {
  // Counted as ready before the strand takes them, so that a Stats answered
  // meanwhile (right after recovery, or between a firing and its delivery)
  // counts every event exactly once.
  const std::size_t n = events.size();
  counters_.ready.fetch_add(n);
  mine_.ready.fetch_add(n);
  // (Deferred: from a pool thread, such as the one that fired and wrote the
  // events, the strand's turn runs on that thread once it is free, without
  // waking another; from any other thread, as a post.)
  asio::defer(strand_, [this, events = std::move(events)]() mutable {
    on_strand_.Enter();
    if (closed_) {
      counters_.ready.fetch_sub(events.size());
      mine_.ready.fetch_sub(events.size(), std::memory_order_relaxed);
      return;
    }
    const WallNanos now = clock_.Wall();
    for (const Event& e : events) {
      observed_.Add(std::chrono::nanoseconds(now - e.fire_time));
    }
    observed_.AddTo(metrics_.firing_lateness());
    // Watchers see each event once, when it is published.
    if (!watchers_.empty()) {
      std::vector<const Event*> view;
      view.reserve(events.size());
      for (const Event& e : events) view.push_back(&e);
      ToWatchers(view);
    }
    for (Event& e : events) {
      const std::uint64_t id = e.id;
      // (Only an event recovered after failed deliveries has attempts.)
      const bool fate_stored = store_ != nullptr && e.attempt > 0;
      auto& o =
          outstanding_.emplace(id, Outstanding{std::move(e)}).first->second;
      o.fate_stored = fate_stored;
      ready_.push_back(id);
    }
    Pump();
  });
}

void Dispatcher::Subscribe(std::uint64_t id,
                           std::shared_ptr<Subscriber> subscriber,
                           SubscribeOptions options,
                           std::function<void()> done) {
  asio::post(strand_, [this, id, subscriber = std::move(subscriber), options,
                       done = std::move(done)]() mutable {
    on_strand_.Enter();
    if (closed_) {
      subscriber->End(Status::Unavailable("delayd is shutting down"));
      return;
    }
    // A stream's backlog written out frees room only for events that wait
    // for it: with none ready, no turn is taken (one wake-up of the pool
    // less per write). The ready count is raised before a turn reads the
    // stream's backlog, and the stream lowers its backlog before it reads
    // the count, each in one total order (seq_cst): either that turn sees
    // the room or this sees the events.
    subscriber->on_drained = [this] {
      if (mine_.ready.load() == 0) return;
      asio::post(strand_, [this] {
        on_strand_.Enter();
        Pump();
      });
    };
    if (options.watcher) {
      watchers_.emplace_back(id, std::move(subscriber));
      Count(*watchers_.back().second, true, true);
    } else {
      workers_.push_back(Worker{id,
                                std::move(subscriber),
                                options.max_in_flight,
                                options.ack_timeout,
                                options.max_events != 0
                                    ? options.max_events
                                    : std::numeric_limits<std::uint64_t>::max(),
                                {},
                                0,
                                options.keep_leases});
      Count(*workers_.back().sink, false, true);
    }
    done();
    Pump();
  });
}

void Dispatcher::Unsubscribe(std::uint64_t id) {
  asio::post(strand_, [this, id] {
    on_strand_.Enter();
    auto watcher = std::find_if(watchers_.begin(), watchers_.end(),
                                [id](const auto& w) { return w.first == id; });
    if (watcher != watchers_.end()) {
      DropWatcher(watcher);
      return;
    }
    auto worker = std::find_if(workers_.begin(), workers_.end(),
                               [id](const Worker& w) { return w.id == id; });
    if (worker == workers_.end()) return;
    // What its client never got was not an attempt: back to the queue, its
    // attempt not counted.
    std::vector<std::uint64_t> back = worker->sink->TakeUnwritten();
    std::sort(back.rbegin(), back.rend());
    for (std::uint64_t event_id : back) {
      auto it = outstanding_.find(event_id);
      if (it != outstanding_.end() && it->second.worker == id &&
          worker->in_flight.erase(event_id) == 1) {
        TakeBack(event_id, it->second);
      }
    }
    // Its other unacknowledged events go back to the front of the queue,
    // oldest first; or, if it keeps its leases, stay in flight until
    // acknowledged, nacked or past their deadlines (each path finds no
    // worker, and is done with it).
    std::vector<std::uint64_t> mine;
    if (!worker->keep_leases) {
      mine.assign(worker->in_flight.begin(), worker->in_flight.end());
    }
    std::sort(mine.rbegin(), mine.rend());
    // One that has had its last attempt becomes a dead letter: a poison
    // event that crashes every worker it reaches is never nacked.
    for (std::uint64_t event_id : mine) {
      Outstanding& o = outstanding_[event_id];
      if (policy_.max_attempts != 0 &&
          o.event.attempt >= policy_.max_attempts) {
        Bury(event_id, o);
      } else {
        Requeue(event_id, o);
      }
    }
    WriteFates();
    Count(*worker->sink, false, false);
    workers_.erase(worker);
    Pump();
    refs_->Release(id_);
  });
}

void Dispatcher::Ack(std::vector<std::uint64_t> ids,
                     std::function<void(AckResult)> done) {
  asio::dispatch(strand_, [this, ids = std::move(ids),
                           done = std::move(done)]() mutable {
    on_strand_.Enter();
    // (The events this lets go and its answer, in one message: turn.h.)
    Turn turn;
    AckResult result;
    const SteadyTime now = clock_.Steady();
    Batch batch;
    std::vector<std::pair<std::string, std::uint64_t>> settled;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> by_worker;
    const bool dedup = settled_ && policy_.dedup_window.count() > 0;
    for (std::uint64_t id : ids) {
      auto it = outstanding_.find(id);
      // (A dead letter is requeued or purged, not acknowledged.)
      if (it == outstanding_.end() || it->second.dead) {
        result.unknown.push_back(id);
        continue;
      }
      Outstanding& o = it->second;
      if (o.worker != 0) by_worker.emplace_back(o.worker, id);
      if (LeaveState(id, o)) observed_.Add(now - o.delivered_at);
      if (store_ != nullptr) {
        batch.RemoveEvent(id, PayloadIdOf(o.event.blob), o.fate_stored);
        Touch(batch, o.event);
      }
      if (dedup) {
        settled.emplace_back(std::string(o.event.blob.key()), o.event.version);
      }
      CloseRun(o);
      Forget(it);
      ++result.acked;
    }
    counters_.acked.fetch_add(result.acked);
    mine_.acked.fetch_add(result.acked, std::memory_order_relaxed);
    observed_.AddTo(metrics_.ack_latency());
    TellAcked(by_worker);
    Pump();
    if (batch.empty()) {
      if (!settled.empty()) settled_(id_, std::move(settled));
      refs_->Release(id_, result.acked);
      done(std::move(result));
      return;
    }
    Store::Done durable = [this, done = std::move(done),
                           result = std::move(result),
                           settled = std::move(settled)](Status s) mutable {
      // Not durable: the events come back after a restart (at least once),
      // so the acknowledgement fails.
      if (!s.ok()) {
        result.error = s;
      } else {
        if (!settled.empty()) settled_(id_, std::move(settled));
        refs_->Release(id_, result.acked);
      }
      done(std::move(result));
    };
    if (!write_acks_here_) return store_->Commit(batch, std::move(durable));
    // Written, and usually answered, by this thread once it leaves the
    // strand (deferred: a write the disk holds up must not hold the strand,
    // whose deliveries go on meanwhile): a pool thread, or the caller's
    // thread after an inline turn.
    if (store_->CommitDeferred(batch, std::move(durable))) {
      strand_.get_inner_executor().Later(
          [store = store_] { store->WriteHere(); });
    }
  });
}

void Dispatcher::TellAcked(
    std::vector<std::pair<std::uint64_t, std::uint64_t>>& acked) {
  std::sort(acked.begin(), acked.end());  // (Usually one worker's.)
  std::vector<std::uint64_t> ids;
  for (std::size_t i = 0; i < acked.size();) {
    const std::uint64_t worker = acked[i].first;
    ids.clear();
    for (; i < acked.size() && acked[i].first == worker; ++i) {
      ids.push_back(acked[i].second);
    }
    if (Worker* w = FindWorker(worker)) w->sink->Acked(ids);
  }
}

void Dispatcher::DropPartition(std::uint32_t part,
                               std::function<void(std::uint64_t)> done) {
  asio::post(strand_, [this, part, done = std::move(done)] {
    on_strand_.Enter();
    std::uint64_t dropped = 0;
    for (auto it = outstanding_.begin(); it != outstanding_.end();) {
      Outstanding& o = it->second;
      if (!partition_of_ || partition_of_(id_, o.event.blob.key()) != part) {
        ++it;
        continue;
      }
      if (o.dead) {
        dead_.erase(it->first);
        counters_.dead_letters.fetch_sub(1);
        mine_.dead_letters.fetch_sub(1, std::memory_order_relaxed);
      } else {
        LeaveState(it->first, o);
      }
      Forget(it++);
      ++dropped;
    }
    Pump();
    if (dropped != 0) refs_->Release(id_, static_cast<std::int64_t>(dropped));
    if (done) done(dropped);
  });
}

void Dispatcher::Close(const Status& status, std::function<void()> done) {
  asio::post(strand_, [this, status, done = std::move(done)] {
    on_strand_.Enter();
    closed_ = true;
    retry_timer_.cancel();
    rate_timer_.cancel();
    for (auto& w : workers_) w.sink->End(status);
    for (auto& [id, sink] : watchers_) sink->End(status);
    for (auto& w : workers_) Count(*w.sink, false, false);
    for (auto& [id, sink] : watchers_) Count(*sink, true, false);
    workers_.clear();
    watchers_.clear();
    ClearWatchQueue();
    ack_wheel_.Stop();
    done();
  });
}

std::size_t Dispatcher::WorkerRoom(const Worker& w) const {
  // Events not yet written count too, those that timed out among them:
  // a worker that stops reading never holds more than max_in_flight.
  const Subscriber::Backlog unwritten = w.sink->Unwritten();
  if (unwritten.bytes >= limits_.worker_backlog_bytes) return 0;
  const std::size_t held =
      std::max(w.in_flight.size(), unwritten.events) + w.reading;
  std::size_t room = std::min<std::size_t>(
      w.max_in_flight - std::min<std::size_t>(w.max_in_flight, held),
      kMaxBatch);
  const std::uint64_t left = std::min(w.events_left, w.sink->EventsLeft());
  return std::min<std::uint64_t>(
      room, left - std::min<std::uint64_t>(left, w.reading));
}

std::size_t Dispatcher::NamespaceRoom(SteadyTime now, std::size_t taken,
                                      std::size_t with_room) {
  std::size_t room = std::numeric_limits<std::size_t>::max();
  // (The namespace's in-flight gauge is written on this strand only.)
  if (policy_.max_in_flight != 0) {
    room = policy_.max_in_flight -
           std::min<std::size_t>(
               policy_.max_in_flight,
               mine_.in_flight.load(std::memory_order_relaxed) + taken);
  }
  if (!bucket_.unlimited()) {
    room = std::min(room, bucket_.Available(now));
    if (room == 0) ArmRateTimer(bucket_.NextToken(now));
  }
  // A turn takes at most an equal share of what the namespace has room
  // for, so that workers with room share it evenly however it comes (a
  // burst of tokens, or one at a time).
  return room == 0
             ? 0
             : (room + with_room - 1) / std::max<std::size_t>(1, with_room);
}

void Dispatcher::Pump() {
  if (workers_.empty() || closed_ || policy_.paused || reading_) return;
  std::vector<const Event*> batch;
  // With a store, the events this pass gives out, by worker, to be sent once
  // their payloads are read (off the strand: FinishRead); made for the
  // first of them.
  std::shared_ptr<Read> read;
  std::size_t taken = 0;  // Events this pass gave out.
  std::size_t idle_turns = 0;
  // The namespace's own limits across its workers, if it has any: then the
  // workers with room share them (NamespaceRoom).
  const bool limited = !bucket_.unlimited() || policy_.max_in_flight != 0;
  std::size_t with_room = 0;
  if (limited) {
    for (const Worker& w : workers_) with_room += WorkerRoom(w) > 0 ? 1 : 0;
  }
  // (The clock is read only when a dispatch rate needs it.)
  const SteadyTime pump_time =
      bucket_.unlimited() ? SteadyTime{} : clock_.Steady();
  // Round robin: each turn gives one worker a batch of up to its free room.
  // A turn the namespace has no room for is not spent: that worker is
  // first when room comes.
  while (!ready_.empty() && idle_turns < workers_.size()) {
    next_worker_ %= workers_.size();
    Worker& w = workers_[next_worker_];
    std::size_t room = WorkerRoom(w);
    if (room == 0) {
      ++idle_turns;
      ++next_worker_;
      continue;
    }
    if (limited) {
      const std::size_t share = NamespaceRoom(pump_time, taken, with_room);
      if (share == 0) break;
      room = std::min(room, share);
    }
    ++next_worker_;
    idle_turns = 0;
    batch.clear();
    while (batch.size() < room && !ready_.empty()) {
      const std::uint64_t id = ready_.front();
      ready_.pop_front();
      auto it = outstanding_.find(id);
      if (it == outstanding_.end() || it->second.worker != 0 ||
          it->second.retrying) {
        continue;
      }
      batch.push_back(&it->second.event);
    }
    if (batch.empty()) break;
    taken += batch.size();
    if (!bucket_.unlimited()) bucket_.Take(batch.size());
    if (store_ != nullptr) {
      if (!read) read = std::make_shared<Read>();
      Read::Part& part = read->parts.emplace_back();
      part.worker = w.id;
      for (const Event* e : batch) {
        part.events.push_back(e->id);
        read->payload_ids.push_back(PayloadIdOf(e->blob));
      }
      w.reading += batch.size();
      continue;
    }
    Deliver(w, batch, nullptr);
  }
  if (read) StartRead(std::move(read));
  observed_.AddTo(metrics_.delivery_lateness());
}

void Dispatcher::Deliver(Worker& w, std::vector<const Event*>& batch,
                         std::vector<Event>* full) {
  const SteadyTime steady_now = clock_.Steady();
  const WallNanos wall_now = clock_.Wall();
  for (std::size_t i = 0; i < batch.size(); ++i) {
    Outstanding& o = outstanding_.at(batch[i]->id);
    o.worker = w.id;
    o.delivered_at = steady_now;
    w.in_flight.insert(batch[i]->id);
    if (++o.event.attempt == 1) {
      observed_.Add(std::chrono::nanoseconds(wall_now - o.event.fire_time));
    }
    StartAckTimer(
        batch[i]->id, o,
        w.ack_timeout.count() != 0 ? w.ack_timeout : policy_.ack_timeout);
    if (full != nullptr) {
      (*full)[i].attempt = o.event.attempt;
      batch[i] = &(*full)[i];
    }
  }
  counters_.ready.fetch_sub(batch.size());
  counters_.in_flight.fetch_add(batch.size());
  mine_.ready.fetch_sub(batch.size(), std::memory_order_relaxed);
  mine_.in_flight.fetch_add(batch.size(), std::memory_order_relaxed);
  mine_.delivered.fetch_add(batch.size(), std::memory_order_relaxed);
  w.events_left -= batch.size();
  w.sink->Deliver(name_, batch);
}

}  // namespace delayd
