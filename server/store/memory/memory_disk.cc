// MemoryStore::Disk: what a memory store has "written", kept apart from the
// store so that a test can open it again (a restart) or make it fail
// (memory_store.h).
#include <algorithm>

#include "server/common/stable_hash.h"
#include "server/store/memory/memory_store.h"

namespace delayd {

void MemoryStore::Disk::Hold() {
  MutexLock lock(&mu_);
  held_ = true;
}

void MemoryStore::Disk::Release() {
  {
    MutexLock lock(&mu_);
    held_ = false;
  }
  released_.SignalAll();
}

void MemoryStore::Disk::FailWrites(Status error) {
  MutexLock lock(&mu_);
  fail_ = std::move(error);
}

std::size_t MemoryStore::Disk::timers() const {
  MutexLock lock(&mu_);
  return timers_.size();
}

std::size_t MemoryStore::Disk::events() const {
  MutexLock lock(&mu_);
  return events_.size();
}

std::size_t MemoryStore::Disk::fates() const {
  MutexLock lock(&mu_);
  return fates_.size();
}

std::optional<StoredFate> MemoryStore::Disk::FateOf(std::uint64_t id) const {
  MutexLock lock(&mu_);
  auto it = fates_.find(id);
  if (it == fates_.end()) return std::nullopt;
  // (The error's view is valid while the record is not rewritten.)
  return StoredFate{it->second.attempts, it->second.dead, it->second.error,
                    it->second.retry_at};
}

void MemoryStore::Disk::SharePartitions(std::uint32_t n) {
  MutexLock lock(&mu_);
  shared_ = n;
}

std::uint32_t MemoryStore::Disk::shared_partitions() const {
  MutexLock lock(&mu_);
  return shared_;
}

void MemoryStore::Disk::FixEventIdsFrom(std::uint64_t seq) {
  MutexLock lock(&mu_);
  fixed_ids_from_ = seq;
}

std::uint64_t MemoryStore::Disk::fixed_event_ids_from() const {
  MutexLock lock(&mu_);
  return fixed_ids_from_;
}

std::uint64_t MemoryStore::Disk::untouched() const {
  MutexLock lock(&mu_);
  return untouched_;
}

std::uint64_t MemoryStore::Disk::touched() const {
  MutexLock lock(&mu_);
  return touched_;
}

void MemoryStore::Disk::Check(const Batch& batch, std::uint32_t partition) {
  if (shared_ == 0) return;
  const auto t = batch.touched();
  ++(std::find(t.begin(), t.end(), partition) != t.end() ? touched_
                                                         : untouched_);
}

void MemoryStore::Disk::Check(const Batch& batch, NamespaceId ns,
                              std::string_view key) {
  if (shared_ == 0) return;
  const std::string_view name =
      ns < namespaces_.size() ? std::string_view(namespaces_[ns]) : "";
  Check(batch, StablePartition(name, key, shared_));
}

void MemoryStore::Disk::CheckPartition(const Batch& batch,
                                       const Batch::Change& c) {
  if (shared_ == 0) return;
  auto event = [&](std::uint64_t id) {
    mu_.AssertHeld();  // (Called from CheckPartition's own scope.)
    if (auto it = events_.find(id); it != events_.end()) {
      Check(batch, it->second.event.ns, it->second.key);
    }
  };
  switch (c.kind) {
    case Batch::Kind::kAddTimer:
    case Batch::Kind::kMoveTimer:
      return Check(batch, c.timer.ns, c.timer.key);
    case Batch::Kind::kRemoveTimer:
      if (auto it = timers_.find(c.payload_id); it != timers_.end()) {
        Check(batch, it->second.ns, it->second.key);
      }
      return;
    case Batch::Kind::kFireTimer:
      return Check(batch, c.event.ns, c.event.key);
    case Batch::Kind::kRemoveEvent:
    case Batch::Kind::kPutFate:
    case Batch::Kind::kRemoveFate:
      return event(c.id);
    case Batch::Kind::kReserveIds:
      return Check(batch, c.partition);
    case Batch::Kind::kPutSchedule:
    case Batch::Kind::kPutDedup:
      return Check(batch, static_cast<NamespaceId>(c.id), c.name);
    case Batch::Kind::kPutNamespace:
    case Batch::Kind::kPutPolicy:
      return;  // Not of a partition.
  }
}

void MemoryStore::Disk::Apply(const Batch& batch) {
  Batch::Reader reader(batch);
  Batch::Change c;
  while (reader.Next(&c)) {
    CheckPartition(batch, c);
    switch (c.kind) {
      case Batch::Kind::kAddTimer:
        payloads_[c.timer.payload_id] = std::string(c.data);
        [[fallthrough]];
      case Batch::Kind::kMoveTimer:
        timers_[c.timer.payload_id] =
            Timer{c.timer.ns, std::string(c.timer.key), c.timer.fire_time,
                  c.timer.version};
        break;
      case Batch::Kind::kRemoveTimer:
        timers_.erase(c.payload_id);
        payloads_.erase(c.payload_id);
        break;
      case Batch::Kind::kFireTimer:
        timers_.erase(c.event.payload_id);
        events_[c.event.id] = EventRecord{c.event, std::string(c.event.key)};
        break;
      case Batch::Kind::kRemoveEvent:
        events_.erase(c.id);
        payloads_.erase(c.payload_id);
        if (c.flag) fates_.erase(c.id);
        break;
      case Batch::Kind::kPutFate:
        fates_[c.id] = Fate{c.fate.attempts, c.fate.dead,
                            std::string(c.fate.error), c.fate.retry_at};
        break;
      case Batch::Kind::kRemoveFate:
        fates_.erase(c.id);
        break;
      case Batch::Kind::kReserveIds:
        counters_[c.partition] = {c.version_limit, c.event_seq_limit};
        break;
      case Batch::Kind::kPutNamespace:
        if (namespaces_.size() <= c.id) namespaces_.resize(c.id + 1);
        namespaces_[c.id] = std::string(c.name);
        break;
      case Batch::Kind::kPutPolicy:
        if (c.data.empty()) {
          policies_.erase(std::string(c.name));
        } else {
          policies_[std::string(c.name)] = std::string(c.data);
        }
        break;
      case Batch::Kind::kPutSchedule: {
        auto id =
            std::make_pair(static_cast<NamespaceId>(c.id), std::string(c.name));
        if (c.data.empty()) {
          schedules_.erase(id);
        } else {
          schedules_[std::move(id)] = std::string(c.data);
        }
        break;
      }
      case Batch::Kind::kPutDedup: {
        auto id =
            std::make_pair(static_cast<NamespaceId>(c.id), std::string(c.name));
        if (c.data.empty()) {
          dedup_.erase(id);
        } else {
          dedup_[std::move(id)] = std::string(c.data);
        }
        break;
      }
    }
  }
}

}  // namespace delayd
