// The durable store under the scheduler: RocksDB holding every pending timer,
// every fired event not yet acknowledged, each timer's payload, the namespace
// table and the sequence counters.
//
// Layout (column families; integers in keys are big-endian so keys sort by
// them, integers in values little-endian):
//   timers    payload id (8)        -> ns id, fire time, version, key
//   payloads  payload id (8)        -> payload bytes
//   events    event id (8)          -> ns id, version, fire time, fired-at,
//                                      reason, payload id, key
//   default   'n' + ns id (4)       -> namespace name
//             'c' + partition (2)   -> version and event sequence limits
// A payload id is unique daemon-wide and given when a timer is set; ids grow
// over time, so nearly every write lands at the end of RocksDB's sorted
// memtable rather than at a random place in it (keying timers by namespace
// and key cost a search through the whole memtable per write). A payload is
// written once, when its timer is set, and deleted when the timer is replaced
// or removed or its event is acknowledged; moves and firing only rewrite the
// small timer and event records. So payloads need not be in RAM: they are
// read back when an event is delivered.
//
// Writes (store_writer.cc): Commit() only queues a batch, in the caller's
// order, and returns; one writer thread writes the queued batches to the
// write-ahead log, a group at a time, syncs the group as the fsync policy
// says, and hands the group's callbacks to the executor (a thread that is not
// the writer's), so the next group is written and synced while they run. No
// caller ever waits for the disk. Reads see every queued batch: a View taken
// after a Commit() holds the payloads the writer has not written yet. A
// stalled disk stops only the writer; the queue is bounded by backlog()
// checks of the callers.
//
// Damage: besides RocksDB's checksums, a mark file records how much the store
// had made durable (store_mark.h), and a store that comes back with less is
// refused on open (or, under --salvage, opened with the loss logged).
//
// Thread safety: every method may be called from any thread.
#ifndef DELAYD_SERVER_STORE_STORE_H_
#define DELAYD_SERVER_STORE_STORE_H_

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/common/metrics.h"
#include "server/common/status.h"
#include "server/common/types.h"
#include "server/store/store_mark.h"

