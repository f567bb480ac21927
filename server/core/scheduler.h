// The scheduler: P partitions (timers, by hash of namespace and key) and one
// dispatcher per namespace (delivery), over a store (store.h) or none.
//
// Threads and ownership, one rule per owner:
//   - a partition is a plain object under its own mutex (partition.h): any
//     thread applies an operation by taking it, for work in memory only;
//   - a dispatcher is confined to its strand on the pool (dispatcher.h);
//   - the store is one writer queue (store.h); its completions (answers of
//     writes, the publishing of fired events once written) run one group
//     at a time, in the order the store finished them: on the store's own
//     thread that finished it (store.h, SetInlineCompletions), or on one
//     strand of the pool, replies_;
//   - the namespace table is under ns_mutex_, the policies under it too
//     (written one SetPolicy at a time, policy_mutex_);
//   - with shared partitions, the leases held are under held_mu_, taken
//     before a partition's mutex (scheduler_partitions.cc);
//   - the periodic work (the clock poll, the dedup purge, the clock's
//     steps) is confined to the clock thread, clock_io_'s one
//     (housekeeping()); the offset it compares is under clock_mu_.
// Nothing holds a lock across I/O, a wait, a callback or a reply. Calls
// that only change memory answer on the caller's thread once the lock is
// let go; calls that wait for the store answer from its completions; reads
// of payloads (which may block on a disk) run on a read pool of their own
// (partition and dispatcher reads alike), so a stalled store stops only
// what waits for it: delivery and acks of events in memory go on, and new
// changes are refused (UNAVAILABLE) once the store's backlog passes its
// bound (Admit).
//
// `done` callbacks of the public methods run on the calling thread (an
// answer known at once), on the store's thread or completion strand, or on
// the read pool; none is run while a lock of the scheduler's is held.
//
// Thread safety: every public method may be called from any thread.
#ifndef DELAYD_SERVER_CORE_SCHEDULER_H_
#define DELAYD_SERVER_CORE_SCHEDULER_H_

#include <asio.hpp>
#include <atomic>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/common/keyed_hash.h"
#include "server/common/mutex.h"
#include "server/common/types.h"
#include "server/core/clock.h"
#include "server/core/dispatcher.h"
#include "server/core/namespace_refs.h"
#include "server/core/partition.h"
#include "server/store/store.h"

namespace delayd {

class Scheduler {
 public:
  struct Options {
    std::uint32_t partitions = 2;  // 1..1024
    std::uint32_t threads = 2;
    // Set: no pool; the caller runs io() on one thread of its own (a loop,
    // loop_executor.h), which SetLoopWake tells it how to wake, and the
    // scheduler's timers wait on a timer thread. `threads` then sizes the
    // pool of store reads only.
    bool loop = false;
    std::chrono::nanoseconds tick = std::chrono::microseconds(1);
    Limits limits;
    // Opens the durable store; none keeps all state in memory only.
    StoreOpener store;
    // Told of every failed store read or write, and once of a write the
    // store cannot go on from (see StoreHooks).
    std::function<void(const Status&)> on_store_error;
    std::function<void(const Status&)> on_store_write_failure;
    // The clock (clock.h); null: the system's. Not owned; outlives the
    // scheduler.
    Clock* clock = nullptr;
    // How often the clock's offset is checked; 0: never (a fake clock
    // tells of its changes). With the system's clock a net: the kernel
    // reports steps and resumes (WatchClockSteps) and a slew moves both
    // clocks alike; without that report, at least once a second. Also the
    // pace of the dedup windows' purge.
    std::chrono::milliseconds clock_poll{1000};
  };
  // What Start() found in the store.
  struct RecoveryReport {
    std::uint64_t namespaces = 0;
    std::uint64_t timers = 0;
    std::uint64_t overdue = 0;  // Came due while the daemon was down.
    std::uint64_t events = 0;   // Fired, not acknowledged.
    std::chrono::nanoseconds took{0};
    std::vector<std::string> notes;  // See Store::OpenNotes().
    std::string store;               // See Store::where().
  };
  struct ListCursor {
    std::uint32_t partition = 0;
    std::uint32_t record = 0;
  };
  // What one page of List may hold.
  struct ListLimits {
    std::size_t timers = 100;
    // Keys and payloads (plus a fixed cost per timer); a page always holds
    // at least one timer.
    std::size_t bytes = 3 << 20;
    bool payloads = true;
    // The page ends before this partition (a cluster node lists the
    // partitions it owns; the next page starts there).
    std::uint32_t until = std::numeric_limits<std::uint32_t>::max();
  };

