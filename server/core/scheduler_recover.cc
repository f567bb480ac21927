// Scheduler: recovery from the store at start. Policies first, then
// namespaces, counters, timers, schedules, event fates and events; overdue
// timers are fired, and namespaces left empty freed. (With shared
// partitions, only the policies: see scheduler_partitions.cc.)
#include <algorithm>

#include "server/core/payload_ref.h"
#include "server/core/scheduler.h"

namespace delayd {

void Scheduler::NoteOpenRun(NamespaceId ns, std::string_view run_key) {
  std::string_view key;
  std::uint64_t run = 0;
  if (SplitRunKey(run_key, &key, &run)) {
    partitions_[PartitionOf(ns, key)]->RunState(ns, run_key, /*open=*/true);
  }
}

Status Scheduler::Recover(RecoveryReport* report) {
  const auto started = std::chrono::steady_clock::now();
  if (Status s = RecoverPolicies(); !s.ok()) return s;
  if (shared_partitions_) {
    // Each partition's records are loaded when it is taken
    // (scheduler_partitions.cc).
    report->took = std::chrono::steady_clock::now() - started;
    report->notes = store_->OpenNotes();
    report->store = store_->where();
    return Status::Ok();
  }
  std::vector<std::string> names;  // By id; empty: a freed id.
  if (Status s = store_->LoadNamespaces(&names); !s.ok()) return s;
  if (names.size() > options_.limits.max_namespaces) {
    return Status::ResourceExhausted("the store holds " +
                                     std::to_string(names.size()) +
                                     " namespace ids, over --max-namespaces");
  }
  {
    WriterLock lock(&ns_mutex_);
    RestoreNamespaces(names);
  }
  const std::size_t ids = names.size();
  std::uint64_t next_version = 1;
  std::uint64_t next_event_seq = 1;
  if (Status s = store_->LoadCounters(&next_version, &next_event_seq);
      !s.ok()) {
    return s;
  }
  const WallNanos wall_now = clock_.Wall();
  const SteadyTime steady_now = clock_.Steady();
  bool bad_namespace = false;
  // Recurring schedules, armed for their next instants (first: the timers
  // and events below tell them which of their runs are open).
  std::uint64_t schedule_version = 0;
  Status s = RecoverSchedules(ids, wall_now, steady_now, &schedule_version,
                              &bad_namespace);
  if (!s.ok()) return s;
  next_version = std::max(next_version, (schedule_version >> 10) + 1);
  s = store_->ForEachTimer([&](const StoredTimer& t) {
    if (t.ns >= ids) {
      bad_namespace = true;
      return;
    }
    if (dispatchers_[t.ns]->name().empty()) {
      bad_namespace = true;
      return;
    }
    partitions_[PartitionOf(t.ns, t.key)]->Restore(t, wall_now, steady_now);
    NoteOpenRun(t.ns, t.key);
    next_version = std::max(next_version, (t.version >> 10) + 1);
    ++report->timers;
    if (t.fire_time <= wall_now) ++report->overdue;
  });
  if (!s.ok()) return s;
  // Keys' fates in dedup windows (before the overdue timers fire: those
  // replace their keys' entries).
  Status malformed;
  s = store_->ForEachDedup(
      [&](NamespaceId ns, std::string_view key, std::string_view encoded) {
        if (ns >= ids || dispatchers_[ns]->name().empty()) {
          bad_namespace = true;
          return;
        }
        Status r =
            partitions_[PartitionOf(ns, key)]->RestoreDedup(ns, key, encoded);
        if (!r.ok() && malformed.ok()) {
          malformed = Status::Internal(store_->where() + ": " + r.message());
        }
      });
  if (!s.ok()) return s;
  if (!malformed.ok()) return malformed;
  // Events that failed deliveries: their attempts, and the dead letters.
  struct Fate {
    std::uint32_t attempts;
    bool dead;
    std::string error;
    WallNanos retry_at;
  };
  std::unordered_map<std::uint64_t, Fate> fates;
  s = store_->ForEachFate([&](std::uint64_t id, const StoredFate& f) {
    fates.emplace(id,
                  Fate{f.attempts, f.dead, std::string(f.error), f.retry_at});
  });
  if (!s.ok()) return s;
  std::vector<std::vector<Event>> events(ids);
  std::vector<std::vector<RetryingEvent>> retrying(ids);
  std::vector<std::vector<DeadLetter>> dead(ids);
  s = store_->ForEachEvent([&](const StoredEvent& e) {
    if (e.ns >= ids) {
      bad_namespace = true;
      return;
    }
    if (dispatchers_[e.ns]->name().empty()) {
      bad_namespace = true;
      return;
    }
    refs_->Add(e.ns);
    Event event{e.id,      e.ns,        KeyBlob(e.key, e.payload_id),
                e.version, e.fire_time, e.fired_at,
                0,         e.reason};
    next_version = std::max(next_version, (e.version >> 10) + 1);
    next_event_seq = std::max(next_event_seq, (e.id >> 10) + 1);
    auto f = fates.find(e.id);
    if (f == fates.end()) {
      NoteOpenRun(e.ns, e.key);
      events[e.ns].push_back(std::move(event));
      ++report->events;
      return;
    }
    if (!f->second.dead) NoteOpenRun(e.ns, e.key);
    event.attempt = f->second.attempts;
    if (f->second.dead) {
      dead[e.ns].push_back({std::move(event), std::move(f->second.error)});
      return;
    }
    ++report->events;
    // A failed delivery's retry time holds across the restart.
    if (f->second.retry_at > wall_now) {
      retrying[e.ns].push_back(
          {std::move(event), f->second.retry_at, std::move(f->second.error)});
    } else {
      events[e.ns].push_back(std::move(event));
    }
  });
  if (!s.ok()) return s;
  if (bad_namespace) {
    return Status::Internal(store_->where() +
                            ": a record names an unknown namespace");
  }
  // Versions and event ids continue past anything stored or reserved,
  // whatever the number of partitions now.
  for (auto& p : partitions_) {
    if (Status s = p->RestoreCounters(next_version, next_event_seq,
                                      store_->FixedEventIdsFrom());
        !s.ok()) {
      return s;
    }
  }
  // Events not acknowledged before the stop go first, in firing order; then
  // the timers that came due while the daemon was down, fired now in
  // fire-time order across all partitions.
  std::vector<Event> overdue;
  auto fired = std::make_shared<std::atomic<std::size_t>>(0);
  for (auto& p : partitions_) {
    std::vector<Event> some = p->FireOverdue([fired](Status s) {
      if (s.ok()) fired->fetch_add(1);
    });
    overdue.insert(overdue.end(), std::make_move_iterator(some.begin()),
                   std::make_move_iterator(some.end()));
  }
  std::stable_sort(
      overdue.begin(), overdue.end(),
      [](const Event& a, const Event& b) { return a.fire_time < b.fire_time; });
  for (Event& e : overdue) events[e.ns].push_back(std::move(e));
  store_->Sync();
  if (fired->load() != partitions_.size()) {
    return Status::Internal(store_->where() +
                            ": could not record the overdue timers");
  }
  for (NamespaceId ns = 0; ns < events.size(); ++ns) {
    if (!dead[ns].empty()) {
      dispatchers_[ns]->RestoreDeadLetters(std::move(dead[ns]));
    }
    if (!retrying[ns].empty()) {
      dispatchers_[ns]->RestoreRetrying(std::move(retrying[ns]));
    }
    if (!events[ns].empty()) dispatchers_[ns]->Publish(std::move(events[ns]));
  }
  // Namespaces left with nothing in them are freed now.
  for (NamespaceId id = 0; id < ids; ++id) {
    if (!dispatchers_[id]->name().empty() && refs_->Get(id) == 0) Free(id);
  }
  report->namespaces = namespaces();
  report->took = std::chrono::steady_clock::now() - started;
  report->notes = store_->OpenNotes();
  report->store = store_->where();
  return Status::Ok();
}

}  // namespace delayd
