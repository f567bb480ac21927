// Recurring schedules in a partition: set, remove, read, restore, and the
// wake-ups that turn their due instants into runs (schedule_record.h).
#include <spdlog/spdlog.h>

#include "server/common/limit_log.h"
#include "server/core/partition.h"

namespace delayd {
namespace {

// ABORTED unless `expected` is 0 or schedule `key`'s version.
Status CheckVersion(const std::string& key, std::uint64_t version,
                    std::uint64_t expected) {
  if (expected == 0 || expected == version) return Status::Ok();
  return Status::Aborted("schedule '" + key + "' has version " +
                         std::to_string(version) + ", not " +
                         std::to_string(expected));
}

}  // namespace

std::optional<Partition::ScheduleResult> Partition::CommitSchedule(
    Batch& batch, ScheduleResult result, ScheduleDone& durable) {
  batch.Touch(partition_);
  store_->Commit(batch,
                 [result, durable = std::move(durable)](Status s) mutable {
                   if (!s.ok()) result.status = std::move(s);
                   durable(std::move(result));
                 });
  return std::nullopt;
}

Partition::ScheduleInfo Partition::InfoOf(std::uint32_t id,
                                          const Loaded& l) const {
  return ScheduleInfo{schedules_.slot(id).ns, std::string(schedules_.key(id)),
                      l.rec,
                      schedule::NextInstant(l.spec(), l.policies, l.rec.state,
                                            l.rec.state.last_instant)};
}

void Partition::ArmSchedule(std::uint32_t id, const schedule::Spec& spec,
                            const schedule::Policies& policies,
                            const schedule::State& state, WallNanos wall_now,
                            SteadyTime steady_now, bool alarm) {
  ScheduleSet::Slot& e = schedules_.slot(id);
  if (e.handle != wheel::TimingWheel::kNoHandle) {
    wheel_.wheel().Cancel(e.handle);
    e.handle = wheel::TimingWheel::kNoHandle;
  }
  // The next instant after the last one acted on: one that passed while
  // the daemon was down is due at once.
  const std::optional<WallNanos> wake = schedule::NextInstant(
      spec, policies, state, state.last_instant, schedules_.memo(id));
  e.wake = wake.value_or(ScheduleSet::kNoWake);
  if (!wake) return;
  e.handle = wheel_.wheel().Schedule(Deadline(*wake, wall_now, steady_now),
                                     kScheduleCookie | id);
  if (alarm) wheel_.Scheduled(e.handle);
}

Status Partition::AddSchedule(NamespaceId ns, std::string_view key,
                              const ScheduleRecord& rec, WallNanos wall_now,
                              SteadyTime steady_now, std::uint32_t* id,
                              bool alarm) {
  if (Status s = schedules_.Add(ns, key, rec, id); !s.ok()) return s;
  // Armed from `rec` as given: loading it back from the set would copy it.
  const schedule::Spec* spec = schedules_.cron(*id);
  if (spec == nullptr) {
    IntervalOf(rec, &loaded_.every);
    spec = &loaded_.every;
  }
  ArmSchedule(*id, *spec, PoliciesOf(rec), rec.state, wall_now, steady_now,
              alarm);
  return Status::Ok();
}

std::optional<Partition::ScheduleResult> Partition::SetSchedule(
    NamespaceId ns, const std::string& key, ScheduleRecord rec, bool if_absent,
    std::uint64_t expected_version, ScheduleDone& durable) {
  Batch batch;
  MutexLock lock(&mu_);
  ScheduleResult result;
  if (auto refused = Refusal()) return ScheduleResult::Error(*refused);
  const std::uint32_t found = schedules_.Find(ns, key);
  const bool exists = found != ScheduleSet::kNone;
  if (exists && if_absent) {
    result.status =
        Status::AlreadyExists("schedule '" + key + "' already exists");
    return result;
  }
  if (expected_version != 0) {
    if (!exists) {
      result.status = Status::NotFound("no schedule '" + key + "'");
      return result;
    }
    result.status =
        CheckVersion(key, schedules_.slot(found).version, expected_version);
    if (!result.status.ok()) return result;
  }
  if (result.status = ReserveIds(1, 0); !result.status.ok()) return result;
  const WallNanos wall_now = clock_.Wall();
  const SteadyTime steady_now = clock_.Steady();
  rec.version = NewVersion();
  rec.created_at = wall_now;
  // Instants after the set only (a replaced schedule's runs continue their
  // numbers, under the new version's run keys).
  rec.state = schedule::State{};
  rec.state.last_instant = wall_now;
  std::uint64_t open_run = 0;
  if (exists) {
    const ScheduleSet::Slot& old = schedules_.slot(found);
    rec.state.runs = old.runs;
    open_run = old.open_run;  // (its overlap policy still waits for it)
    wheel_.wheel().Cancel(old.handle);
    schedules_.Remove(found);
    result.replaced = true;
  } else {
    std::atomic<std::uint64_t>& count = counters_.of(ns).schedules;
    if (count.fetch_add(1, std::memory_order_relaxed) >=
        limits_.max_schedules) {
      count.fetch_sub(1, std::memory_order_relaxed);
      result.status = Status::ResourceExhausted(
          "schedule limit of " + std::to_string(limits_.max_schedules) +
          " per namespace reached (--max-schedules)");
      return result;
    }
    refs_->Add(ns);  // (The caller's pin keeps it above zero.)
  }
  std::uint32_t id = 0;
  if (Status s = AddSchedule(ns, key, rec, wall_now, steady_now, &id);
      !s.ok()) {
    // (Validated before: only a zone gone from the tz database since.)
    if (!exists) {
      refs_->Release(ns);
      counters_.of(ns).schedules.fetch_sub(1, std::memory_order_relaxed);
    }
    result.status = s;
    return result;
  }
  schedules_.slot(id).open_run = open_run;
  result.info = InfoOf(id);
  if (store_ == nullptr) return result;
  batch.PutSchedule(ns, key, EncodeSchedule(rec));
  return CommitSchedule(batch, std::move(result), durable);
}

std::optional<Partition::ScheduleResult> Partition::RemoveSchedule(
    NamespaceId ns, const std::string& key, std::uint64_t expected_version,
    ScheduleDone& durable) {
  Batch batch;
  MutexLock lock(&mu_);
  ScheduleResult result;
  if (auto refused = Refusal()) return ScheduleResult::Error(*refused);
  const std::uint32_t found = schedules_.Find(ns, key);
  if (found == ScheduleSet::kNone) {
    result.status = Status::NotFound("no schedule '" + key + "'");
    return result;
  }
  result.status =
      CheckVersion(key, schedules_.slot(found).version, expected_version);
  if (!result.status.ok()) return result;
  result.info = InfoOf(found);
  result.removed = true;
  counters_.of(ns).schedules.fetch_sub(1, std::memory_order_relaxed);
  wheel_.wheel().Cancel(schedules_.slot(found).handle);
  schedules_.Remove(found);
  if (store_ == nullptr) return result;
  batch.PutSchedule(ns, key, "");
  return CommitSchedule(batch, std::move(result), durable);
}

std::optional<Partition::ScheduleResult> Partition::ActOnSchedule(
    NamespaceId ns, const std::string& key, ScheduleAction action,
    std::uint64_t expected_version, ScheduleDone& durable) {
  Batch batch;
  Batch* const into = store_ != nullptr ? &batch : nullptr;
  MutexLock lock(&mu_);
  ScheduleResult result;
  if (auto refused = Refusal()) return ScheduleResult::Error(*refused);
  const std::uint32_t id = schedules_.Find(ns, key);
  if (id == ScheduleSet::kNone) {
    result.status = Status::NotFound("no schedule '" + key + "'");
    return result;
  }
  result.status =
      CheckVersion(key, schedules_.slot(id).version, expected_version);
  if (!result.status.ok()) return result;
  const WallNanos wall_now = clock_.Wall();
  const SteadyTime steady_now = clock_.Steady();
  Loaded l = schedules_.Load(id);
  switch (action) {
    case ScheduleAction::kPause:
      l.rec.state.paused = true;
      break;
    case ScheduleAction::kResume:
      l.rec.state.paused = false;
      break;
    case ScheduleAction::kTrigger: {
      if (result.status = ReserveIds(1, 0); !result.status.ok()) return result;
      schedule::State next = l.rec.state;
      const schedule::Run run = schedule::Trigger(&next, wall_now);
      SetOp op{ns, Blob(RunKey(key, l.rec.version, run.number), l.rec.payload),
               run.fire_at};
      if (result.status = Set(op, wall_now, steady_now, into).status;
          !result.status.ok()) {
        return result;
      }
      l.rec.state = next;
      schedules_.slot(id).open_run = run.number;
      counters_.of(ns).runs.fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  schedules_.SetState(id, l.rec.state);
  ArmSchedule(id, l, wall_now, steady_now);
  result.info = InfoOf(id, l);
  if (into == nullptr) return result;
  batch.PutSchedule(ns, key, EncodeSchedule(l.rec));
  return CommitSchedule(batch, std::move(result), durable);
}

Status Partition::GetSchedule(NamespaceId ns, std::string_view key,
                              std::optional<ScheduleInfo>* out) const {
  MutexLock lock(&mu_);
  if (auto refused = Refusal()) return std::move(*refused);
  const std::uint32_t found = schedules_.Find(ns, key);
  if (found != ScheduleSet::kNone) *out = InfoOf(found);
  return Status::Ok();
}

Status Partition::ListSchedules(NamespaceId ns, std::string_view prefix,
                                const std::string& after, std::size_t limit,
                                std::vector<std::string>* keys) const {
  MutexLock lock(&mu_);
  if (auto refused = Refusal()) return std::move(*refused);
  schedules_.List(ns, prefix, after, limit, keys);
  return Status::Ok();
}

Status Partition::RestoreSchedule(NamespaceId ns, std::string_view key,
                                  std::string_view encoded, WallNanos wall_now,
                                  SteadyTime steady_now,
                                  std::uint64_t* version) {
  MutexLock lock(&mu_);
  ScheduleRecord& rec = decoded_;
  if (!DecodeSchedule(encoded, &rec)) {
    return Status::Internal("the schedule '" + std::string(key) +
                            "' is stored malformed");
  }
  *version = rec.version;
  std::uint32_t id = 0;
  if (Status s = AddSchedule(ns, key, rec, wall_now, steady_now, &id,
                             /*alarm=*/false);
      !s.ok()) {
    return Status::Internal("the schedule '" + std::string(key) +
                            "' no longer parses: " + s.message());
  }
  refs_->Add(ns);
  counters_.of(ns).schedules.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

void Partition::BeginScheduleRestore() {
  MutexLock lock(&mu_);
  schedules_.DeferIndexing();
}

void Partition::EndScheduleRestore() {
  MutexLock lock(&mu_);
  schedules_.IndexDeferred();
}

void Partition::WakeSchedule(std::uint32_t id) {
  if (!schedules_.live(id)) return;  // removed since
  ScheduleSet::Slot& e = schedules_.slot(id);
  e.handle = wheel::TimingWheel::kNoHandle;
  const WallNanos wall_now = clock_.Wall();
  const SteadyTime steady_now = clock_.Steady();
  Loaded l = schedules_.Load(id);
  schedule::State next = l.rec.state;
  // A run held back (buffer-one) goes first once the open one closed; then
  // the instants due now, which it overlaps.
  schedule::Plan plan;
  if (next.buffered && e.open_run == 0) {
    plan = schedule::PlanClosed(l.spec(), l.policies, &next, wall_now);
  }
  const schedule::Plan due =
      schedule::PlanDue(l.spec(), l.policies, &next, wall_now,
                        e.open_run != 0 || !plan.fire.empty());
  plan.fire.insert(plan.fire.end(), due.fire.begin(), due.fire.end());
  plan.dropped_missed += due.dropped_missed;
  plan.dropped_overlap += due.dropped_overlap;
  plan.caught_up += due.caught_up;
  // Versions for the runs' timers: if none can be had yet, nothing changed,
  // and the wake-up comes again after kRetryIds.
  if (!plan.fire.empty()) {
    if (Status s = ReserveIds(plan.fire.size(), 0); !s.ok()) {
      e.handle = wheel_.wheel().Schedule(wheel_.ToWheel(steady_now + kRetryIds),
                                         kScheduleCookie | id);
      wheel_.Scheduled(e.handle);
      return;
    }
  }
  NamespaceCounters& c = counters_.of(e.ns);
  c.runs_caught_up.fetch_add(plan.caught_up, std::memory_order_relaxed);
  c.runs_dropped.fetch_add(plan.dropped_missed, std::memory_order_relaxed);
  c.runs_skipped.fetch_add(plan.dropped_overlap, std::memory_order_relaxed);
  l.rec.state = next;
  schedules_.SetState(id, next);
  SetRuns(id, l, plan, wall_now, steady_now);
  ArmSchedule(id, l, wall_now, steady_now);
}

void Partition::SetRuns(std::uint32_t id, const Loaded& l,
                        const schedule::Plan& plan, WallNanos wall_now,
                        SteadyTime steady_now) {
  const NamespaceId ns = schedules_.slot(id).ns;
  const std::string_view key = schedules_.key(id);
  NamespaceCounters& c = counters_.of(ns);
  Batch batch;
  Batch* const into = store_ != nullptr ? &batch : nullptr;
  for (const schedule::Run& run : plan.fire) {
    SetOp op{ns, Blob(RunKey(key, l.rec.version, run.number), l.rec.payload),
             run.fire_at};
    const OpResult r = Set(op, wall_now, steady_now, into);
    if (r.status.ok()) {
      c.runs.fetch_add(1, std::memory_order_relaxed);
      schedules_.slot(id).open_run = run.number;
    } else {
      c.runs_dropped.fetch_add(1, std::memory_order_relaxed);
      LogLimitHit("schedule-run-dropped",
                  "schedule '" + std::string(key) + "': run " +
                      std::to_string(run.number) +
                      " dropped: " + r.status.message());
    }
  }
  if (into != nullptr) {
    batch.PutSchedule(ns, key, EncodeSchedule(l.rec));
    batch.Touch(partition_);
    store_->Commit(batch, nullptr);
  }
}

void Partition::RunState(NamespaceId ns, std::string_view run_key, bool open) {
  std::string_view key;
  std::uint64_t run = 0;
  if (!SplitRunKey(run_key, &key, &run)) return;
  MutexLock lock(&mu_);
  const std::uint32_t id = schedules_.Find(ns, key);
  if (id == ScheduleSet::kNone) return;  // deleted since
  ScheduleSet::Slot& e = schedules_.slot(id);
  if (open) {
    e.open_run = std::max(e.open_run, run);
    return;
  }
  if (run != e.open_run) return;  // an earlier run
  e.open_run = 0;
  if (schedules_.holds_run(id) && !stopped_) {
    // The held run goes now: a wake-up at once.
    if (e.handle != wheel::TimingWheel::kNoHandle) {
      wheel_.wheel().Cancel(e.handle);
    }
    e.handle = wheel_.wheel().Schedule(wheel_.ToWheel(clock_.Steady()),
                                       kScheduleCookie | id);
    wheel_.Scheduled(e.handle);
  }
}

}  // namespace delayd