  explicit Scheduler(Options options);
  ~Scheduler();  // Stops the threads.
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Opens the store (if any), recovers its state, and starts the thread
  // pool. Fails, starting nothing, if the store cannot be opened or read.
  Status Start(RecoveryReport* report = nullptr);

  // A pin on namespace `name` (its id in pin->id()), created on first use
  // (by a write). RESOURCE_EXHAUSTED beyond the namespace limit. A
  // namespace with no pins, timers, events or subscribers is freed (see
  // namespace_refs.h).
  Status Intern(std::string_view name, NamespacePin* pin) EXCLUDES(ns_mutex_);
  // A pin on namespace `name` if it exists. Reads and refused calls use
  // this: they never create a namespace.
  std::optional<NamespacePin> Find(std::string_view name) EXCLUDES(ns_mutex_);
  // Namespaces in use (not freed).
  std::size_t namespaces() EXCLUDES(ns_mutex_);
  // Calls `visit` with each namespace in use and its figures, holding the
  // namespace table (shared): namespaces are neither created nor freed
  // meanwhile. With `waiting`, also each namespace that does not exist yet
  // but has subscribers waiting for it (figures: those subscribers only).
  void ForEachNamespace(
      const std::function<void(const std::string&, const NamespaceCounters&)>&
          visit,
      bool waiting = false) EXCLUDES(ns_mutex_);
  // Calls `visit` with the figures of namespace `name`: in use, or waited
  // for by subscribers. False (and no call) if it is neither.
  bool FiguresOf(std::string_view name,
                 const std::function<void(const NamespaceCounters&)>& visit)
      EXCLUDES(ns_mutex_);

  // Namespace policies (scheduler_policy.cc), by name, whether or not the
  // namespace is in use. SetPolicy makes the next policy from the one in
  // force (the last one set, stored or not yet) with `change`, which may
  // refuse; stores it (durably, with a store), then applies it to the
  // namespace if in use. `done` gets the outcome and the policy set (on the
  // store's completion strand, or at once without a store).
  // RESOURCE_EXHAUSTED beyond --max-namespaces policies. One SetPolicy at
  // a time runs `change`, so changes of different fields never undo each
  // other on this node.
  using PolicyChange = std::function<Status(const Policy& current, Policy*)>;
  void SetPolicy(std::string_view name, const PolicyChange& change,
                 std::function<void(Status, const Policy&)> done)
      EXCLUDES(policy_mutex_, ns_mutex_);
  Policy PolicyOf(std::string_view name) EXCLUDES(ns_mutex_);
  // Reads the policies from the store again and applies those that changed
  // (another node of a cluster set them), on the read pool; `done` (may be
  // null) gets the outcome there.
  void ReloadPolicies(std::function<void(Status)> done)
      EXCLUDES(policy_mutex_, ns_mutex_);

  // Told the name of each namespace whose policy changed on this node (set
  // here, or read from the store by ReloadPolicies), in the order they
  // apply, on the thread that applies them (holding the policy lock: it
  // must not call back into the scheduler there). Set once; null: none.
  void SetPolicyObserver(std::function<void(const std::string&)> f)
      EXCLUDES(policy_mutex_);
  // The namespaces with a policy other than the default.
  std::vector<std::string> PolicyNames() EXCLUDES(ns_mutex_);

  // Registers a subscriber of namespace `name`, which need not exist yet:
  // then it waits outside the namespace table (it does not count against
  // the namespace limit) and moves to the namespace when a write creates
  // it. `done` runs once it is registered, before anything is delivered.
  void Subscribe(std::string_view name, std::uint64_t id,
                 std::shared_ptr<Subscriber> subscriber,
                 SubscribeOptions options, std::function<void()> done)
      EXCLUDES(ns_mutex_);
  // Forgets a subscriber (its stream ended).
  void Unsubscribe(std::string_view name, std::uint64_t id) EXCLUDES(ns_mutex_);
  // The dispatcher of a namespace the caller has pinned.
  Dispatcher& dispatcher(NamespaceId id) { return *dispatchers_[id]; }