namespace delayd {

enum class FsyncPolicy {
  kAlways,    // Each write is acknowledged after a WAL sync: nothing is lost.
  kInterval,  // WAL synced every `fsync_interval`: a power loss or OS crash
              // loses at most that much; a crash of delayd alone loses
              // nothing.
  kNever,     // Left to the OS: a power loss loses what it had not written
              // back; a crash of delayd alone loses nothing.
};

struct StoreOptions {
  std::string dir;
  FsyncPolicy fsync = FsyncPolicy::kAlways;
  std::chrono::nanoseconds fsync_interval = std::chrono::milliseconds(100);
  // Recover to the last consistent point of a log damaged in the middle
  // (dropping everything after the damage) instead of refusing to open.
  bool salvage = false;
  // Told of every failed read or write after opening (for the daemon's log).
  std::function<void(const Status&)> on_error;
  // Told once (from the failing thread) when a write or sync fails. The
  // store then refuses every later write without touching RocksDB: the
  // RocksDB of Debian 12 (7.8) cannot go on writing after a failed log write
  // (it asserts), and recovers on the next open by replaying the log. The
  // daemon reports NOT_SERVING and stops (exit code 3) for its supervisor to
  // restart it once the disk is writable again.
  std::function<void(const Status& why)> on_write_failure;
  // Opened to be checked (delayd check): read-only, nothing created or
  // written.
  bool read_only = false;
  // Read-only: replay every log record that can be read, skipping damaged
  // ones (a view that may be inconsistent, never served: it names what a
  // salvage dropped).
  bool skip_damaged_records = false;
  // The environment RocksDB uses, if not the default: tests give one whose
  // file system simulates a power loss (tests/common/power_loss_fs.h).
  rocksdb::Env* env = nullptr;
  rocksdb::Env* EnvOrDefault() const {
    return env ? env : rocksdb::Env::Default();
  }
  // Where WAL syncs and write stalls are measured (none: not measured).
  Metrics* metrics = nullptr;
  // Queued bytes beyond which backlogged() is true: callers refuse new
  // changes instead of queueing them while the disk lags.
  std::size_t max_backlog_bytes = 64 << 20;
  // Whether ReadCached reads (tests turn it off to make every read go
  // through before_payload_read).
  bool cached_reads = true;
  // How many deleted payloads' ids are kept for views (Store::View), 8
  // bytes each.
  std::size_t max_deletes_kept = std::size_t{1} << 20;
  // Tests: runs on the reading thread before each read of payloads (a read
  // that hangs, as a slow disk's would; payloads read back from RocksDB's
  // memtable touch no file the test's Env could hold).
  std::function<void()> before_payload_read;
};

// Parses "always", "never" or a duration such as "100ms" (an interval).
Status ParseFsyncPolicy(std::string_view text, StoreOptions* options);

struct StoredTimer {
  NamespaceId ns;
  std::string_view key;
  WallNanos fire_time;
  std::uint64_t version;
  std::uint64_t payload_id;
};

struct StoredEvent {
  std::uint64_t id;
  NamespaceId ns;
  std::string_view key;
  std::uint64_t version;
  WallNanos fire_time;
  WallNanos fired_at;
  Reason reason;
  std::uint64_t payload_id;
};

// What became of an event's deliveries: how many were made (a delivery that
// succeeds is acknowledged and leaves no record, so only failures are
// written), whether it is a dead letter, the last error a worker gave.
struct StoredFate {
  std::uint32_t attempts = 0;
  bool dead = false;
  std::string_view error;
};

// With a store, a timer's or event's in-memory Blob holds its key and, as its
// payload, the 8-byte id under which the real payload is stored.
inline Blob KeyBlob(std::string_view key, std::uint64_t payload_id) {
  return Blob(key, std::string_view(reinterpret_cast<const char*>(&payload_id),
                                    sizeof payload_id));
}
inline std::uint64_t PayloadIdOf(const Blob& blob) {
  std::uint64_t id = 0;
  if (blob.payload().size() == sizeof id) {
    std::memcpy(&id, blob.payload().data(), sizeof id);
  }
  return id;
}

class Store {
 public:
  // A set of changes committed together.
  class Batch {
   public:
    void PutTimer(std::uint64_t payload_id, NamespaceId ns,
                  std::string_view key, WallNanos fire_time,
                  std::uint64_t version);
    void DeleteTimer(std::uint64_t payload_id);
    void PutPayload(std::uint64_t payload_id, std::string_view payload);
    void DeletePayload(std::uint64_t payload_id);
    void PutEvent(const StoredEvent& event);
    void DeleteEvent(std::uint64_t event_id);
    // An event's failed deliveries and whether it is a dead letter
    // (store_fate.cc); only events that failed have one.
    void PutFate(std::uint64_t event_id, const StoredFate& fate);
    void DeleteFate(std::uint64_t event_id);
    bool empty() const { return batch_.Count() == 0; }

   private:
    friend class Store;
    explicit Batch(const Store& store) : store_(&store) {}
    void PutCounters(std::uint32_t partition, std::uint64_t version_limit,
                     std::uint64_t event_seq_limit);
    const Store* store_;
    rocksdb::WriteBatch batch_;
  };

  // Opens (creating if missing) the store in `options.dir`. A damaged store
  // fails with a message naming the directory and the problem, and so does
  // one holding less than its mark says it had made durable. (Defined in
  // store_open.cc.)
  static Status Open(const StoreOptions& options, std::unique_ptr<Store>* out);
  ~Store();  // Close().

  // --- Recovery, before any write. ---
  // Namespace names by id (ids are dense from 0; an empty name is a freed
  // id).
  Status LoadNamespaces(std::vector<std::string>* names);
  // The highest version and event-sequence limits of any partition (the
  // next numbers to use after a restart).
  Status LoadCounters(std::uint64_t* next_version,
                      std::uint64_t* next_event_seq);
  // Visits every pending timer (in payload-id order) / unacknowledged event
  // (in event-id order).
  Status ForEachTimer(const std::function<void(const StoredTimer&)>& visit);
  Status ForEachEvent(const std::function<void(const StoredEvent&)>& visit);
  // Every event's fate, in event-id order (store_fate.cc).
  Status ForEachFate(
      const std::function<void(std::uint64_t, const StoredFate&)>& visit);
  // Namespace policies by name, as PutPolicy stored them (store_policy.cc).
  Status LoadPolicies(
      std::vector<std::pair<std::string, std::string>>* policies);

