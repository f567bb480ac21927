// One partition of the scheduler: the timers whose (namespace, key) hash to
// it, a key index, and a timing wheel with its alarm.
//
// Locking: a partition is a plain object under its mutex, mu_. Every public
// method takes it (they may be called from any thread) and holds it only
// for work in memory: no disk or network I/O, no waiting, no callback and no
// reply runs under it. What an operation changes is queued for the store
// (store.h: Commit only queues) before mu_ is let go, so the store gets a
// partition's changes in the order they were made; answers go out after,
// from the caller (when nothing waits for the store) or from the store's
// completion executor. Fired events are handed to their dispatchers' queues
// (Publish posts to a strand: it never runs the dispatcher) once their
// firing is written. The wheel's alarm goes off on the pool, holding
// nothing, and takes mu_ to fire.
//
// Every state change of a timer goes through Apply (set, move, remove) or
// FireRecords (expiry, drain). With a store, payloads live in the store:
// a record holds the key and the payload's id (payload_ref.h).
//
// A timer's fire time is a wall-clock instant (what clients see); the wheel
// runs on steady time, so each operation maps the fire time to a steady
// deadline at the moment it is applied, and Rederive() maps them all anew
// when the clock's offset moves (clock.h). Before firing, the wall clock is
// checked too: a timer is never delivered before its fire time, even if the
// wall clock stepped back and nothing re-derived yet.
#ifndef DELAYD_SERVER_CORE_PARTITION_H_
#define DELAYD_SERVER_CORE_PARTITION_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/common/mutex.h"
#include "server/common/types.h"
#include "server/core/alarm_wheel.h"
#include "server/core/clock.h"
#include "server/core/counters.h"
#include "server/core/dedup_table.h"
#include "server/core/key_index.h"
#include "server/core/loop_executor.h"
#include "server/core/namespace_refs.h"
#include "server/core/schedule_record.h"
#include "server/core/schedule_set.h"
#include "server/store/store.h"

namespace delayd {

class Partition {
 public:
  // Hands fired events of namespace `ns` to its dispatcher (a post: it
  // never runs the dispatcher's work on the calling thread).
  using Publish = std::function<void(NamespaceId ns, std::vector<Event>)>;
  using Done = std::function<void(OpResult)>;

  // The partition whose index is the low bits of an event id or version.
  static std::uint32_t Of(std::uint64_t id) {
    return static_cast<std::uint32_t>(id & 1023);
  }

  // `index` < 1024 becomes the low bits of every version and event id: the
  // high 54 bits count per partition, so both are unique daemon-wide, and a
  // key's versions (always in the same partition) increase. `store` may be
  // null (state in memory only). A new timer counts in `refs` for its
  // namespace (and stays counted as an event once fired); a removed one
  // is released by the caller once durable (OpResult::removed). The alarm's
  // completions run on `pool`; its timer waits on `timers`
  // (loop_executor.h).
  Partition(LoopExecutor pool, asio::any_io_executor timers,
            std::uint32_t index, const Clock& clock,
            std::chrono::nanoseconds tick, SteadyTime epoch,
            const Limits& limits, Counters& counters, Store* store,
            NamespaceRefs* refs, Publish publish);

  // Applies `op` now. If nothing waits for the store (no store, or the
  // operation changed nothing), returns its result for the caller to answer
  // with. Otherwise its changes are written and nullopt returned: `durable`
  // (taken) then gets the result once they are durable, or the store's
  // error, on the store's completion executor or, if the calling thread
  // wrote them (Store::CommitDeferred), on it before Apply returns. The
  // caller holds no lock that a store completion takes.
  std::optional<OpResult> Apply(Op& op, Done& durable) EXCLUDES(mu_);
  // As Apply, for the operations `ops[i]` of `indices`, in that order, in
  // one hold of the lock and one store batch; results go to `results[i]`.
  // Returns whether `durable` (taken) runs once they are durable (with the
  // store's error, if any: the caller sets it on the results that were OK);
  // if not, the results are final.
  bool ApplyGroup(std::vector<Op>& ops,
                  const std::vector<std::uint32_t>& indices,
                  std::vector<OpResult>& results,
                  std::function<void(Status)>& durable) EXCLUDES(mu_);
  // Fires every pending timer of `ns` now (reason DRAINED), in fire-time
  // order. `done` gets how many, once that is durable, or the store's error
  // (the firing is then retried: see FireRecords).
  void Drain(NamespaceId ns, std::function<void(Status, std::uint64_t)> done)
      EXCLUDES(mu_);