  // Applies one operation; `done` gets its result (see the file comment).
  void Submit(Op op, std::function<void(OpResult)> done);
  // Applies operations with one result each, in order per key; `done` runs
  // once, with all of them.
  void SubmitBatch(std::vector<Op> ops,
                   std::function<void(std::vector<OpResult>)> done);
  // Fires every pending timer of `ns` (reason DRAINED); `done` gets the
  // count.
  void Drain(NamespaceId ns, std::function<void(Status, std::uint64_t)> done);
  // The pending timer `key` of `ns`; NOT_FOUND if there is none, and
  // UNAVAILABLE if its partition is not served here now.
  void Get(NamespaceId ns, std::string key,
           std::function<void(Status, std::optional<TimerInfo>)> done);
  // What a call on `key` of a namespace this node does not know gets
  // instead of NOT_FOUND: UNAVAILABLE while shutting down or while the
  // key's partition is not served here (a cluster node taking it, or one
  // it does not own: it holds no view of it). OK: NOT_FOUND is the truth.
  Status Unserved(std::string_view ns_name, std::string_view key) const;
  // As Unserved, for calls on events `ids` (their partitions are their
  // low bits): OK if this node serves every one of them.
  Status UnservedEvents(std::span<const std::uint64_t> ids) const;
  // A call on a whole namespace (lists, Drain, Stats): UNAVAILABLE while a
  // partition this node holds is still loading (its part of the answer is
  // not known yet).
  Status Loading() const EXCLUDES(held_mu_);
  // UNAVAILABLE if a partition in [from, until) is not served here now.
  Status Served(std::uint32_t from, std::uint32_t until) const;
  // One page of timers of `ns` with keys starting with `prefix`, from
  // `from`, within `limit`; the cursor for the next page if there may be
  // one.
  void List(NamespaceId ns, std::string prefix, ListLimits limit,
            ListCursor from,
            std::function<void(Status, std::vector<TimerInfo>,
                               std::optional<ListCursor>)>
                done);

  // Recurring schedules (scheduler_schedule.cc), each in the partition its
  // namespace and key hash to. Set and Remove answer once durable, as
  // Submit does; Remove releases the namespace then.
  void SetSchedule(NamespaceId ns, std::string key, ScheduleRecord rec,
                   bool if_absent, std::uint64_t expected_version,
                   Partition::ScheduleDone done);
  void RemoveSchedule(NamespaceId ns, std::string key,
                      std::uint64_t expected_version,
                      Partition::ScheduleDone done);
  void ActOnSchedule(NamespaceId ns, std::string key,
                     Partition::ScheduleAction action,
                     std::uint64_t expected_version,
                     Partition::ScheduleDone done);
  // Schedule `key` of `ns` into `out`, if any; refuses (UNAVAILABLE) if
  // its partition is not served here now.
  Status GetSchedule(NamespaceId ns, std::string_view key,
                     std::optional<Partition::ScheduleInfo>* out);
  // The first `limit` keys of schedules of `ns` that start with `prefix`
  // and sort after `after`, in order, into `keys`; refuses (UNAVAILABLE)
  // if a partition this node holds is not loaded yet.
  Status ListSchedules(NamespaceId ns, std::string_view prefix,
                       const std::string& after, std::size_t limit,
                       std::vector<std::string>* keys) EXCLUDES(held_mu_);

  // Partitions shared with other nodes (scheduler_partitions.cc; see
  // Store::SharedPartitions): a node owns only those it holds a lease on,
  // and starts owning none. TakePartition makes partition `part` this
  // node's under its lease's `epoch` (the store fences writes by it), loads
  // its records on the read pool (blocking reads), fires its overdue
  // timers, and hands its events to the dispatchers; `done` gets the
  // outcome there (an error leaves it not owned). DropPartition stops
  // acting for `part` at once (its lease is lost or given back): its
  // timers, schedules and events are forgotten (the store keeps them for
  // the next owner) and its writes refused; `done` runs once every
  // dispatcher has let go. Called one at a time (the lease keeper tells
  // its changes in order).
  void TakePartition(std::uint32_t part, std::int64_t epoch,
                     std::function<void(Status)> done) EXCLUDES(held_mu_);
  void DropPartition(std::uint32_t part, std::function<void()> done)
      EXCLUDES(held_mu_, ns_mutex_);
  // The partitions held now, with their epochs.
  Store::Held held() const EXCLUDES(held_mu_);

