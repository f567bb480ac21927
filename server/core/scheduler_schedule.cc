// The scheduler's recurring schedules: each call goes to the partition that
// owns the schedule's namespace and key.
#include <algorithm>

#include "server/core/scheduler.h"

namespace delayd {

void Scheduler::SetSchedule(NamespaceId ns, std::string key, ScheduleRecord rec,
                            bool if_absent, std::uint64_t expected_version,
                            Partition::ScheduleDone done) {
  if (Status s = Admit(); !s.ok()) {
    done(Partition::ScheduleResult::Error(std::move(s)));
    return;
  }
  Partition& p = *partitions_[PartitionOf(ns, key)];
  if (auto r = p.SetSchedule(ns, key, std::move(rec), if_absent,
                             expected_version, done)) {
    done(std::move(*r));
  }
}

void Scheduler::RemoveSchedule(NamespaceId ns, std::string key,
                               std::uint64_t expected_version,
                               Partition::ScheduleDone done) {
  if (Status s = Admit(); !s.ok()) {
    done(Partition::ScheduleResult::Error(std::move(s)));
    return;
  }
  Partition& p = *partitions_[PartitionOf(ns, key)];
  // The namespace stops counting the schedule once its removal is durable
  // (namespace_refs.h).
  Partition::ScheduleDone durable = [this, ns,
                                     done](Partition::ScheduleResult r) {
    if (r.removed && r.status.ok()) refs_->Release(ns);
    done(std::move(r));
  };
  if (auto r = p.RemoveSchedule(ns, key, expected_version, durable)) {
    durable(std::move(*r));
  }
}

void Scheduler::ActOnSchedule(NamespaceId ns, std::string key,
                              Partition::ScheduleAction action,
                              std::uint64_t expected_version,
                              Partition::ScheduleDone done) {
  if (Status s = Admit(); !s.ok()) {
    done(Partition::ScheduleResult::Error(std::move(s)));
    return;
  }
  Partition& p = *partitions_[PartitionOf(ns, key)];
  if (auto r = p.ActOnSchedule(ns, key, action, expected_version, done)) {
    done(std::move(*r));
  }
}

Status Scheduler::GetSchedule(NamespaceId ns, std::string_view key,
                              std::optional<Partition::ScheduleInfo>* out) {
  return partitions_[PartitionOf(ns, key)]->GetSchedule(ns, key, out);
}

Status Scheduler::ListSchedules(NamespaceId ns, std::string_view prefix,
                                const std::string& after, std::size_t limit,
                                std::vector<std::string>* keys) {
  const Store::Held held = this->held();
  for (std::uint32_t p = 0; p < partitions_.size(); ++p) {
    // On a cluster node, the partitions it holds; one of them not loaded
    // yet refuses the call.
    if (shared_partitions_ && !held.contains(p)) continue;
    Status s = partitions_[p]->ListSchedules(ns, prefix, after, limit, keys);
    if (!s.ok()) return s;
  }
  std::sort(keys->begin(), keys->end());
  if (keys->size() > limit) keys->resize(limit);
  return Status::Ok();
}

}  // namespace delayd
