#include "server/core/partition.h"

#include <algorithm>
#include <asio/defer.hpp>
#include <cassert>
#include <unordered_map>

#include "server/common/keyed_hash.h"
#include "server/core/payload_ref.h"

namespace delayd {

Partition::Partition(asio::io_context& io, std::uint32_t index,
                     const Clock& clock, std::chrono::nanoseconds tick,
                     SteadyTime epoch, const Limits& limits, Counters& counters,
                     Store* store, NamespaceRefs* refs, Publish publish)
    : partition_(index),
      clock_(clock),
      limits_(limits),
      counters_(counters),
      store_(store),
      refs_(refs),
      publish_(std::move(publish)),
      io_(io),
      wheel_(io.get_executor(), clock, tick, epoch,
             [this](AlarmWheel::Time at) { OnAlarm(at); }),
      fixed_ids_from_(Store::kNoFixedEventIds) {
  assert(index < 1024);
}

std::uint32_t Partition::Hash(NamespaceId ns, std::string_view key) {
  return KeyedHash32(ns, key);
}

std::uint32_t Partition::Find(NamespaceId ns, std::string_view key,
                              std::uint32_t hash) const {
  return keys_.Find(hash, [&](std::uint32_t r) {
    mu_.AssertHeld();  // (Called from Find's own scope.)
    return records_[r].ns() == ns && records_[r].blob.key() == key;
  });
}

wheel::TimingWheel::Time Partition::Deadline(WallNanos fire_time,
                                             WallNanos wall_now,
                                             SteadyTime steady_now) const {
  return wheel_.ToWheel(steady_now) +
         std::chrono::nanoseconds(std::max<WallNanos>(0, fire_time - wall_now));
}

OpResult Partition::ApplyOne(Op& op, WallNanos wall_now, SteadyTime steady_now,
                             Batch* batch) {
  assert((store_ != nullptr) == (batch != nullptr));
  return std::visit(
      [&](auto& o) -> OpResult {
        mu_.AssertHeld();  // (Called from ApplyOne's own scope.)
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, SetOp>) {
          return Set(o, wall_now, steady_now, batch);
        } else if constexpr (std::is_same_v<T, MoveOp>) {
          return Move(o, wall_now, steady_now, batch);
        } else {
          return Remove(o, wall_now, batch);
        }
      },
      op);
}

std::optional<OpResult> Partition::Apply(Op& op, Done& durable) {
  bool deferred = false;
  {
    Batch batch;
    MutexLock lock(&mu_);
    if (auto refused = Refusal()) return OpResult{*std::move(refused)};
    OpResult r = ApplyOne(op, clock_.Wall(), clock_.Steady(),
                          store_ != nullptr ? &batch : nullptr);
    if (batch.empty()) return r;
    // (If the store failed, the change stays in memory only, the completion
    // answers with the store's error, and the daemon stops.)
    batch.Touch(partition_);
    deferred = store_->CommitDeferred(
        batch, [this, r, upto = next_version_,
                durable = std::move(durable)](Status s) mutable {
          if (s.ok()) {
            NoteDurable(upto);
          } else {
            r.status = std::move(s);
          }
          durable(std::move(r));
        });
  }
  // The store may write it on this thread (a gRPC thread; RocksDB under
  // --fsync 1s or never, unless its writer or another thread is writing):
  // no hand-over to the writer and back for a call (tests/bench/README.md,
  // "A call's write on the thread that takes it"). A write the disk holds
  // up then holds this thread, and at most one thread at a time.
  if (deferred) store_->WriteHere();
  return std::nullopt;
}