  // Stops firing and applying (shutdown): timers stay pending, and
  // operations from now on get UNAVAILABLE.
  void Stop() EXCLUDES(mu_);

  // Ownership, with a store whose partitions nodes share (Store::
  // SharedPartitions). A partition not owned holds nothing, fires nothing,
  // and refuses operations (UNAVAILABLE, naming the partition): another
  // node owns it. Disown() forgets every timer and schedule at once (they
  // stay in the store, for the next owner); the owner-to-be restores them
  // (Restore, RestoreSchedule, RestoreCounters, FireOverdue) and then calls
  // Own(), which fires what is due and arms the wake-up.
  void Disown() EXCLUDES(mu_);
  void Own() EXCLUDES(mu_);
  bool owned() const EXCLUDES(mu_);
  // What a call on a partition this node does not own (or not yet) gets.
  static Status NotServed(std::uint32_t partition);

  // After the clock's offset moved (clock.h): derives every pending timer's
  // deadline anew from its fire time, then fires what is due now and
  // re-arms. Without `rederive`, only the latter (time jumped on a fake
  // clock).
  void ClockChanged(bool rederive) EXCLUDES(mu_);

  // Recovery, before anything is served (no lock is contended then), or the
  // taking of a partition not owned yet (which refuses every operation
  // meanwhile: see Own): each stored timer, then the counters (past every
  // version and event id stored in any partition), then FireOverdue(), which
  // fires those whose time passed while the daemon was down and returns their
  // events in fire-time order (unpublished); `durable` runs once that firing is
  // on disk. RestoreCounters() reserves the first ids (a synced write).
  // `fixed_event_ids_from` is the store's FixedEventIdsFrom(): versions
  // are handed out from there on.
  Status RestoreCounters(std::uint64_t next_version,
                         std::uint64_t next_event_seq,
                         std::uint64_t fixed_event_ids_from) EXCLUDES(mu_);
  void Restore(const StoredTimer& timer, WallNanos wall_now,
               SteadyTime steady_now) EXCLUDES(mu_);
  std::vector<Event> FireOverdue(std::function<void(Status)> durable)
      EXCLUDES(mu_);

  // Timers found holding the lock, their payloads read after, without it
  // (ReadPayloads, partition_read.cc).
  struct Found {
    std::vector<TimerInfo> timers;
    // With a store and payloads wanted: each timer's payload id.
    std::vector<std::uint64_t> payload_ids;
    std::vector<std::uint32_t> records;  // Each timer's record (a cursor).
    // What the store held then (with a store and payloads wanted).
    std::shared_ptr<const Store::View> view;
    std::optional<std::uint32_t> next;  // Where ReadPayloads stopped.
  };
  // The pending timer `key`, if any, added to `out`. A partition not
  // served (stopped, or not owned: being taken or another node's) answers
  // its refusal and adds nothing: its view is not the truth.
  Status Get(NamespaceId ns, std::string_view key, Found& out) const
      EXCLUDES(mu_);
  // Adds timers of `ns` whose key starts with `prefix` to `out`, scanning
  // records from `cursor`, while `out` holds fewer than `max_timers`;
  // payloads are left empty unless `payloads`. `*next` becomes the cursor
  // to continue from, or nullopt when the partition is exhausted. Refuses
  // as Get does.
  Status List(NamespaceId ns, std::string_view prefix, std::uint32_t cursor,
              std::size_t max_timers, bool payloads, Found& out,
              std::optional<std::uint32_t>* next) const EXCLUDES(mu_);
  // Why this partition serves no call now (nullopt: it does). As Refusal.
  std::optional<Status> Unserved() const EXCLUDES(mu_);
  // Fills in the payloads of `found` from the store, as its view saw them,
  // dropping timers gone since. Stops at the first timer that would take
  // the page (`bytes_before` plus ListCost of each) past `max_bytes`, unless
  // the page would be empty: `next` is then its record. False (with `error`
  // set) if a payload cannot be read: a timer is never shown without it.
  // Touches no state of the partition: reads block on the store, so call it
  // on the read pool.
  bool ReadPayloads(Found& found, Status* error,
                    std::size_t max_bytes = SIZE_MAX,
                    std::size_t bytes_before = 0) const;
  // Whether Get and List leave payloads to read (with a store).
  bool reads_payloads() const { return store_ != nullptr; }