  std::uint64_t NewSubscriberId() { return next_subscriber_id_.fetch_add(1); }
  Clock& clock() const { return clock_; }
  // Acts on a change of the clock other than time passing
  // (scheduler_clock.cc): if its offset moved by kClockSlack or more, every
  // partition re-derives its deadlines; then every partition and dispatcher
  // fires what is due now. `done` (if any) runs once all of that has run.
  void ClockChanged(std::function<void()> done) EXCLUDES(clock_mu_);
  static constexpr std::chrono::milliseconds kClockSlack{1};
  Counters& counters() { return counters_; }
  const DedupWindows& dedup_windows() const { return dedup_windows_; }
  Metrics& metrics() { return metrics_; }
  // The pool's io_context (run by the caller under Options::loop).
  asio::io_context& io() { return io_; }
  // Posts to io() (waking the loop under Options::loop).
  LoopExecutor executor() { return LoopExecutor(io_.get_executor(), &wake_); }
  // Where timers of io()'s work wait: io() itself, or under Options::loop
  // the timer thread (a completion then goes to the timer's handler's
  // executor, else runs on that thread).
  asio::any_io_executor timers() {
    return options_.loop ? asio::any_io_executor(timer_io_.get_executor())
                         : asio::any_io_executor(executor());
  }
  // Whether firings and acks are written by the thread that makes them
  // (SetWriteFiringsHere): on a loop (whose relief thread takes over while
  // a write the disk holds up holds it: loop_server.h), or with two pool
  // threads or more. Not with one pool thread: a write that hangs on the
  // disk would stop every delivery and ack.
  bool WritesHere() const { return options_.loop || options_.threads >= 2; }
  // Under Options::loop, before Start: how another thread wakes the loop.
  void SetLoopWake(std::function<void()> wake) { wake_.Set(std::move(wake)); }
  // Where the scheduler's periodic work (its clock poll) runs, after
  // Start: a thread of its own, "delayd-clock" (without a clock poll, a
  // strand of the pool). Periodic checks of the layers above run here
  // too, armed on NextTick's grid, so that they wake one thread together
  // and the pool sleeps through an idle second (a wake-up of the pool,
  // whose io_context several threads run, also wakes a second thread to
  // hand it the reactor).
  asio::any_io_executor housekeeping() {
    return clock_timer_ ? clock_timer_->get_executor()
                        : asio::any_io_executor(asio::make_strand(io_));
  }
  const Limits& limits() const { return options_.limits; }
  // Options::partitions, or the store's shared partitions (see
  // Store::SharedPartitions). Set by Start.
  std::uint32_t partitions() const { return partition_count_; }
  bool shutting_down() const { return shutting_down_.load(); }
  bool durable() const { return store_ != nullptr; }
  // See Store::Gauges; none without a store.
  std::vector<Store::Gauge> StoreGauges() {
    return store_ ? store_->Gauges() : std::vector<Store::Gauge>();
  }
  // See Store::Busy; zero without a store.
  std::chrono::nanoseconds StoreBusy() const {
    return store_ ? store_->Busy() : std::chrono::nanoseconds(0);
  }
  // See Store::Writable; true without a store.
  bool StoreWritable(std::string* why) const {
    return store_ == nullptr || store_->Writable(why);
  }
  // Writes a consistent copy of the store into `dir` (see Store::Backup);
  // every change acknowledged before is in it. Blocks: call it from work
  // given to Offload.
  Status Backup(const std::string& dir) {
    if (!store_) return Status::FailedPrecondition("no store");
    return store_->Backup(dir);
  }
  // Runs `work`, which may block (file system calls, a backup), on the read
  // pool, off the threads that serve calls and run dispatchers.
  void Offload(std::function<void()> work) {
    asio::post(ReadExecutor(), std::move(work));
  }