  // --- Offline check (delayd check), on a store opened read-only. ---
  struct CheckReport {
    std::uint64_t namespaces = 0;
    std::uint64_t timers = 0;
    std::uint64_t events = 0;
    // What is wrong, each naming what it found (the namespace and key where
    // known). Empty: every check passed.
    std::vector<std::string> problems;
  };
  // Verifies every table file's checksums, decodes every record and reads
  // every timer's and event's payload.
  void Check(CheckReport* report);

  // --- Writes (store_writer.cc). ---
  Batch NewBatch() const { return Batch(*this); }
  // Queues `batch` (taking its contents) for the writer; `done` runs once it
  // is durable under the fsync policy, or with the error if the store failed
  // or is closed (then at once, on this thread). An empty batch completes at
  // once.
  void Commit(Batch& batch, std::function<void(Status)> done);
  // As Commit(), but if the store failed or is closed nothing is queued and
  // the error is returned (the batch is kept, to be tried again). Otherwise
  // `written` runs on the writer thread once the batch is in the log (before
  // its sync; it must not block), and `durable` as Commit's `done`.
  Status Write(Batch& batch, std::function<void()> written,
               std::function<void(Status)> durable);
  // As Commit(), synced whatever the fsync policy: the partition's id
  // limits. Every version and event sequence number a partition hands out
  // stays below limits that are durable, and after a restart (a power loss
  // included) numbering resumes at them, so none repeats.
  void ReserveIdsLater(std::uint32_t partition, std::uint64_t version_limit,
                       std::uint64_t event_seq_limit,
                       std::function<void(Status)> done);
  // As ReserveIdsLater, but written and synced before it returns (recovery,
  // before anything is served).
  Status ReserveIds(std::uint32_t partition, std::uint64_t version_limit,
                    std::uint64_t event_seq_limit);
  // The error later writes get, if the store failed (else OK).
  Status Failed() const;
  // From now on, a group's completions (`done` of Commit) are handed to
  // `executor`, off the writer thread; until then (and without one) the
  // writer runs them itself.
  void SetExecutor(std::function<void(std::function<void()>)> executor) {
    std::lock_guard lock(mu_);
    executor_ = std::move(executor);
  }
  // Whether more than max_backlog_bytes wait for the writer.
  bool backlogged() const {
    return queued_bytes_.load(std::memory_order_relaxed) >
           options_.max_backlog_bytes;
  }
  // How long the oldest disk operation still running (the writer's write, a
  // sync, a payload read from disk) has run; zero if none is running. A disk
  // that hangs instead of failing shows here, not in an error: the daemon
  // reports NOT_SERVING while this passes its --store-stall-limit.
  std::chrono::nanoseconds Busy() const;
  // Queues the name of a new namespace (empty: the id is freed). The log
  // keeps the writer's order, so it is on disk before any timer queued after
  // it that refers to it.
  Status PutNamespace(NamespaceId id, std::string_view name);
  // Writes and syncs the encoded policy of namespace `name`; an empty
  // `policy` deletes it (store_policy.cc).
  Status PutPolicy(std::string_view name, std::string_view policy);

  // --- Reads (store_read.cc). ---
  // What the store holds at one instant, queued batches included. Taken
  // without I/O (so under a caller's lock), read after (without it): a
  // payload deleted since reads as gone, not as damage. A view costs nothing
  // per later write but the id of each payload deleted while it lives (8
  // bytes, kept once for all views); past max_deletes_kept of those, the
  // oldest views can no longer tell a payload deleted since from a missing
  // one, and take it as deleted.
  class View {
   public:
    View(View&& other) noexcept
        : store_(other.store_), state_(std::move(other.state_)) {}
    View& operator=(View&&) = delete;
    ~View();