  // --- Recurring schedules (partition_schedule.cc; schedule_record.h) ---
  // A schedule whose (namespace, key) hash to this partition wakes on the
  // partition's alarm at its next instant; each run due becomes a pending
  // timer under its run key, written with the schedule's new state.
  struct ScheduleInfo {
    NamespaceId ns = 0;
    std::string key;
    ScheduleRecord rec;
    std::optional<WallNanos> next;  // its next instant, if any
  };
  struct ScheduleResult {
    static ScheduleResult Error(Status s) {
      ScheduleResult r;
      r.status = std::move(s);
      return r;
    }
    Status status;
    ScheduleInfo info;
    bool replaced = false;
    bool removed = false;  // the caller releases its namespace once durable
  };
  using ScheduleDone = std::function<void(ScheduleResult)>;
  // Creates the schedule `key` (or replaces it: a new version, its runs
  // from now on), with `rec`'s client fields; ALREADY_EXISTS with
  // `if_absent`, ABORTED if `expected_version` (non-zero) is not its
  // version. As Apply: the result now, or nullopt and `durable` later.
  std::optional<ScheduleResult> SetSchedule(NamespaceId ns,
                                            const std::string& key,
                                            ScheduleRecord rec, bool if_absent,
                                            std::uint64_t expected_version,
                                            ScheduleDone& durable)
      EXCLUDES(mu_);
  // Removes it (its runs already pending or delivered stay); NOT_FOUND,
  // ABORTED as above.
  std::optional<ScheduleResult> RemoveSchedule(NamespaceId ns,
                                               const std::string& key,
                                               std::uint64_t expected_version,
                                               ScheduleDone& durable)
      EXCLUDES(mu_);
  // Pause: no runs until resumed (its wake-up is dropped). Resume: instants
  // missed while paused are due at once, under the catch-up policy.
  // Trigger: a run now, outside the spec (the next run number). NOT_FOUND,
  // ABORTED as above; the version stays.
  enum class ScheduleAction { kPause, kResume, kTrigger };
  std::optional<ScheduleResult> ActOnSchedule(
      NamespaceId ns, const std::string& key, ScheduleAction action,
      std::uint64_t expected_version, ScheduleDone& durable) EXCLUDES(mu_);
  // A partition not served answers its refusal (as Get).
  Status GetSchedule(NamespaceId ns, std::string_view key,
                     std::optional<ScheduleInfo>* out) const EXCLUDES(mu_);
  // Run `run_key` of a schedule here was acknowledged or dead-lettered (or,
  // with `open`, is recovered pending or unacknowledged): whether a run is
  // open is what the overlap policy asks. Closing the open run fires the
  // run its policy held back (buffer-one).
  void RunState(NamespaceId ns, std::string_view run_key, bool open)
      EXCLUDES(mu_);
  // Appends the first `limit` keys of schedules of `ns` that start with
  // `prefix` and sort after `after`, in order. Refuses as Get does.
  Status ListSchedules(NamespaceId ns, std::string_view prefix,
                       const std::string& after, std::size_t limit,
                       std::vector<std::string>* keys) const EXCLUDES(mu_);
  // Recovery, or the taking of a partition not owned yet (as Restore): a
  // stored schedule, armed for its
  // next instant (one already past is due at once: its catch-up policy
  // decides).
  // Its version goes to `*version`.
  Status RestoreSchedule(NamespaceId ns, std::string_view key,
                         std::string_view encoded, WallNanos wall_now,
                         SteadyTime steady_now, std::uint64_t* version)
      EXCLUDES(mu_);
  // Schedules restored between these two are found by key only after the
  // second, which indexes them all at once (ScheduleSet::DeferIndexing).
  void BeginScheduleRestore() EXCLUDES(mu_);
  void EndScheduleRestore() EXCLUDES(mu_);

