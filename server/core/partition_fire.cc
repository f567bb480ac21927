// Firing: a partition's alarm, the timers it finds due, and their events
// written and handed to their namespaces' dispatchers (partition.h).
#include <algorithm>
#include <asio/defer.hpp>
#include <unordered_map>

#include "server/core/partition.h"
#include "server/core/payload_ref.h"

namespace delayd {

void Partition::SetWriteFiringsHere(bool on) {
  MutexLock lock(&mu_);
  write_firings_here_ = on;
}

void Partition::OnAlarm(AlarmWheel::Time at) {
  Deferred deferred = Deferred::kNothing;
  {
    MutexLock lock(&mu_);
    if (!wheel_.Alarmed(at) || !owned_) return;
    defer_writes_ = write_firings_here_;
    FireDue();
    defer_writes_ = false;
    deferred = std::exchange(deferred_, Deferred::kNothing);
  }
  if (deferred == Deferred::kWrite) {
    store_->WriteHere();
  } else if (deferred == Deferred::kWriteAfterPublish) {
    // (Deferred: the events published before the write, each a deferred
    // turn of its dispatcher's strand, leave first.)
    asio::defer(pool_, [store = store_] { store->WriteHere(); });
  }
}

void Partition::FireDue() {
  // A second pass takes the runs that schedules' wake-ups set in the first:
  // their timers are due now (or were, for a caught-up run).
  for (int pass = 0; pass < 2; ++pass) {
    wheel_.TakeDue(&due_);
    if (due_.empty() || !OnExpired(due_)) break;
  }
  wheel_.Rearm();
}

bool Partition::OnExpired(const std::vector<AlarmWheel::Expired>& due) {
  // Never early by the wall clock either: if it reads earlier than a fire
  // time (it stepped back), wait out the difference.
  const WallNanos wall_now = clock_.Wall();
  const SteadyTime steady_now = clock_.Steady();
  std::vector<std::uint32_t> fire;
  fire.reserve(due.size());
  bool woke = false;
  for (const auto& e : due) {
    if (e.cookie & kScheduleCookie) {
      WakeSchedule(e.cookie & ~kScheduleCookie);
      woke = true;
      continue;
    }
    Record& rec = records_[e.cookie];
    if (rec.fire_time > wall_now) {
      rec.handle = wheel_.wheel().Schedule(
          Deadline(rec.fire_time, wall_now, steady_now), e.cookie);
    } else {
      fire.push_back(e.cookie);
    }
  }
  FireRecords(fire, Reason::kExpired, nullptr);
  return woke;
}

std::vector<Event> Partition::TakeEvents(
    const std::vector<std::uint32_t>& records, Reason reason, Batch* batch) {
  const WallNanos fired_at = clock_.Wall();
  std::vector<Event> events;
  events.reserve(records.size());
  // Per-namespace counts, added once per run of one namespace's events.
  NamespaceId run_ns = 0;
  std::uint64_t run = 0;
  auto count_run = [&] {
    if (run == 0) return;
    NamespaceCounters& c = counters_.of(run_ns);
    c.pending.fetch_sub(run, std::memory_order_relaxed);
    (reason == Reason::kDrained ? c.drained : c.expired)
        .fetch_add(run, std::memory_order_relaxed);
    run = 0;
  };
  for (std::uint32_t r : records) {
    Record& rec = records_[r];
    Event e{};
    e.id = FixedId(rec.version) ? rec.version
                                : (next_event_seq_++ << 10) | partition_;
    e.ns = rec.ns();
    e.blob = std::move(rec.blob);
    e.version = rec.version;
    e.fire_time = rec.fire_time;
    e.fired_at = fired_at;
    e.reason = reason;
    if (e.ns != run_ns) count_run();
    run_ns = e.ns;
    ++run;
    keys_.Erase(Hash(e.ns, e.blob.key()), r);
    free_records_.push_back(r);
    if (batch) {
      batch->FireTimer(StoredEvent{e.id, e.ns, e.blob.key(), e.version,
                                   e.fire_time, e.fired_at, e.reason,
                                   PayloadIdOf(e.blob)});
    }
    NoteGone(e.ns, e.blob.key(), DedupEntry::Fate::kFired, e.version, fired_at,
             batch);
    events.push_back(std::move(e));
  }
  count_run();
  counters_.pending.fetch_sub(records.size());
  counters_.fired.fetch_add(records.size());
  return events;
}

std::optional<Status> Partition::FireRecords(
    const std::vector<std::uint32_t>& records, Reason reason,
    std::function<void(Status)> done) {
  if (records.empty()) return Status::Ok();
  const std::uint64_t counted = CountedIds(records);
  Status s = ReserveIds(0, counted);
  if (s.ok() && store_ != nullptr) s = store_->Failed();
  if (!s.ok()) {
    // Nothing changed: each timer fires again after kRetryIds, or at its
    // time if that is later (a drain's timers).
    const WallNanos wall_now = clock_.Wall();
    const SteadyTime steady_now = clock_.Steady();
    const auto retry = wheel_.ToWheel(steady_now + kRetryIds);
    for (std::uint32_t r : records) {
      Record& rec = records_[r];
      const auto at =
          std::max(retry, Deadline(rec.fire_time, wall_now, steady_now));
      if (!wheel_.wheel().Reschedule(rec.handle, at)) {
        rec.handle = wheel_.wheel().Schedule(at, r);
      }
      wheel_.Scheduled(rec.handle);
    }
    return s;
  }
  Batch batch;
  // Whether every timer's last set or move is durable (see
  // durable_versions_).
  const std::uint64_t durable =
      durable_versions_.load(std::memory_order_acquire);
  bool covered = true;
  for (std::uint32_t r : records)
    covered &= (records_[r].version >> 10) < durable;
  // Events go to their namespace's dispatcher in firing order.
  auto by_ns =
      std::make_shared<std::unordered_map<NamespaceId, std::vector<Event>>>();
  for (Event& e :
       TakeEvents(records, reason, store_ != nullptr ? &batch : nullptr)) {
    (*by_ns)[e.ns].push_back(std::move(e));
  }
  if (store_ == nullptr) {
    // (Handing events over is a post to each dispatcher's strand.)
    for (auto& [ns, events] : *by_ns) publish_(ns, std::move(events));
    return Status::Ok();
  }
  // Timers set or moved durably: their events are published once the
  // firing is written, without waiting for it to be durable; if their ids
  // are fixed, once it is queued, before it is written. That is safe:
  // until the firing is written (durable), so is nothing queued after it
  // (acks included), so a crash (a loss of the machine, of the database)
  // leaves the timers pending, to fire again after the restart: at least
  // once, never lost, and with fixed ids each event again under its id (a
  // worker that handled it can tell). Otherwise they
  // wait for the firing to be durable, and with it the write that set them:
  // no event leaves for a timer a crash could undo. Only `done` (a Drain's
  // answer) waits for durability in every case. If the write fails, the
  // store refuses every later write and the daemon stops (store.h): the
  // timers, still stored, fire after the restart, and nothing is published.
  batch.Touch(partition_);
  auto publish = [this, by_ns] {
    for (auto& [ns, events] : *by_ns) publish_(ns, std::move(events));
  };
  // (With nothing waiting for it to be durable, the write needs no sync of
  // its own: the next one that does, an ack's, covers it.)
  Store::Done on_durable;
  if (!covered || done) {
    on_durable = [covered, publish, done = std::move(done)](Status s) {
      if (!covered && s.ok()) publish();
      if (done) done(std::move(s));
    };
  }
  std::function<void()> written;
  const bool publish_first = covered && counted == 0;
  if (publish_first) {
    publish();
  } else if (covered) {
    written = std::move(publish);
  }
  if (defer_writes_) {
    store_->WriteDeferred(batch, std::move(written), std::move(on_durable));
    if (publish_first) {
      deferred_ = Deferred::kWriteAfterPublish;
    } else if (deferred_ == Deferred::kNothing) {
      deferred_ = Deferred::kWrite;
    }
  } else {
    store_->Write(batch, std::move(written), std::move(on_durable));
  }
  return std::nullopt;
}

void Partition::Drain(NamespaceId ns,
                      std::function<void(Status, std::uint64_t)> done) {
  std::optional<Status> now;
  std::uint64_t count = 0;
  {
    MutexLock lock(&mu_);
    if (stopped_) {  // (Not owned, it holds nothing to drain.)
      now = ShuttingDown();
    } else {
      std::vector<std::uint32_t> fire;
      for (std::uint32_t r = 0; r < records_.size(); ++r) {
        if (records_[r].blob && records_[r].ns() == ns) fire.push_back(r);
      }
      std::sort(fire.begin(), fire.end(),
                [this](std::uint32_t a, std::uint32_t b) {
                  mu_.AssertHeld();  // (Called from Drain's own scope.)
                  return records_[a].fire_time != records_[b].fire_time
                             ? records_[a].fire_time < records_[b].fire_time
                             : records_[a].version < records_[b].version;
                });
      for (std::uint32_t r : fire) wheel_.wheel().Cancel(records_[r].handle);
      count = fire.size();
      now = FireRecords(fire, Reason::kDrained, [done, count](Status s) {
        done(s, s.ok() ? count : 0);
      });
    }
  }
  if (now) done(*now, now->ok() ? count : 0);
}

}  // namespace delayd