bool Partition::ApplyGroup(std::vector<Op>& ops,
                           const std::vector<std::uint32_t>& indices,
                           std::vector<OpResult>& results,
                           std::function<void(Status)>& durable) {
  Batch batch;
  Batch* const into = store_ != nullptr ? &batch : nullptr;
  MutexLock lock(&mu_);
  if (auto refused = Refusal()) {
    for (std::uint32_t i : indices) results[i] = {*refused};
    return false;
  }
  const WallNanos wall = clock_.Wall();
  const SteadyTime steady = clock_.Steady();
  // In request order. Each key's slot in a large index is a cache miss:
  // fetch it a few operations ahead so that the misses overlap.
  constexpr std::size_t kAhead = 8;
  auto prefetch = [&](std::size_t k) {
    mu_.AssertHeld();  // (Called from ApplyGroup's own scope.)
    const Op& op = ops[indices[k]];
    const auto [ns, key] = std::visit(
        [](const auto& o) {
          if constexpr (std::is_same_v<std::decay_t<decltype(o)>, SetOp>) {
            return std::pair<NamespaceId, std::string_view>(o.ns, o.key());
          } else {
            return std::pair<NamespaceId, std::string_view>(o.ns, o.key);
          }
        },
        op);
    keys_.Prefetch(Hash(ns, key));
  };
  for (std::size_t k = 0; k < std::min(kAhead, indices.size()); ++k) {
    prefetch(k);
  }
  for (std::size_t k = 0; k < indices.size(); ++k) {
    if (k + kAhead < indices.size()) prefetch(k + kAhead);
    const std::uint32_t i = indices[k];
    results[i] = ApplyOne(ops[i], wall, steady, into);
  }
  if (batch.empty()) return false;
  batch.Touch(partition_);
  store_->Commit(batch, [this, upto = next_version_,
                         durable = std::move(durable)](Status s) {
    if (s.ok()) NoteDurable(upto);
    durable(std::move(s));
  });
  return true;
}

std::uint32_t Partition::NewRecord() {
  if (free_records_.empty()) {
    records_.emplace_back();
    return static_cast<std::uint32_t>(records_.size() - 1);
  }
  const std::uint32_t r = free_records_.back();
  free_records_.pop_back();
  return r;
}

void Partition::StorePayload(Record& rec, NamespaceId ns, const Blob& blob,
                             Batch& batch) {
  // Unique daemon-wide and never reused, as versions are.
  const std::uint64_t payload_id = rec.version;
  batch.AddTimer(
      StoredTimer{ns, blob.key(), rec.fire_time, rec.version, payload_id},
      blob.payload());
  rec.blob = KeyBlob(blob.key(), payload_id);
}

OpResult Partition::Set(SetOp& op, WallNanos wall_now, SteadyTime steady_now,
                        Batch* batch) {
  const std::uint32_t hash = Hash(op.ns, op.key());
  std::uint32_t r = Find(op.ns, op.key(), hash);
  const auto deadline = Deadline(op.fire_time, wall_now, steady_now);
  OpResult result;
  if (op.if_absent && r == KeyIndex::kNone) {
    if (auto refused = DedupRefused(op.ns, op.key(), wall_now)) {
      result.status = *std::move(refused);
      return result;
    }
  }
  if (result.status = ReserveIds(1, 0); !result.status.ok()) return result;
  if (r != KeyIndex::kNone) {
    if (op.if_absent) {
      result.status = Status::AlreadyExists("timer '" + std::string(op.key()) +
                                            "' is already pending");
      return result;
    }
    Record& rec = records_[r];
    rec.fire_time = op.fire_time;
    rec.version = NewVersion();
    if (batch != nullptr) {
      batch->RemoveTimer(PayloadIdOf(rec.blob));
      StorePayload(rec, op.ns, op.blob, *batch);
    } else {
      rec.blob = std::move(op.blob);
    }
    rec.blob.set_tag(static_cast<std::uint16_t>(op.ns));
    wheel_.wheel().Reschedule(rec.handle, deadline);
    wheel_.Scheduled(rec.handle);
    result.replaced = true;
  } else {
    // Events not yet acknowledged count too, so that memory stays bounded
    // while no worker drains them: producers get backpressure instead.
    const std::uint64_t undelivered =
        counters_.ready.load(std::memory_order_relaxed) +
        counters_.in_flight.load(std::memory_order_relaxed);
    if (counters_.pending.fetch_add(1) + undelivered >=
        limits_.max_pending_timers) {
      counters_.pending.fetch_sub(1);
      result.status = Status::ResourceExhausted(
          "pending-timer limit of " +
          std::to_string(limits_.max_pending_timers) +
          " reached (pending timers plus unacknowledged events)");
      return result;
    }
    r = NewRecord();
    Record& rec = records_[r];
    rec.fire_time = op.fire_time;
    rec.version = NewVersion();
    if (batch != nullptr) {
      StorePayload(rec, op.ns, op.blob, *batch);
    } else {
      rec.blob = std::move(op.blob);
    }
    rec.blob.set_tag(static_cast<std::uint16_t>(op.ns));
    rec.handle = wheel_.wheel().Schedule(deadline, r);
    wheel_.Scheduled(rec.handle);
    keys_.Insert(hash, r);
    refs_->Add(op.ns);  // (The caller's pin keeps it above zero.)
    counters_.of(op.ns).pending.fetch_add(1, std::memory_order_relaxed);
  }
  counters_.set.fetch_add(1, std::memory_order_relaxed);
  counters_.of(op.ns).set.fetch_add(1, std::memory_order_relaxed);
  result.version = records_[r].version;
  result.fire_time = op.fire_time;
  return result;
}