  // --- The dedup window (partition_dedup.cc; dedup_table.h) ---
  // Each namespace's window, shared by the partitions; set once, before
  // recovery. Without it (or with a window of 0) nothing is recorded.
  void SetDedupWindows(DedupWindows* windows) EXCLUDES(mu_);
  // Whether an alarm's thread writes its firing itself (OnAlarm). Only
  // while another pool thread remains: a write the disk holds up holds that
  // thread too (one at most: a second WriteHere leaves the queue to the
  // store's writer), and what is in memory must still go out meanwhile.
  void SetWriteFiringsHere(bool on) EXCLUDES(mu_);
  // A key's fate as the store kept it (recovery, or the taking of a
  // partition); one whose window has ended is deleted by the next purge.
  // INTERNAL if `encoded` is not an entry.
  Status RestoreDedup(NamespaceId ns, std::string_view key,
                      std::string_view encoded) EXCLUDES(mu_);
  // Deletes entries whose window has ended (and those let go at the
  // bound), in memory and in the store, at most a few thousand a call (the
  // partition's mutex is held meanwhile); their namespaces are released
  // once that is durable. True if more may be waiting. Called on a timer,
  // and again at once while it answers true.
  bool PurgeDedup() EXCLUDES(mu_);
  // Events of `ns` acknowledged at `at` (each key and version): their keys'
  // windows count from then (unless a later version's fate is recorded).
  void Settled(NamespaceId ns,
               const std::vector<std::pair<std::string, std::uint64_t>>& keys,
               WallNanos at) EXCLUDES(mu_);

 private:
  // 64 bytes, with a short key and payload inline in `blob` and the
  // namespace id in its tag.
  struct Record {
    WallNanos fire_time;
    std::uint64_t version;
    wheel::TimingWheel::Handle handle;
    Blob blob;  // Empty when the record is free.
    NamespaceId ns() const { return blob.tag(); }
  };
  static_assert(sizeof(Record) == 64);

  static Status ShuttingDown() {
    return Status::Unavailable("delayd is shutting down");
  }
  // Why an operation cannot be applied now (stopped, or not owned).
  std::optional<Status> Refusal() const REQUIRES(mu_);
  static std::uint32_t Hash(NamespaceId ns, std::string_view key);
  std::uint32_t Find(NamespaceId ns, std::string_view key,
                     std::uint32_t hash) const REQUIRES(mu_);
  // The pending timer `key`, if its version is `expected_version` (0: any);
  // else kNone, with NOT_FOUND or ABORTED in `error`.
  std::uint32_t FindExpected(NamespaceId ns, const std::string& key,
                             std::uint64_t expected_version,
                             Status* error) const REQUIRES(mu_);
  wheel::TimingWheel::Time Deadline(WallNanos fire_time, WallNanos wall_now,
                                    SteadyTime steady_now) const REQUIRES(mu_);
  // Applies one operation at the given instant, adding its changes to
  // `batch` (null without a store).
  OpResult ApplyOne(Op& op, WallNanos wall_now, SteadyTime steady_now,
                    Batch* batch) REQUIRES(mu_);
  OpResult Set(SetOp& op, WallNanos wall_now, SteadyTime steady_now,
               Batch* batch) REQUIRES(mu_);
  OpResult Move(MoveOp& op, WallNanos wall_now, SteadyTime steady_now,
                Batch* batch) REQUIRES(mu_);
  OpResult Remove(RemoveOp& op, WallNanos wall_now, Batch* batch) REQUIRES(mu_);
  // Records (if its namespace has a dedup window) that `key` met `fate` at
  // `at`, in memory and in `batch` (if any).
  void NoteGone(NamespaceId ns, std::string_view key, DedupEntry::Fate fate,
                std::uint64_t version, WallNanos at, Batch* batch)
      REQUIRES(mu_);
  // ALREADY_EXISTS naming the fate of `key`, if it is in its window.
  std::optional<Status> DedupRefused(NamespaceId ns, std::string_view key,
                                     WallNanos now) const REQUIRES(mu_);
  // Stores a new payload for `rec` (version already assigned) and keeps
  // only the key and the payload's id in memory.
  void StorePayload(Record& rec, NamespaceId ns, const Blob& blob, Batch& batch)
      REQUIRES(mu_);
  // Adds record `r` to `out` (its payload too if in memory).
  void AddFound(std::uint32_t r, bool payload, Found& out) const REQUIRES(mu_);
  // List's scan, for a partition served.
  std::optional<std::uint32_t> ListLocked(NamespaceId ns,
                                          std::string_view prefix,
                                          std::uint32_t cursor,
                                          std::size_t max_timers, bool payloads,
                                          Found& out) const REQUIRES(mu_);
  std::uint32_t NewRecord() REQUIRES(mu_);
  // Removes record `r` from the index and frees it.
  void Forget(std::uint32_t r) REQUIRES(mu_);
  // The alarm armed for wheel time `at` went off (on the pool). If
  // SetWriteFiringsHere is on, its firing's write is left queued
  // (Store::WriteDeferred) and written by this thread once it lets mu_ go
  // (WriteHere): the events then leave without the store's writer being
  // woken and handing them back.
  void OnAlarm(AlarmWheel::Time at) EXCLUDES(mu_);
  // Fires what is due now, then re-arms. The runs a schedule's wake-up sets
  // due now fire in the same call, not after another alarm.
  void FireDue() REQUIRES(mu_);

