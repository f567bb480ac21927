// Partition's version and event ids: the blocks reserved in the store, and
// which firings take an id from the event counter (partition.h).
#include <algorithm>
#include <string>

#include "server/core/partition.h"

namespace delayd {

Status Partition::ReserveIds(std::uint64_t versions, std::uint64_t events) {
  if (store_ == nullptr) return Status::Ok();  // Nothing outlives the process.
  // (Limits are never below the next numbers: nothing beyond is handed out.)
  const std::uint64_t versions_left = version_limit_ - next_version_;
  const std::uint64_t events_left = event_seq_limit_ - next_event_seq_;
  if (!reserving_ && (versions_left < versions + kIdBlock / 2 ||
                      events_left < events + kIdBlock / 2)) {
    ReserveAhead(versions, events);
  }
  if (events > 0 && next_event_seq_ + events > fixed_ids_from_) {
    // (A store's counters have room for about 700,000 restarts below its
    // fixed ids: Store::FixedEventIdsFrom.)
    return Status::ResourceExhausted(
        "the event ids of timers set before event ids were fixed ran out");
  }
  if (versions <= versions_left && events <= events_left) return Status::Ok();
  if (next_version_ + versions + kIdBlock >= (std::uint64_t{1} << 54) ||
      next_event_seq_ + events + kIdBlock >= (std::uint64_t{1} << 54)) {
    return Status::ResourceExhausted("version or event id space exhausted");
  }
  return Status::Unavailable("partition " + std::to_string(partition_) +
                             " is reserving ids (a synced write); try again");
}

void Partition::ReserveAhead(std::uint64_t versions, std::uint64_t events) {
  // One synced write per kIdBlock ids, off the partition; a restart skips at
  // most 1.5 blocks of unused ones: 2^54 sequence numbers last 570 years at
  // a million a second.
  const std::uint64_t version_limit =
      std::max(version_limit_, next_version_ + versions + kIdBlock);
  const std::uint64_t event_limit =
      std::max(event_seq_limit_, next_event_seq_ + events + kIdBlock);
  if (event_limit >= (std::uint64_t{1} << 54) ||
      version_limit >= (std::uint64_t{1} << 54)) {
    return;
  }
  Batch batch;
  batch.ReserveIds(partition_, version_limit, event_limit);
  reserving_ = true;
  batch.Touch(partition_);
  store_->CommitSynced(batch, [this, version_limit, event_limit](Status s) {
    MutexLock lock(&mu_);
    reserving_ = false;
    if (!s.ok()) return;  // (The store failed: nothing more is written.)
    version_limit_ = std::max(version_limit_, version_limit);
    event_seq_limit_ = std::max(event_seq_limit_, event_limit);
  });
}

std::uint64_t Partition::CountedIds(
    const std::vector<std::uint32_t>& records) const {
  std::uint64_t counted = 0;
  for (std::uint32_t r : records) counted += !FixedId(records_[r].version);
  return counted;
}

}  // namespace delayd