  // Begins a graceful stop: operations from now on get UNAVAILABLE, every
  // stream is ended with UNAVAILABLE, timers stop firing. `done` runs (on
  // some strand) once every operation accepted before the call has answered
  // (durably) and every dispatcher is closed.
  void Shutdown(std::function<void()> done) EXCLUDES(ns_mutex_);
  // Stops the clock thread, then the thread pool, and waits for them;
  // then closes the store.
  // Idempotent.
  void Stop();

 private:
  static Status ShuttingDown() {
    return Status::Unavailable("delayd is shutting down");
  }
  // Whether a change may be taken now: not while shutting down, nor while
  // the store's writer is behind by more than its backlog bound.
  Status Admit() const;
  std::uint32_t PartitionOf(NamespaceId ns, std::string_view key) const;
  Status Recover(RecoveryReport* report) EXCLUDES(ns_mutex_);
  // TakePartition's work, on the read pool.
  Status LoadPartition(std::uint32_t part) EXCLUDES(held_mu_);
  // Recovery's schedules (scheduler_recover_schedules.cc): the highest
  // version among them goes to `*max_version`; a schedule of a namespace id
  // not among the first `ids` sets `*bad_namespace`.
  Status RecoverSchedules(std::size_t ids, WallNanos wall_now,
                          SteadyTime steady_now, std::uint64_t* max_version,
                          bool* bad_namespace);
  // Loads the stored policies into policies_ (before any namespace).
  Status RecoverPolicies() EXCLUDES(ns_mutex_);
  // Recovery: a pending timer or unacknowledged event under `run_key` is a
  // schedule's open run (partition.h, RunState).
  void NoteOpenRun(NamespaceId ns, std::string_view run_key);
  // The policy of `name`.
  const Policy& PolicyLocked(const std::string& name) const
      REQUIRES_SHARED(ns_mutex_);
  // Creates the dispatcher of a new namespace, or gives a freed id a new
  // name.
  NamespaceId AddNamespace(std::string name) REQUIRES(ns_mutex_);
  // Recovery: the namespaces as stored, each at the id its records were
  // written under (an empty name is a freed id, kept free).
  void RestoreNamespaces(std::vector<std::string> names) REQUIRES(ns_mutex_);
  // Puts `policy` in force for namespace `id`: its dispatcher's, and its
  // dedup window.
  void SetNamespacePolicy(NamespaceId id, const Policy& policy);
  // Appends the dispatcher of id owned_dispatchers_.size(), named `name`.
  NamespaceId NewDispatcher(const std::string& name) REQUIRES(ns_mutex_);
  // Frees namespace `id` if nothing uses it (posted by refs_ on zero).
  void Free(NamespaceId id) EXCLUDES(ns_mutex_);
  static std::string_view KeyOf(const Op& op);
  static NamespaceId NamespaceOf(const Op& op);
  using ListDone = std::function<void(Status, std::vector<TimerInfo>,
                                      std::optional<ListCursor>)>;
  void ListFrom(NamespaceId ns, std::string prefix, ListLimits limit,
                ListCursor from, std::vector<TimerInfo> acc, ListDone done);
  // Adds what `found` holds (its payloads read) to `acc`; if the page is
  // complete, or this was the last partition, answers it and returns true.
  bool ListPage(const Partition& p, Partition::Found& found,
                std::optional<std::uint32_t> next, ListCursor from,
                ListLimits limit, std::vector<TimerInfo>& acc, ListDone& done);
  // Checks the clock's offset every clock_poll, on the clock thread.
  void PollClock() EXCLUDES(clock_mu_);
  void ArmClockPoll();
  // Each poll deletes the dedup windows' ended entries (Partition::
  // PurgeDedup), round after round on the strand until none wait.
  void PurgeDedup();
  // With the system's clock: arms step_watch_, which reports each step of
  // its wall clock; AwaitClockStep acts on them, on the clock thread.
  void WatchClockSteps();
  void AwaitClockStep();
  // Where payloads are read from the store (with one): threads of their
  // own, so that reads held up by a stalled disk never take the pool that
  // runs dispatchers and completions. Without a store, the pool.
  asio::any_io_executor ReadExecutor() {
    return reads_ ? asio::any_io_executor(reads_->get_executor())
                  : asio::any_io_executor(executor());
  }

