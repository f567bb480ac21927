// Partition: its keys and records, and the calls that change them (Set,
// Move, Remove), applied under its mutex (partition.h).
#include "server/core/partition.h"

#include <algorithm>
#include <cassert>

#include "server/common/keyed_hash.h"
#include "server/core/payload_ref.h"

namespace delayd {

Partition::Partition(LoopExecutor pool, asio::any_io_executor timers,
                     std::uint32_t index, const Clock& clock,
                     std::chrono::nanoseconds tick, SteadyTime epoch,
                     const Limits& limits, Counters& counters, Store* store,
                     NamespaceRefs* refs, Publish publish)
    : partition_(index),
      clock_(clock),
      limits_(limits),
      counters_(counters),
      store_(store),
      refs_(refs),
      publish_(std::move(publish)),
      pool_(pool),
      wheel_(pool, std::move(timers), clock, tick, epoch,
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
    Store::Done done = [this, r, upto = next_version_,
                        durable = std::move(durable)](Status s) mutable {
      if (s.ok()) {
        NoteDurable(upto);
      } else {
        r.status = std::move(s);
      }
      durable(std::move(r));
    };
    deferred = store_->CommitDeferred(batch, std::move(done));
  }
  // The store may write it on this thread (a gRPC thread or the loop;
  // RocksDB under --fsync 1s or never, unless its writer or another thread
  // is writing):
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

}  // namespace delayd