  using Loaded = ScheduleSet::Loaded;
  // Sets the runs of `plan` as timers (with schedule `id`'s new state,
  // `l.rec.state`, in one batch).
  void SetRuns(std::uint32_t id, const Loaded& l, const schedule::Plan& plan,
               WallNanos wall_now, SteadyTime steady_now) REQUIRES(mu_);
  // Wheel cookies with this bit are schedules' ids; the rest are records.
  static constexpr std::uint32_t kScheduleCookie = 1u << 31;
  ScheduleInfo InfoOf(std::uint32_t id, const Loaded& l) const REQUIRES(mu_);
  ScheduleInfo InfoOf(std::uint32_t id) const REQUIRES(mu_) {
    return InfoOf(id, schedules_.Load(id));
  }
  // Queues `batch` (a schedule's change) for the store; `durable` gets
  // `result` once it is durable, or the store's error. Returns nullopt.
  std::optional<ScheduleResult> CommitSchedule(Batch& batch,
                                               ScheduleResult result,
                                               ScheduleDone& durable)
      REQUIRES(mu_);
  // Arms schedule `id`'s wake-up for its next instant (at once if that
  // passed); with `alarm`, the alarm too (recovery leaves that to
  // FireOverdue).
  void ArmSchedule(std::uint32_t id, const schedule::Spec& spec,
                   const schedule::Policies& policies,
                   const schedule::State& state, WallNanos wall_now,
                   SteadyTime steady_now, bool alarm = true) REQUIRES(mu_);
  void ArmSchedule(std::uint32_t id, const Loaded& l, WallNanos wall_now,
                   SteadyTime steady_now) REQUIRES(mu_) {
    ArmSchedule(id, l.spec(), l.policies, l.rec.state, wall_now, steady_now);
  }
  // Schedule `id`'s wake-up went off: fires its due runs.
  void WakeSchedule(std::uint32_t id) REQUIRES(mu_);
  // Adds `rec` as schedule `key`, armed; its id in `*id`. An error (nothing
  // added) if its spec does not parse.
  Status AddSchedule(NamespaceId ns, std::string_view key,
                     const ScheduleRecord& rec, WallNanos wall_now,
                     SteadyTime steady_now, std::uint32_t* id,
                     bool alarm = true) REQUIRES(mu_);
  // Fires `due` (schedules' wake-ups set their runs); whether any schedule
  // woke.
  bool OnExpired(const std::vector<AlarmWheel::Expired>& due) REQUIRES(mu_);
  // Turns records into events, removing them and recording that in `batch`
  // (if any). An event's id is its timer's version if FixedId(version),
  // else the partition's next event sequence number (reserved by the
  // caller: ReserveIds).
  std::vector<Event> TakeEvents(const std::vector<std::uint32_t>& records,
                                Reason reason, Batch* batch) REQUIRES(mu_);
  // Turns records into events (removing them) and publishes them: timers
  // set or moved durably whose ids are fixed, once the firing is queued
  // (fired again after a crash, each comes with the same id); other
  // durably set ones once it is written; the rest once it is durable (see
  // durable_versions_). `done` (if any) gets the outcome once durable
  // (on the store's completion executor; without a store, or if nothing
  // could be queued, the outcome is returned instead and `done` not run).
  // If ids cannot be had yet (ReserveIds), nothing changes and the records
  // are tried again after kRetryIds (never before their fire time).
  std::optional<Status> FireRecords(const std::vector<std::uint32_t>& records,
                                    Reason reason,
                                    std::function<void(Status)> done)
      REQUIRES(mu_);
  static constexpr std::chrono::milliseconds kRetryIds{10};