  const Options options_;
  Clock& clock_;
  const SteadyTime epoch_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  LoopWake wake_;
  // Under Options::loop, run by timer_thread_ (declared before what owns
  // its timers, so destroyed after them).
  asio::io_context timer_io_;
  std::thread timer_thread_;
  // Where the store's completions run when the store does not run them
  // itself (store.h: SetInlineCompletions), in the order it finished them.
  Strand replies_{asio::make_strand(executor())};
  Counters counters_;
  Metrics metrics_;
  std::unique_ptr<Store> store_;
  std::vector<std::unique_ptr<Partition>> partitions_;
  // Written by Start before anything runs; read-only after.
  std::uint32_t partition_count_ = 1;
  bool shared_partitions_ = false;
  // With shared partitions: those held, with their epochs, as the store was
  // last told. A partition's Own() and its events' hand-over happen under
  // it, so a DropPartition after them undoes them all.
  mutable Mutex held_mu_;
  Store::Held held_ GUARDED_BY(held_mu_);

  // The namespace table. dispatchers_[id] is written once, before the id is
  // published under the lock, so readers of a pinned id need no lock.
  SharedMutex ns_mutex_;
  std::unordered_map<std::string, NamespaceId, KeyedStringHash, std::equal_to<>>
      ns_ids_ GUARDED_BY(ns_mutex_);
  std::unique_ptr<Dispatcher*[]> dispatchers_;
  // With shared partitions, each namespace id's StableSeed, written as
  // dispatchers_[id] is (with its name).
  std::unique_ptr<std::uint64_t[]> stable_seeds_;
  std::unique_ptr<NamespaceRefs> refs_;
  // Each namespace's dedup window, as its policy says (SetNamespacePolicy).
  DedupWindows dedup_windows_;
  std::unique_ptr<asio::thread_pool> reads_;
  // Ids of freed namespaces, for reuse; a freed id's dispatcher has an
  // empty name.
  std::vector<NamespaceId> free_ids_ GUARDED_BY(ns_mutex_);
  // Subscribers of namespaces that do not exist yet, by name.
  struct Waiting {
    std::uint64_t id;
    std::shared_ptr<Subscriber> subscriber;
    SubscribeOptions options;
  };
  std::unordered_map<std::string, std::vector<Waiting>, KeyedStringHash,
                     std::equal_to<>>
      waiting_ GUARDED_BY(ns_mutex_);
  // Counts a waiting subscriber in the workers or watchers gauge.
  void CountWaiting(const Waiting& w, int delta);
  std::vector<std::unique_ptr<Dispatcher>> owned_dispatchers_
      GUARDED_BY(ns_mutex_);
  // Policies other than the default, by namespace name. A SetPolicy takes
  // policy_mutex_ to check the policy limit and queue the store's write,
  // and again in its completion (which the store runs in its order) to
  // apply the policy: policies apply in the order they were stored.
  Mutex policy_mutex_ ACQUIRED_BEFORE(ns_mutex_);
  std::unordered_map<std::string, Policy> policies_ GUARDED_BY(ns_mutex_);
  // Names whose policy is queued for the store: how many times, and the
  // last one queued (the base of the next change).
  struct Queued {
    int count = 0;
    Policy last;
  };
  std::unordered_map<std::string, Queued> policies_queued_
      GUARDED_BY(policy_mutex_);
  std::function<void(const std::string&)> policy_observer_
      GUARDED_BY(policy_mutex_);
  // Applies a stored policy.
  void ApplyPolicy(const std::string& name, const Policy& policy)
      REQUIRES(policy_mutex_) EXCLUDES(ns_mutex_);
  std::atomic<bool> shutting_down_{false};
  std::atomic<std::uint64_t> next_subscriber_id_{1};
  std::vector<std::thread> threads_;
  // The clock's offset when deadlines were last derived.
  Mutex clock_mu_;
  std::chrono::nanoseconds derived_offset_ GUARDED_BY(clock_mu_);
  // The periodic work's own loop (housekeeping()), run by clock_thread_.
  asio::io_context clock_io_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>>
      clock_work_;
  std::thread clock_thread_;
  std::optional<asio::steady_timer> clock_timer_;
  std::optional<asio::posix::stream_descriptor> step_watch_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_SCHEDULER_H_