   private:
    friend class Store;
    struct State {
      // Batches queued when the view was taken.
      std::vector<std::shared_ptr<const rocksdb::WriteBatch>> queued;
      // Where the view's part of the store's deletes_ log starts (an
      // absolute position: deletes_base_ counts what was dropped).
      std::uint64_t deletes_from = 0;
    };
    View() = default;
    Store* store_ = nullptr;
    std::shared_ptr<State> state_;
  };
  View NewView();
  // Payloads by id, in order. One that cannot be read (a damaged store; a
  // missing one counts as damage) is marked false in `readable` and the
  // others are still read; the first such error is returned (and reported
  // to on_error). Without a view, only what the writer has written is read.
  Status GetPayloads(std::span<const std::uint64_t> ids,
                     std::vector<std::string>* payloads,
                     std::vector<bool>* readable);
  // As the first GetPayloads, but only from what RocksDB holds in memory
  // (its memtables and block cache), never waiting for the disk: true if
  // every payload was there, false (and nothing read) if any was not.
  bool ReadCached(std::span<const std::uint64_t> ids,
                  std::vector<std::string>* payloads,
                  std::vector<bool>* readable);
  // As above, as `view` saw them, queued ones included; one deleted since
  // the view (its timer is gone) is marked true in `gone`, not as damage.
  Status GetPayloads(std::span<const std::uint64_t> ids, const View& view,
                     std::vector<std::string>* payloads,
                     std::vector<bool>* readable, std::vector<bool>* gone);

  // Writes a consistent copy of the store (a RocksDB checkpoint: memtables
  // flushed, files hard-linked where possible) into `dir`, which must not
  // exist. On failure nothing is left in `dir`.
  Status Checkpoint(const std::string& dir);

  // Runs `done` (through the executor) once every batch queued before is
  // written and synced, and after the callbacks of those batches were handed
  // to the executor. Never waits.
  void Flush(std::function<void()> done);
  // Waits until every queued batch is written and its callbacks were run or
  // handed to the executor, then syncs the WAL. Commits after this still work;
  // Close() ends them.
  void Sync();
  // Syncs, flushes memtables and closes. Commits after Close() fail.
  void Close();

  const StoreOptions& options() const { return options_; }
  // A RocksDB integer property summed over the column families (e.g.
  // "rocksdb.estimate-live-data-size"); nullopt once closed or unknown.
  std::optional<std::uint64_t> Property(const std::string& name);
  // With --salvage: where the directory was copied, as it was, before
  // opening (empty if it was empty).
  const std::string& salvage_copy() const { return salvage_copy_; }
  // With --salvage: what was dropped, in words: what the mark
  // (store_mark.h) shows is missing, and what the copy still holds.
  const std::string& salvage_dropped() const { return salvage_dropped_; }

 private:
  explicit Store(StoreOptions options) : options_(std::move(options)) {}
  struct Queued {
    std::shared_ptr<const rocksdb::WriteBatch> batch;
    std::function<void()> written;
    std::function<void(Status)> done;
    bool sync = false;  // Synced whatever the policy.
  };
  // Queues a batch, taking its contents and callbacks; if the store failed
  // or is closing, fails and takes nothing.
  Status Enqueue(rocksdb::WriteBatch& batch, std::function<void()>& written,
                 std::function<void(Status)>& done, bool sync);
  // The writer thread: writes queued batches in order, a group at a time,
  // and hands those to be synced to the syncer thread (SyncLoop), which
  // syncs everything written so far in one go.
  void WriterLoop();
  void SyncLoop();
  // Runs (or hands to the executor) the completions of a group, without
  // mu_ (held by the caller on entry and on return).
  void RunDone(std::unique_lock<std::mutex>& lock,
               std::vector<std::function<void(Status)>> done,
               const Status& status);
  Status Read(std::span<const std::uint64_t> ids, const View* view,
              std::vector<std::string>* payloads, std::vector<bool>* readable,
              std::vector<bool>* gone);
  // Payload records by key (under close_mu_, held by the caller).
  std::vector<rocksdb::Status> MultiGetPayloads(
      const rocksdb::ReadOptions& options,
      const std::vector<rocksdb::Slice>& keys,
      std::vector<std::string>* values);
  // The key of a timer, payload or event record (store.cc).
  static std::string IdKey(std::uint64_t id);
  // Writes one group as one RocksDB write.
  rocksdb::Status WriteGroup(const std::vector<Queued>& group);
  // Every kMarkInterval, records in the mark how much is durable, if that
  // changed (store_mark.h).
  void MarkLoop();
  Status UpdateMark();
  // After a salvage: names the timers and events that the copied
  // directory's log, read past its damage, holds and this store does not.
  std::string NameDropped();
  // Writes `batch` and syncs it before returning (rare writes that must be
  // durable before they are used); `what` names it in an error.
  Status WriteSynced(rocksdb::WriteBatch& batch, const char* what);
  // Writes up to `sequence` are durable.
  void NoteDurable(std::uint64_t sequence);
  // Marks the store failed (every later write is refused) and reports it,
  // once.
  void NoteWriteError(const Status& error);
  Status Error(const char* what, const rocksdb::Status& s) const;

