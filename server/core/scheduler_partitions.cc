// Scheduler: partitions shared with other nodes, taken and dropped as this
// node's leases come and go (scheduler.h, TakePartition). Loading a
// partition is recovery (scheduler_recover.cc) for one partition, while the
// rest of the node serves: namespaces are found by name (ids are this
// node's own), and nothing loaded is published until the partition is
// owned.
#include <algorithm>
#include <map>

#include "server/core/payload_ref.h"
#include "server/core/scheduler.h"

namespace delayd {
namespace {

// What a partition's events become once it is owned, by namespace.
struct LoadedEvents {
  std::vector<Event> ready;
  std::vector<RetryingEvent> retrying;
  std::vector<DeadLetter> dead;
};

}  // namespace

void Scheduler::TakePartition(std::uint32_t part, std::int64_t epoch,
                              std::function<void(Status)> done) {
  {
    MutexLock lock(&held_mu_);
    held_[part] = epoch;
    store_->SetHeld(held_);
  }
  asio::post(*reads_, [this, part, done = std::move(done)] {
    done(LoadPartition(part));
  });
}

void Scheduler::DropPartition(std::uint32_t part, std::function<void()> done) {
  {
    MutexLock lock(&held_mu_);
    held_.erase(part);
    store_->SetHeld(held_);
    partitions_[part]->Disown();
  }
  std::vector<Dispatcher*> dispatchers;
  {
    ReaderLock lock(&ns_mutex_);
    for (const auto& d : owned_dispatchers_) dispatchers.push_back(d.get());
  }
  auto left = std::make_shared<std::atomic<std::size_t>>(dispatchers.size());
  auto finish = std::make_shared<std::function<void()>>(std::move(done));
  if (dispatchers.empty()) {
    if (*finish) (*finish)();
    return;
  }
  for (Dispatcher* d : dispatchers) {
    d->DropPartition(part, [left, finish](std::uint64_t) {
      if (left->fetch_sub(1) == 1 && *finish) (*finish)();
    });
  }
}

Store::Held Scheduler::held() const {
  MutexLock lock(&held_mu_);
  return held_;
}

Status Scheduler::LoadPartition(std::uint32_t part) {
  Partition& p = *partitions_[part];
  if (p.owned()) return Status::Ok();
  const WallNanos wall_now = clock_.Wall();
  const SteadyTime steady_now = clock_.Steady();
  // Pins keep the namespaces met alive until their records hold them.
  std::map<std::string, NamespacePin, std::less<>> pins;
  Status error;
  auto id_of = [&](std::string_view name) -> std::optional<NamespaceId> {
    if (auto it = pins.find(name); it != pins.end()) return it->second.id();
    NamespacePin pin;
    if (Status s = Intern(name, &pin); !s.ok()) {
      if (error.ok()) error = s;
      return std::nullopt;
    }
    const NamespaceId id = pin.id();
    pins.emplace(std::string(name), std::move(pin));
    return id;
  };
  std::uint64_t next_version = 1, next_event_seq = 1;
  std::map<NamespaceId, LoadedEvents> events;
  // Schedules come first; their index is built before the timers and
  // events tell them which of their runs are open.
  bool schedules_indexed = false;
  auto index_schedules = [&] {
    if (!std::exchange(schedules_indexed, true)) p.EndScheduleRestore();
  };
  Store::PartitionVisitor visit;
  visit.schedule = [&](std::string_view ns, std::string_view key,
                       std::string_view encoded) {
    const auto id = id_of(ns);
    if (!id) return;
    std::uint64_t version = 0;
    Status s =
        p.RestoreSchedule(*id, key, encoded, wall_now, steady_now, &version);
    if (!s.ok() && error.ok()) error = s;
    next_version = std::max(next_version, (version >> 10) + 1);
  };
  visit.dedup = [&](std::string_view ns, std::string_view key,
                    std::string_view encoded) {
    const auto id = id_of(ns);
    if (!id) return;
    Status s = p.RestoreDedup(*id, key, encoded);
    if (!s.ok() && error.ok()) error = s;
  };
  visit.timer = [&](std::string_view ns, const StoredTimer& t) {
    index_schedules();
    const auto id = id_of(ns);
    if (!id) return;
    StoredTimer timer = t;
    timer.ns = *id;
    p.Restore(timer, wall_now, steady_now);
    NoteOpenRun(*id, t.key);
    next_version = std::max(next_version, (t.version >> 10) + 1);
  };
  visit.event = [&](std::string_view ns, const StoredEvent& e,
                    const StoredFate* fate) {
    index_schedules();
    const auto id = id_of(ns);
    if (!id) return;
    Event event{e.id,      *id,         KeyBlob(e.key, e.payload_id),
                e.version, e.fire_time, e.fired_at,
                0,         e.reason};
    next_version = std::max(next_version, (e.version >> 10) + 1);
    next_event_seq = std::max(next_event_seq, (e.id >> 10) + 1);
    LoadedEvents& into = events[*id];
    if (fate == nullptr || !fate->dead) NoteOpenRun(*id, e.key);
    if (fate == nullptr) {
      into.ready.push_back(std::move(event));
      return;
    }
    event.attempt = fate->attempts;
    if (fate->dead) {
      into.dead.push_back({std::move(event), std::string(fate->error)});
    } else if (fate->retry_at > wall_now) {
      into.retrying.push_back(
          {std::move(event), fate->retry_at, std::string(fate->error)});
    } else {
      into.ready.push_back(std::move(event));
    }
  };
  p.BeginScheduleRestore();
  std::uint64_t version_limit = 0, event_seq_limit = 0;
  Status s =
      store_->LoadPartition(part, &version_limit, &event_seq_limit, visit);
  index_schedules();
  if (s.ok()) s = error;
  if (s.ok()) {
    s = p.RestoreCounters(std::max(next_version, version_limit),
                          std::max(next_event_seq, event_seq_limit),
                          store_->FixedEventIdsFrom());
  }
  std::vector<Event> overdue;
  if (s.ok()) {
    overdue = p.FireOverdue([this, part](Status fired) {
      // On a shared store a firing is refused when the partition moved
      // (the node drops it, its next owner loads it whole) or when the
      // store refuses writes (on_store_write_failure tells): neither is
      // damage.
      if (!fired.ok() && options_.on_store_error && !shared_partitions_) {
        options_.on_store_error(
            Status::Unavailable("firing the overdue timers of partition " +
                                std::to_string(part) + ": " + fired.message()));
      }
    });
  }
  MutexLock lock(&held_mu_);
  if (s.ok() && !held_.contains(part)) {
    s = Status::Unavailable("partition " + std::to_string(part) +
                            " was let go while it loaded");
  }
  if (!s.ok()) {
    p.Disown();
    for (const Event& e : overdue) refs_->Release(e.ns);
    return s;
  }
  // An event loaded takes a hold on its namespace (a timer's hold carries
  // over to its event: the overdue ones). Events not acknowledged before
  // the partition moved go first, then the timers that came due meanwhile,
  // in fire-time order.
  for (const auto& [ns, loaded] : events) {
    refs_->Add(ns, static_cast<std::int64_t>(loaded.dead.size() +
                                             loaded.retrying.size() +
                                             loaded.ready.size()));
  }
  for (Event& e : overdue) events[e.ns].ready.push_back(std::move(e));
  for (auto& [ns, loaded] : events) {
    Dispatcher& d = *dispatchers_[ns];
    if (!loaded.dead.empty()) d.RestoreDeadLetters(std::move(loaded.dead));
    if (!loaded.retrying.empty()) d.RestoreRetrying(std::move(loaded.retrying));
    if (!loaded.ready.empty()) d.Publish(std::move(loaded.ready));
  }
  p.Own();
  return Status::Ok();
}

}  // namespace delayd
