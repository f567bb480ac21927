// Partition: the dedup window's entries of its keys (dedup_table.h).
//
// An entry counts in its namespace's references from when it is recorded
// until its deletion is durable (or the partition is given up), so a
// namespace with entries keeps its id, and its entries their namespace.
#include "server/core/partition.h"
#include "server/core/schedule_record.h"

namespace delayd {
namespace {

// Entries a purge deletes at most: one store batch of a bounded size, and
// a bounded hold of the partition's mutex.
constexpr std::size_t kPurgeMax = 4096;

}  // namespace

void Partition::SetDedupWindows(DedupWindows* windows) {
  MutexLock lock(&mu_);
  dedup_windows_ = windows;
}

void Partition::NoteGone(NamespaceId ns, std::string_view key,
                         DedupEntry::Fate fate, std::uint64_t version,
                         WallNanos at, Batch* batch) {
  if (dedup_windows_ == nullptr) return;
  const std::chrono::nanoseconds window = dedup_windows_->Of(ns);
  if (window.count() <= 0) return;
  // A schedule's runs are the schedule's, not keys a producer sets.
  std::string_view schedule;
  std::uint64_t run = 0;
  if (SplitRunKey(key, &schedule, &run)) return;
  const DedupEntry e{fate, version, at, at + window.count()};
  std::optional<std::pair<NamespaceId, std::string>> evicted;
  const std::optional<bool> added =
      dedup_.Put(ns, key, e, *dedup_windows_, &evicted);
  if (evicted) dedup_evicted_.push_back(*std::move(evicted));
  if (!added) return;  // (No room, none to let go.)
  dedup_held_.store(true, std::memory_order_relaxed);
  // (The timer's own reference is still held: never from zero.)
  if (*added) refs_->Add(ns);
  if (batch != nullptr) batch->PutDedup(ns, key, EncodeDedup(e));
}

std::optional<Status> Partition::DedupRefused(NamespaceId ns,
                                              std::string_view key,
                                              WallNanos now) const {
  if (const DedupEntry* e = dedup_.Find(ns, key, now)) {
    return Status::AlreadyExists(DedupRefusal(key, *e));
  }
  return std::nullopt;
}

Status Partition::RestoreDedup(NamespaceId ns, std::string_view key,
                               std::string_view encoded) {
  const std::optional<DedupEntry> e = DecodeDedup(encoded);
  MutexLock lock(&mu_);
  if (!e) {
    return Status::Internal("the dedup record of key '" + std::string(key) +
                            "' is malformed");
  }
  if (dedup_windows_ == nullptr) return Status::Ok();
  std::optional<std::pair<NamespaceId, std::string>> evicted;
  const std::optional<bool> added =
      dedup_.Put(ns, key, *e, *dedup_windows_, &evicted);
  if (evicted) dedup_evicted_.push_back(*std::move(evicted));
  if (added.value_or(false)) {
    refs_->Add(ns);
  } else if (!added) {
    // No room: deleted by the next purge, as one let go would be.
    refs_->Add(ns);
    dedup_evicted_.emplace_back(ns, std::string(key));
  }
  dedup_held_.store(true, std::memory_order_relaxed);
  return Status::Ok();
}

bool Partition::PurgeDedup() {
  Batch batch;
  std::vector<NamespaceId> release;
  bool more = false;
  if (!dedup_held_.load(std::memory_order_relaxed)) return false;
  {
    MutexLock lock(&mu_);
    if (stopped_ || !owned_ || dedup_windows_ == nullptr) return false;
    std::vector<std::pair<NamespaceId, std::string>> gone =
        dedup_.TakeExpired(clock_.Wall(), kPurgeMax, *dedup_windows_);
    more = gone.size() == kPurgeMax;
    const std::size_t evicted = std::min(dedup_evicted_.size(), kPurgeMax);
    std::move(dedup_evicted_.end() - evicted, dedup_evicted_.end(),
              std::back_inserter(gone));
    more = more || evicted < dedup_evicted_.size();
    dedup_evicted_.resize(dedup_evicted_.size() - evicted);
    dedup_held_.store(dedup_.size() != 0 || !dedup_evicted_.empty(),
                      std::memory_order_relaxed);
    if (gone.empty()) return more;
    release.reserve(gone.size());
    for (const auto& [ns, key] : gone) {
      release.push_back(ns);
      // (A key let go and recorded again since keeps its new record.)
      if (store_ != nullptr && dedup_.Peek(ns, key) == nullptr) {
        batch.PutDedup(ns, key, "");
      }
    }
    if (store_ != nullptr) {
      batch.Touch(partition_);
      store_->Commit(batch, [refs = refs_, release](Status s) {
        // (Not durable: the entries come back after a restart, counted.)
        if (!s.ok()) return;
        for (NamespaceId ns : release) refs->Release(ns);
      });
      return more;
    }
  }
  for (NamespaceId ns : release) refs_->Release(ns);
  return more;
}

void Partition::Settled(
    NamespaceId ns,
    const std::vector<std::pair<std::string, std::uint64_t>>& keys,
    WallNanos at) {
  Batch batch;
  MutexLock lock(&mu_);
  if (stopped_ || !owned_) return;  // (The next owner counts from the fire.)
  for (const auto& [key, version] : keys) {
    const DedupEntry* e = dedup_.Peek(ns, key);
    if (e != nullptr && e->version > version) continue;
    NoteGone(ns, key, DedupEntry::Fate::kAcked, version, at,
             store_ != nullptr ? &batch : nullptr);
  }
  if (batch.empty()) return;
  batch.Touch(partition_);
  // (If it is lost, the window counts from the fire.)
  store_->Commit(batch, nullptr);
}

}  // namespace delayd