std::uint32_t Partition::FindExpected(NamespaceId ns, const std::string& key,
                                      std::uint64_t expected_version,
                                      Status* error) const {
  const std::uint32_t r = Find(ns, key, Hash(ns, key));
  if (r == KeyIndex::kNone) {
    *error = Status::NotFound("no pending timer '" + key + "'");
  } else if (expected_version != 0 && expected_version != records_[r].version) {
    *error = Status::Aborted("timer '" + key + "' has version " +
                             std::to_string(records_[r].version) + ", not " +
                             std::to_string(expected_version));
    return KeyIndex::kNone;
  }
  return r;
}

OpResult Partition::Move(MoveOp& op, WallNanos wall_now, SteadyTime steady_now,
                         Batch* batch) {
  OpResult result;
  const std::uint32_t r =
      FindExpected(op.ns, op.key, op.expected_version, &result.status);
  if (r == KeyIndex::kNone) return result;
  if (result.status = ReserveIds(1, 0); !result.status.ok()) return result;
  Record& rec = records_[r];
  rec.fire_time = op.fire_time;
  rec.version = NewVersion();
  if (batch != nullptr) {
    batch->MoveTimer(StoredTimer{op.ns, op.key, rec.fire_time, rec.version,
                                 PayloadIdOf(rec.blob)});
  }
  wheel_.wheel().Reschedule(rec.handle,
                            Deadline(op.fire_time, wall_now, steady_now));
  wheel_.Scheduled(rec.handle);
  counters_.of(op.ns).moved.fetch_add(1, std::memory_order_relaxed);
  result.version = rec.version;
  result.fire_time = rec.fire_time;
  return result;
}

OpResult Partition::Remove(RemoveOp& op, WallNanos wall_now, Batch* batch) {
  OpResult result;
  const std::uint32_t r =
      FindExpected(op.ns, op.key, op.expected_version, &result.status);
  if (r == KeyIndex::kNone) return result;
  Record& rec = records_[r];
  result.version = rec.version;
  result.fire_time = rec.fire_time;
  if (batch != nullptr) batch->RemoveTimer(PayloadIdOf(rec.blob));
  NoteGone(op.ns, op.key, DedupEntry::Fate::kRemoved, rec.version, wall_now,
           batch);
  wheel_.wheel().Cancel(rec.handle);
  Forget(r);
  counters_.of(op.ns).removed.fetch_add(1, std::memory_order_relaxed);
  result.removed = true;
  return result;
}

void Partition::ClockChanged(bool rederive) {
  MutexLock lock(&mu_);
  if (stopped_ || !owned_) return;
  if (rederive) {
    const WallNanos wall_now = clock_.Wall();
    const SteadyTime steady_now = clock_.Steady();
    for (Record& rec : records_) {
      if (!rec.blob) continue;  // A free record.
      wheel_.wheel().Reschedule(rec.handle,
                                Deadline(rec.fire_time, wall_now, steady_now));
    }
    for (std::uint32_t id = 0; id < schedules_.capacity(); ++id) {
      const ScheduleSet::Slot& e = schedules_.slot(id);
      if (schedules_.live(id) && e.wake != ScheduleSet::kNoWake) {
        wheel_.wheel().Reschedule(e.handle,
                                  Deadline(e.wake, wall_now, steady_now));
      }
    }
  }
  FireDue();
}

void Partition::Stop() {
  MutexLock lock(&mu_);
  stopped_ = true;
  wheel_.Stop();
}

void Partition::Forget(std::uint32_t r) {
  Record& rec = records_[r];
  keys_.Erase(Hash(rec.ns(), rec.blob.key()), r);
  counters_.of(rec.ns()).pending.fetch_sub(1, std::memory_order_relaxed);
  rec.blob = Blob();
  free_records_.push_back(r);
  counters_.pending.fetch_sub(1);
}

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
    asio::defer(io_, [store = store_] { store->WriteHere(); });
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
