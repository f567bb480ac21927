// The scheduler: P partitions (timers, by hash of namespace and key) and one
// dispatcher per namespace (delivery), all on strands of one io_context run
// by a pool of threads.
//
// Concurrency, in one rule: state is changed only in memory, by whoever
// holds it (a partition: its mutex; a dispatcher: its strand), and every
// change to be stored is queued, in order, for the store's one writer
// thread (store.h), so no one holds a partition or a dispatcher across disk
// I/O or a wait. The writer writes and syncs a group while the previous
// group's completions (replies, the publishing of fired events) run on the
// pool. Reads of payloads run on a read pool of their own, from a view
// taken under the partition (Partition::Read), and so do a dispatcher's
// (dispatcher.h: for workers, watchers and dead-letter listings), so reads
// that a stalled disk holds up never hold the pool. A stalled disk therefore
// stops only what waits for durability or a read: delivery and acks of
// events in memory go on, and new changes are refused (UNAVAILABLE) once
// the writer's backlog passes its bound (Admit).
// Thread safety: every public method may be called from any thread.
#ifndef DELAYD_SERVER_CORE_SCHEDULER_H_
#define DELAYD_SERVER_CORE_SCHEDULER_H_

#include <asio.hpp>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/common/keyed_hash.h"
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
    std::chrono::nanoseconds tick = std::chrono::microseconds(1);
    Limits limits;
    // The durable store; none keeps all state in memory only.
    std::optional<StoreOptions> store;
    // The clock (clock.h); null: the system's. Not owned; outlives the
    // scheduler.
    Clock* clock = nullptr;
    // How often the clock's offset is checked for a step or pause; 0: never
    // (a fake clock tells of its changes).
    std::chrono::milliseconds clock_poll{100};
  };
  // What Start() found in the store.
  struct RecoveryReport {
    std::uint64_t namespaces = 0;
    std::uint64_t timers = 0;
    std::uint64_t overdue = 0;  // Came due while the daemon was down.
    std::uint64_t events = 0;   // Fired, not acknowledged.
    std::chrono::nanoseconds took{0};
    std::string salvage_copy;     // See Store::salvage_copy().
    std::string salvage_dropped;  // See Store::salvage_dropped().
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
  };

  explicit Scheduler(Options options);
  ~Scheduler();  // Stops the threads.
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Opens the store (if any), recovers its state, and starts the thread
  // pool. Fails, starting nothing, if the store cannot be opened or read.
  Status Start(RecoveryReport* report = nullptr);

  // The id of a namespace, created on first use (by a write).
  // RESOURCE_EXHAUSTED beyond the namespace limit. Pins the namespace: the
  // caller calls Unpin(id) once its call is answered.
  Status Intern(std::string_view name, NamespaceId* id);
  // The id of namespace `name` if it exists, pinned as by Intern. Reads and
  // refused calls use this: they never create a namespace.
  bool Find(std::string_view name, NamespaceId* id);
  // Ends a pin of Intern or Find. A namespace with no pins, timers, events
  // or subscribers is freed (see namespace_refs.h).
  void Unpin(NamespaceId id) { refs_->Release(id); }
  // Namespaces in use (not freed).
  std::size_t namespaces();
  // Calls `visit` with each namespace in use and its figures, holding the
  // namespace table (shared): namespaces are neither created nor freed
  // meanwhile.
  void ForEachNamespace(
      const std::function<void(const std::string&, const NamespaceCounters&)>&
          visit);

  // Namespace policies (scheduler_policy.cc), by name, whether or not the
  // namespace is in use. SetPolicy stores it (durably, with a store) and
  // applies it to the namespace if in use; the default policy removes the
  // record. RESOURCE_EXHAUSTED beyond --max-namespaces policies.
  Status SetPolicy(std::string_view name, const Policy& policy);
  Policy PolicyOf(std::string_view name);

  // Registers a subscriber of namespace `name`, which need not exist yet:
  // then it waits outside the namespace table (it does not count against
  // the namespace limit) and moves to the namespace when a write creates
  // it. `done` runs once it is registered, before anything is delivered.
  void Subscribe(std::string_view name, std::uint64_t id,
                 std::shared_ptr<Subscriber> subscriber,
                 SubscribeOptions options, std::function<void()> done);
  // Forgets a subscriber (its stream ended).
  void Unsubscribe(std::string_view name, std::uint64_t id);
  Dispatcher& dispatcher(NamespaceId id) { return *dispatchers_[id]; }

  // Applies one operation; `done` runs on the key's partition strand.
  void Submit(Op op, std::function<void(OpResult)> done);
  // Applies operations with one result each, in order per key; `done` runs
  // once, on the strand that finished last.
  void SubmitBatch(std::vector<Op> ops,
                   std::function<void(std::vector<OpResult>)> done);
  // Fires every pending timer of `ns` (reason DRAINED); `done` gets the
  // count.
  void Drain(NamespaceId ns, std::function<void(Status, std::uint64_t)> done);
  void Get(NamespaceId ns, std::string key,
           std::function<void(Status, std::optional<TimerInfo>)> done);
  // One page of timers of `ns` with keys starting with `prefix`, from
  // `from`, within `limit`; the cursor for the next page if there may be
  // one.
  void List(NamespaceId ns, std::string prefix, ListLimits limit,
            ListCursor from,
            std::function<void(Status, std::vector<TimerInfo>,
                               std::optional<ListCursor>)>
                done);

  std::uint64_t NewSubscriberId() { return next_subscriber_id_.fetch_add(1); }
  Clock& clock() const { return clock_; }
  // Acts on a change of the clock other than time passing
  // (scheduler_clock.cc): if its offset moved by kClockSlack or more, every
  // partition re-derives its deadlines; then every partition and dispatcher
  // fires what is due now. `done` (if any) runs once all of that has run.
  void ClockChanged(std::function<void()> done);
  static constexpr std::chrono::milliseconds kClockSlack{1};
  Counters& counters() { return counters_; }
  Metrics& metrics() { return metrics_; }
  // The pool's io_context (for timers of the layers above).
  asio::io_context& io() { return io_; }
  const Limits& limits() const { return options_.limits; }
  std::uint32_t partitions() const { return options_.partitions; }
  bool shutting_down() const { return shutting_down_.load(); }
  bool durable() const { return store_ != nullptr; }
  // See Store::Property; nullopt without a store.
  std::optional<std::uint64_t> StoreProperty(const std::string& name) {
    return store_ ? store_->Property(name) : std::nullopt;
  }
  // See Store::Busy; zero without a store.
  std::chrono::nanoseconds StoreBusy() const {
    return store_ ? store_->Busy() : std::chrono::nanoseconds(0);
  }
  // Writes a consistent copy of the store into `dir` (see
  // Store::Checkpoint); every change acknowledged before is in it.
  Status Backup(const std::string& dir) {
    if (!store_) return Status::FailedPrecondition("no store");
    return store_->Checkpoint(dir);
  }

  // Begins a graceful stop: operations from now on get UNAVAILABLE, every
  // stream is ended with UNAVAILABLE, timers stop firing. `done` runs (on
  // some strand) once every operation accepted before the call has answered
  // (durably) and every dispatcher is closed.
  void Shutdown(std::function<void()> done);
  // Stops the thread pool and waits for it, then closes the store.
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
  Status Recover(RecoveryReport* report);
  // Loads the stored policies into policies_ (before any namespace).
  Status RecoverPolicies();
  // The policy of `name`; the caller holds ns_mutex_ (or runs before
  // Start).
  const Policy& PolicyLocked(const std::string& name) const;
  // Creates the dispatcher of a new namespace, or gives a freed id a new
  // name; the caller holds ns_mutex_ exclusively (or runs before Start).
  NamespaceId AddNamespace(std::string name);
  // Frees namespace `id` if nothing uses it (posted by refs_ on zero).
  void Free(NamespaceId id);
  static std::string_view KeyOf(const Op& op);
  static NamespaceId NamespaceOf(const Op& op);
  void ListFrom(NamespaceId ns, std::string prefix, ListLimits limit,
                ListCursor from, std::vector<TimerInfo> acc,
                std::function<void(Status, std::vector<TimerInfo>,
                                   std::optional<ListCursor>)>
                    done);

  // Checks the clock's offset every clock_poll, on clock_timer_.
  void PollClock();

  const Options options_;
  Clock& clock_;
  const SteadyTime epoch_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  // Where payloads are read from the store (with one): threads of their
  // own, so that reads held up by a stalled disk never take the pool that
  // runs partitions and dispatchers. Without a store, the pool.
  asio::any_io_executor ReadExecutor() {
    return reads_ ? asio::any_io_executor(reads_->get_executor())
                  : asio::any_io_executor(io_.get_executor());
  }
  // Where the store's completions (replies) run, in the writer's order.
  Strand replies_{asio::make_strand(io_)};
  Counters counters_;
  Metrics metrics_;
  std::unique_ptr<Store> store_;
  std::vector<std::unique_ptr<Partition>> partitions_;
  // Namespaces: the map under the lock; dispatchers_[id] is written once,
  // before the id is published under the lock, so readers need no lock.
  std::shared_mutex ns_mutex_;
  std::unordered_map<std::string, NamespaceId, KeyedStringHash, std::equal_to<>>
      ns_ids_;
  std::unique_ptr<Dispatcher*[]> dispatchers_;
  std::unique_ptr<NamespaceRefs> refs_;
  std::unique_ptr<asio::thread_pool> reads_;
  // Ids of freed namespaces, for reuse (under ns_mutex_); a freed id's
  // dispatcher has an empty name.
  std::vector<NamespaceId> free_ids_;
  // Subscribers of namespaces that do not exist yet, by name (under
  // ns_mutex_).
  struct Waiting {
    std::uint64_t id;
    std::shared_ptr<Subscriber> subscriber;
    SubscribeOptions options;
  };
  std::unordered_map<std::string, std::vector<Waiting>, KeyedStringHash,
                     std::equal_to<>>
      waiting_;
  // Counts a waiting subscriber in the workers or watchers gauge.
  void CountWaiting(const Waiting& w, int delta);
  std::vector<std::unique_ptr<Dispatcher>> owned_dispatchers_;
  // Policies other than the default, by namespace name (read under
  // ns_mutex_, written under it exclusively). SetPolicy calls are one at a
  // time (policy_mutex_, taken before ns_mutex_), so the store's write
  // happens without blocking namespace lookups.
  std::mutex policy_mutex_;
  std::unordered_map<std::string, Policy> policies_;
  std::atomic<bool> shutting_down_{false};
  std::atomic<std::uint64_t> next_subscriber_id_{1};
  std::vector<std::thread> threads_;
  // The clock's offset when deadlines were last derived (under clock_mu_).
  std::mutex clock_mu_;
  std::chrono::nanoseconds derived_offset_;
  std::optional<asio::steady_timer> clock_timer_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_SCHEDULER_H_