  // Whether `versions` versions and `events` event ids can be handed out
  // under limits that are durable, so that none repeats after any crash.
  // A new block is reserved (a synced store write) once half the current
  // one is used, so it is durable before it is needed; until then a
  // request beyond the current block gets UNAVAILABLE (or
  // RESOURCE_EXHAUSTED once 2^54 ran out). Never waits.
  Status ReserveIds(std::uint64_t versions, std::uint64_t events) REQUIRES(mu_);
  void ReserveAhead(std::uint64_t versions, std::uint64_t events) REQUIRES(mu_);
  std::uint64_t NewVersion() REQUIRES(mu_) {
    return (next_version_++ << 10) | partition_;
  }
  // Whether a timer of `version` fires with the version as its event id
  // (Store::FixedEventIdsFrom).
  bool FixedId(std::uint64_t version) const REQUIRES(mu_) {
    return (version >> 10) >= fixed_ids_from_;
  }
  // How many of `records` fire with ids from the counter (!FixedId).
  std::uint64_t CountedIds(const std::vector<std::uint32_t>& records) const
      REQUIRES(mu_);
  // Every version below sequence number `upto` is durable (the batches that
  // gave them out were acknowledged by the store).
  void NoteDurable(std::uint64_t upto) {
    std::uint64_t seen = durable_versions_.load(std::memory_order_relaxed);
    while (seen < upto && !durable_versions_.compare_exchange_weak(
                              seen, upto, std::memory_order_release)) {
    }
  }
  static constexpr std::uint64_t kIdBlock = 1 << 20;

  const std::uint32_t partition_;
  const Clock& clock_;
  const Limits& limits_;
  Counters& counters_;
  Store* const store_;
  NamespaceRefs* const refs_;
  const Publish publish_;
  const LoopExecutor pool_;

  mutable Mutex mu_;
  bool write_firings_here_ GUARDED_BY(mu_) = false;
  // Set while OnAlarm fires with write_firings_here_: FireRecords then
  // defers its write; and what it deferred (for OnAlarm's WriteHere): a
  // write, or one whose events it published before it (ordered after).
  bool defer_writes_ GUARDED_BY(mu_) = false;
  enum class Deferred { kNothing, kWrite, kWriteAfterPublish };
  Deferred deferred_ GUARDED_BY(mu_) = Deferred::kNothing;
  // A deque: growing never copies records or leaves a freed array behind.
  std::deque<Record> records_ GUARDED_BY(mu_);
  std::vector<std::uint32_t> free_records_ GUARDED_BY(mu_);
  KeyIndex keys_ GUARDED_BY(mu_);
  AlarmWheel wheel_ GUARDED_BY(mu_);
  // Sequence numbers (the high bits of versions and event ids): the next to
  // use, and the limits durable in the store (ReserveIds).
  std::uint64_t next_version_ GUARDED_BY(mu_) = 1;
  std::uint64_t next_event_seq_ GUARDED_BY(mu_) = 1;
  // The store's FixedEventIdsFrom(), from RestoreCounters on.
  std::uint64_t fixed_ids_from_ GUARDED_BY(mu_);
  // The sequence numbers below which versions are durable (NoteDurable;
  // those restored from the store are). A timer fired at such a version
  // was set or moved durably, so its event may leave once its firing is
  // written; one set more recently leaves once its firing (and so, the
  // store keeping a partition's batches in order, its set) is durable: no
  // event of a write a crash can undo ever leaves the daemon.
  std::atomic<std::uint64_t> durable_versions_{0};
  std::uint64_t version_limit_ GUARDED_BY(mu_) = 0;
  std::uint64_t event_seq_limit_ GUARDED_BY(mu_) = 0;
  bool reserving_ GUARDED_BY(mu_) = false;  // A block is being written.
  bool stopped_ GUARDED_BY(mu_) = false;
  bool owned_ GUARDED_BY(mu_) = true;
  std::vector<std::uint32_t> overdue_ GUARDED_BY(mu_);    // During recovery.
  std::vector<AlarmWheel::Expired> due_ GUARDED_BY(mu_);  // Reused.
  ScheduleSet schedules_ GUARDED_BY(mu_);
  DedupWindows* dedup_windows_ GUARDED_BY(mu_) = nullptr;
  DedupTable dedup_ GUARDED_BY(mu_);
  // Let go at the bound: deleted from the store by the next purge.
  std::vector<std::pair<NamespaceId, std::string>> dedup_evicted_
      GUARDED_BY(mu_);
  // Whether dedup_ or dedup_evicted_ holds anything (read without mu_ by
  // a purge that finds nothing to do).
  std::atomic<bool> dedup_held_{false};
  // Scratch of restoring and arming schedules (their buffers used again).
  ScheduleRecord decoded_ GUARDED_BY(mu_);
  Loaded loaded_ GUARDED_BY(mu_);
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_PARTITION_H_