  // One disk operation, for Busy(): running from construction to
  // destruction.
  class DiskOp {
   public:
    explicit DiskOp(Store& store);
    ~DiskOp();
    DiskOp(const DiskOp&) = delete;
    DiskOp& operator=(const DiskOp&) = delete;

   private:
    Store& store_;
    std::multiset<std::chrono::steady_clock::time_point>::iterator at_;
  };

  const StoreOptions options_;
  std::string salvage_copy_;
  std::string salvage_dropped_;
  // Read-only: what the mark says the store lost (reported by Check()).
  std::vector<std::string> mark_problems_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;
  rocksdb::ColumnFamilyHandle* timers_ = nullptr;
  rocksdb::ColumnFamilyHandle* payloads_ = nullptr;
  rocksdb::ColumnFamilyHandle* events_ = nullptr;

  // Shared by writers, exclusive for closing.
  std::shared_mutex close_mu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  // Under mu_: batches not yet written, in order (the writer's group is
  // kept at the front, for views, until it is written).
  std::deque<Queued> queue_;
  // Under mu_: views alive, and the ids of payloads deleted by groups the
  // writer took while any view lived (appended before the group is written,
  // so a deletion RocksDB shows is always here), from position
  // deletes_base_ on. Kept back to the oldest view's start, and at most
  // options_.max_deletes_kept.
  std::vector<View::State*> views_;
  std::deque<std::uint64_t> deletes_;
  std::uint64_t deletes_base_ = 0;
  // Drops what no view needs from deletes_ (under mu_).
  void TrimDeletes();
  // Marks in `deleted` (by the index `missing` maps each id to) the
  // payloads deleted since `view` was taken, as deletes_ tells; all of
  // them if it no longer can. Takes mu_.
  void FindDeletedSince(
      const View& view,
      const std::unordered_map<std::uint64_t, std::size_t>& missing,
      std::vector<bool>& deleted);
  std::function<void(std::function<void()>)> executor_;
  std::atomic<std::size_t> queued_bytes_{0};
  bool writing_ = false;  // The writer holds a group.
  bool writer_done_ = false;
  // Completions of written groups, for the syncer's next sync.
  std::vector<std::function<void(Status)>> waiting_;
  std::condition_variable sync_cv_;
  bool syncing_ = false;
  int running_ = 0;        // Completions being run or handed over.
  bool unsynced_ = false;  // Written since the last sync (interval policy).
  bool closing_ = false;
  bool closed_ = false;
  std::thread writer_;
  std::thread syncer_;
  std::thread marker_;
  std::condition_variable mark_cv_;
  std::atomic<std::uint64_t> durable_seq_{0};
  // The mark last written: by Open, then the marker thread, then Close.
  StoreMark mark_;
  std::atomic<bool> failed_{false};
  // When each running DiskOp started (under disk_ops_mu_).
  mutable std::mutex disk_ops_mu_;
  std::multiset<std::chrono::steady_clock::time_point> disk_ops_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_STORE_STORE_H_
