// Partition: its records coming and going whole. Restored from the store
// at start (recovery) or when the node takes the partition; forgotten at
// once when it is disowned (shared partitions, partition.h).
#include <algorithm>

#include "server/core/partition.h"
#include "server/core/payload_ref.h"

namespace delayd {

Status Partition::NotServed(std::uint32_t partition) {
  return Status::Unavailable("partition " + std::to_string(partition) +
                             " is not served here now (another node owns "
                             "it, or this node is taking it)");
}

std::optional<Status> Partition::Refusal() const {
  if (stopped_) return ShuttingDown();
  if (!owned_) return NotServed(partition_);
  return std::nullopt;
}

std::optional<Status> Partition::Unserved() const {
  MutexLock lock(&mu_);
  return Refusal();
}

bool Partition::owned() const {
  MutexLock lock(&mu_);
  return owned_;
}

void Partition::Own() {
  MutexLock lock(&mu_);
  owned_ = true;
  if (!stopped_) FireDue();
}

void Partition::Disown() {
  MutexLock lock(&mu_);
  owned_ = false;
  for (std::uint32_t r = 0; r < records_.size(); ++r) {
    Record& rec = records_[r];
    if (!rec.blob) continue;  // A free record.
    const NamespaceId ns = rec.ns();
    wheel_.wheel().Cancel(rec.handle);
    Forget(r);
    refs_->Release(ns);
  }
  overdue_.clear();
  for (std::uint32_t id = 0; id < schedules_.capacity(); ++id) {
    if (!schedules_.live(id)) continue;
    const ScheduleSet::Slot& e = schedules_.slot(id);
    const NamespaceId ns = e.ns;
    if (e.wake != ScheduleSet::kNoWake) wheel_.wheel().Cancel(e.handle);
    schedules_.Remove(id);
    refs_->Release(ns);
  }
  if (dedup_windows_ != nullptr) {
    for (NamespaceId ns : dedup_.TakeAll(*dedup_windows_)) refs_->Release(ns);
  }
  for (const auto& [ns, key] : dedup_evicted_) refs_->Release(ns);
  dedup_evicted_.clear();
  dedup_held_.store(false, std::memory_order_relaxed);
}

Status Partition::RestoreCounters(std::uint64_t next_version,
                                  std::uint64_t next_event_seq,
                                  std::uint64_t fixed_event_ids_from) {
  Batch batch;
  {
    MutexLock lock(&mu_);
    fixed_ids_from_ = fixed_event_ids_from;
    next_version_ = std::max(next_version_, next_version);
    if (fixed_ids_from_ != Store::kNoFixedEventIds) {
      next_version_ = std::max(next_version_, fixed_ids_from_);
    }
    next_event_seq_ = std::max(next_event_seq_, next_event_seq);
    // The first block, synced before anything is served, with room for
    // firing the overdue timers too.
    version_limit_ = next_version_ + kIdBlock;
    event_seq_limit_ = next_event_seq_ + overdue_.size() + kIdBlock;
    batch.ReserveIds(partition_, version_limit_, event_seq_limit_);
    NoteDurable(next_version_);  // Every version restored was stored.
  }
  batch.Touch(partition_);
  return store_->WriteNow(batch);
}

void Partition::Restore(const StoredTimer& t, WallNanos wall_now,
                        SteadyTime steady_now) {
  MutexLock lock(&mu_);
  const std::uint32_t r = NewRecord();
  Record& rec = records_[r];
  rec.fire_time = t.fire_time;
  rec.version = t.version;
  rec.blob = KeyBlob(t.key, t.payload_id);
  rec.blob.set_tag(static_cast<std::uint16_t>(t.ns));
  keys_.Insert(Hash(t.ns, t.key), r);
  counters_.pending.fetch_add(1, std::memory_order_relaxed);
  counters_.of(t.ns).pending.fetch_add(1, std::memory_order_relaxed);
  refs_->Add(t.ns);
  if (t.fire_time <= wall_now) {
    overdue_.push_back(r);
  } else {
    rec.handle =
        wheel_.wheel().Schedule(Deadline(t.fire_time, wall_now, steady_now), r);
  }
}

std::vector<Event> Partition::FireOverdue(std::function<void(Status)> durable) {
  MutexLock lock(&mu_);
  std::sort(overdue_.begin(), overdue_.end(),
            [this](std::uint32_t a, std::uint32_t b) {
              mu_.AssertHeld();  // (Called from FireOverdue's own scope.)
              return records_[a].fire_time != records_[b].fire_time
                         ? records_[a].fire_time < records_[b].fire_time
                         : records_[a].version < records_[b].version;
            });
  if (Status s = ReserveIds(0, CountedIds(overdue_)); !s.ok()) {
    durable(s);
    return {};
  }
  Batch batch;
  std::vector<Event> events = TakeEvents(overdue_, Reason::kExpired, &batch);
  // (Published by the caller at once: their payloads are stored already,
  // and until this firing is written the timers are, so a crash fires
  // them again.)
  overdue_ = {};
  batch.Touch(partition_);
  store_->Commit(batch, std::move(durable));
  // Arms the wake-up for the timers still pending.
  wheel_.Rearm();
  return events;
}

}  // namespace delayd
