// The embedded store: RocksDB, in a data directory of the daemon's own.
//
// Layout (column families; integers in keys are big-endian so keys sort by
// them, integers in values little-endian):
//   timers    payload id (8)        -> ns id, fire time, version, key
//   payloads  payload id (8)        -> payload bytes
//   events    event id (8)          -> ns id, version, fire time, fired-at,
//                                      reason, payload id, key
//   default   'n' + ns id (4)       -> namespace name
//             'c' + partition (2)   -> version and event sequence limits
//             'p' + name            -> namespace policy
//             'f' + event id (8)    -> event fate
//             's' + ns id (4) + key -> recurring schedule
// Payload ids grow over time, so nearly every write lands at the end of
// RocksDB's sorted memtable rather than at a random place in it. A payload
// is written once, when its timer is set, and deleted when the timer is
// replaced or removed or its event is acknowledged; moves and firing only
// rewrite the small timer and event records.
//
// Writes (rocks_writer.cc): Commit() turns a batch into RocksDB records and
// queues them; the writer thread writes the queued batches as one RocksDB
// write (one log append) at a time, and hands it to the syncer thread, which
// syncs the log as the fsync policy says and runs the group's completions
// (or hands them to the executor), while the writer goes on with the next
// group. A caller of WriteHere writes a short queue itself instead, one
// group at a time with the writer. Reads see every queued batch through a
// View (rocks_read.cc). A stalled disk stops the writer, and at most one
// WriteHere caller; the queue is bounded by Backlogged() checks of the
// callers.
//
// Damage: besides RocksDB's checksums, a mark file records how much the
// store had made durable (rocks_mark.h), and a store that comes back with
// less is refused on open (or, under --salvage, opened with the loss
// logged).
//
// Locking: mu_ guards the queue, the views and the writer's and syncer's
// state; close_mu_ is held shared by every use of the database and
// exclusively to close it; disk_ops_mu_ guards the running disk operations;
// completing_mu_ is held by whichever thread runs a group's completions
// (the writer, a WriteHere caller, the syncer or the executor's), so that
// they run one group at
// a time. Order: completing_mu_ (taken without mu_: a completion may commit
// or read) before close_mu_ before mu_; disk_ops_mu_ is taken alone.
#ifndef DELAYD_SERVER_STORE_ROCKSDB_ROCKS_STORE_H_
#define DELAYD_SERVER_STORE_ROCKSDB_ROCKS_STORE_H_

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/common/mutex.h"
#include "server/store/rocksdb/rocks_mark.h"
#include "server/store/store.h"

namespace delayd {

enum class FsyncPolicy {
  kAlways,    // Each write is acknowledged after a WAL sync: nothing is lost.
              // (A write nobody waits for is synced with the next one that
              // is, or after `fsync_interval`.)
  kInterval,  // WAL synced every `fsync_interval`: a power loss or OS crash
              // loses at most that much; a crash of delayd alone loses
              // nothing.
  kNever,     // Left to the OS: a power loss loses what it had not written
              // back; a crash of delayd alone loses nothing.
};

struct RocksOptions {
  std::string dir;
  FsyncPolicy fsync = FsyncPolicy::kAlways;
  std::chrono::nanoseconds fsync_interval = std::chrono::milliseconds(100);
  // kAlways (--fsync-gather): once completions came while a sync ran
  // (callers that do not wait for one another), the next sync starts no
  // sooner than this after that one ended, unless kGatherEnough completions
  // already wait, so that it covers what comes meanwhile: fewer syncs at a
  // moderate load, each answer later by at most this. Zero: each sync
  // starts at once. A caller that waits for each answer never sets it off.
  std::chrono::nanoseconds sync_gather{0};
  // Recover to the last consistent point of a log damaged in the middle
  // (dropping everything after the damage) instead of refusing to open.
  bool salvage = false;
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
  // Fired timers take their versions as event ids (FixedEventIdsFrom):
  // recorded in the store the first time, and kept while this is set.
  bool fixed_event_ids = false;
  // Queued bytes beyond which Backlogged() is true.
  std::size_t max_backlog_bytes = 64 << 20;
  // Whether ReadCached reads (tests turn it off to make every read go
  // through before_payload_read).
  bool cached_reads = true;
  // How many deleted payloads' ids are kept for views, 8 bytes each.
  std::size_t max_deletes_kept = std::size_t{1} << 20;
  // Tests: runs on the reading thread before each read of payloads (a read
  // that hangs, as a slow disk's would; payloads read back from RocksDB's
  // memtable touch no file the test's Env could hold).
  std::function<void()> before_payload_read;
  // Tests: runs, under the store's lock (it must not call the store), each
  // time written completions join those waiting for the next sync.
  std::function<void()> on_waiting_sync;
};

// Parses "always", "never" or a duration such as "100ms" (an interval).
Status ParseFsyncPolicy(std::string_view text, RocksOptions* options);

// Opens a RocksStore with `options` for whoever calls it (a scheduler).
StoreOpener RocksStoreOpener(RocksOptions options);

class RocksStore final : public Store {
 public:
  // Opens (creating if missing) the store in `options.dir`. A damaged store
  // fails with a message naming the directory and the problem, and so does
  // one holding less than its mark says it had made durable
  // (rocks_open.cc).
  static Status Open(const RocksOptions& options, StoreHooks hooks,
                     std::unique_ptr<RocksStore>* out);
  ~RocksStore() override;  // Close().

  const std::string& where() const override { return where_; }
  Status LoadNamespaces(std::vector<std::string>* names) override;
  Status LoadCounters(std::uint64_t* next_version,
                      std::uint64_t* next_event_seq) override;
  // With RocksOptions::fixed_event_ids, as recorded the first time (in a
  // new store, or one that held timers already: rocks_open.cc); without,
  // kNoFixedEventIds.
  std::uint64_t FixedEventIdsFrom() const override {
    return fixed_event_ids_from_;
  }
  Status ForEachTimer(
      const std::function<void(const StoredTimer&)>& visit) override;
  Status ForEachEvent(
      const std::function<void(const StoredEvent&)>& visit) override;
  Status ForEachFate(
      const std::function<void(std::uint64_t, const StoredFate&)>& visit)
      override;
  Status LoadPolicies(
      std::vector<std::pair<std::string, std::string>>* policies) override;
  Status ForEachSchedule(
      const std::function<void(NamespaceId, std::string_view,
                               std::string_view)>& visit) override;
  Status ForEachDedup(
      const std::function<void(NamespaceId, std::string_view,
                               std::string_view)>& visit) override;
  std::vector<std::string> OpenNotes() const override;

  void Commit(Batch& batch, Done done) override;
  void Write(Batch& batch, std::function<void()> written,
             Done durable) override;
  // Queues the batch without waking the writer; WriteHere writes it (with
  // whatever else is queued) on the caller's thread unless the writer, or
  // another such thread, is writing a group then, which then takes it.
  void WriteDeferred(Batch& batch, std::function<void()> written,
                     Done durable) override;
  // Under --fsync always, as Commit() (a call's write and its sync both
  // left to the store's threads: written by the calling gRPC thread, under
  // load the groups got smaller and unary SetTimer 4-5 % slower), and
  // false; else as WriteDeferred, and true.
  bool CommitDeferred(Batch& batch, Done done) override;
  void WriteHere() override EXCLUDES(mu_);
  void CommitSynced(Batch& batch, Done done) override;
  Status WriteNow(Batch& batch) override;
  Status Failed() const override;
  void SetExecutor(
      std::function<void(std::function<void()>)> executor) override;
  // On: the writer runs the completions of the groups it finishes (synced
  // or not needing it), the syncer those of the groups it syncs, each while
  // nothing else waits for it (under load, the executor runs them).
  void SetInlineCompletions(bool on) override EXCLUDES(mu_);
  bool Backlogged(std::string* why) const override;
  std::chrono::nanoseconds Busy() const override;
  void Flush(std::function<void()> done) override;
  void Sync() override;
  void Close() override;

  std::shared_ptr<const View> NewView() override;
  Status GetPayloads(std::span<const std::uint64_t> ids,
                     std::vector<std::string>* payloads,
                     std::vector<bool>* readable) override;
  Status GetPayloads(std::span<const std::uint64_t> ids, const View& view,
                     std::vector<std::string>* payloads,
                     std::vector<bool>* readable,
                     std::vector<bool>* gone) override;
  bool ReadCached(std::span<const std::uint64_t> ids,
                  std::vector<std::string>* payloads,
                  std::vector<bool>* readable) override;

  // A RocksDB checkpoint: memtables flushed, files hard-linked where
  // possible. On failure nothing is left in `dir`.
  Status Backup(const std::string& dir) override;
  std::vector<Gauge> Gauges() override;

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
  // every timer's and event's payload (rocks_check.cc).
  void Check(CheckReport* report);

  const RocksOptions& options() const { return options_; }

 private:
  class RocksView;
  RocksStore(RocksOptions options, StoreHooks hooks);

  struct Queued {
    // The batch as RocksDB records (ToRocks), made on the caller's thread so
    // that the writer only writes. Null: a Flush marker.
    std::shared_ptr<const rocksdb::WriteBatch> batch;
    std::function<void()> written;
    Done done;
    bool sync = false;  // Synced whatever the policy.
  };
  // Queues a batch, taking its contents and callbacks, and wakes the writer
  // if `wake_writer`; if the store failed or is closing, runs `done` with
  // the error instead (through the executor).
  void Enqueue(Batch& batch, std::function<void()> written, Done done,
               bool sync, bool wake_writer) EXCLUDES(mu_);
  // Adds `batch`'s changes to `out` as RocksDB records (the layout above).
  // (Shared close_mu_: the column families go at Close.)
  void ToRocks(const Batch& batch, rocksdb::WriteBatch& out) const
      REQUIRES_SHARED(close_mu_);
  // The writer thread: writes queued batches in order, a group at a time,
  // and hands those to be synced to the syncer thread (SyncLoop), which
  // syncs everything written so far in one go.
  void WriterLoop() EXCLUDES(mu_);
  // Writes the whole queue as one group (the writer's, or WriteHere's
  // thread's: whichever holds writing_), then hands it to the syncer or runs
  // its completions.
  void WriteQueue() REQUIRES(mu_);
  void SyncLoop() EXCLUDES(mu_);
  // kAlways: hands the syncer a sync if a write nobody waits for has been
  // unsynced for fsync_interval.
  void SyncUnsyncedIfDue() REQUIRES(mu_);
  // Syncs the log (everything written so far); `completions` wait on it.
  Status SyncLog(std::size_t completions) EXCLUDES(mu_);
  // Runs (or hands to the executor) the completions of a group, without
  // mu_ (held on entry and on return). `idle`: called by the writer or the
  // syncer for a group it finished, with nothing else waiting for that
  // thread (then SetInlineCompletions may run them there; under load they
  // go to the executor, to run beside the next write or sync); false for a
  // batch refused in Commit.
  void RunDone(std::vector<Done> done, const Status& status, bool idle)
      REQUIRES(mu_);
  Status Read(std::span<const std::uint64_t> ids, const RocksView* view,
              std::vector<std::string>* payloads, std::vector<bool>* readable,
              std::vector<bool>* gone);
  // ReadCached, holding close_mu_ shared.
  bool ReadCachedOpen(std::span<const std::uint64_t> ids,
                      std::vector<std::string>* payloads,
                      std::vector<bool>* readable) REQUIRES_SHARED(close_mu_);
  // Payload records by key (holding close_mu_ shared).
  std::vector<rocksdb::Status> MultiGetPayloads(
      const rocksdb::ReadOptions& options,
      const std::vector<rocksdb::Slice>& keys,
      std::vector<std::string>* values);
  // The key of a timer, payload or event record.
  static std::string IdKey(std::uint64_t id);
  // Fate, policy and schedule records (rocks_records.cc).
  static std::string FateKey(std::uint64_t event_id);
  static std::string FateValue(const StoredFate& fate);
  static std::string PolicyKey(std::string_view name);
  static std::string ScheduleKey(NamespaceId ns, std::string_view key);
  static std::string DedupKey(NamespaceId ns, std::string_view key);
  // Visits the meta records of `prefix` keyed by namespace id and key
  // (`what` names them in errors).
  Status ForEachKeyed(char prefix, const char* what,
                      const std::function<void(NamespaceId, std::string_view,
                                               std::string_view)>& visit);
  // Writes one group as one RocksDB write.
  rocksdb::Status WriteGroup(const std::vector<Queued>& group);
  // Every kMarkInterval, records in the mark how much is durable, if that
  // changed (rocks_mark.h); once a check finds nothing changed, sleeps
  // until the writer writes again (or kMarkIdleInterval passes).
  void MarkLoop() EXCLUDES(mu_);
  // Writes the mark if it changed; `changed` (if given) says whether it did.
  Status UpdateMark(bool* changed = nullptr);
  // After a salvage: names the timers and events that the copied
  // directory's log, read past its damage, holds and this store does not.
  std::string NameDropped();
  // Checks the format record and writes this format's (an upgrade, or a
  // new store); refuses a newer one (rocks_format.h).
  Status RecordFormat(bool existed);
  // With fixed_event_ids: reads FixedEventIdsFrom()'s record, or makes it
  // (synced; read-only: only computed): 0 for a store whose counters handed
  // out nothing yet, else past every number they did, with room for more.
  Status RecordFixedEventIds(bool existed);
  // Writes `batch` and syncs it before returning; `what` names it in an
  // error.
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
    explicit DiskOp(RocksStore& store);
    ~DiskOp();
    DiskOp(const DiskOp&) = delete;
    DiskOp& operator=(const DiskOp&) = delete;

   private:
    RocksStore& store_;
    std::multiset<std::chrono::steady_clock::time_point>::iterator at_;
  };

  const RocksOptions options_;
  const StoreHooks hooks_;
  const std::string where_;
  std::string salvage_copy_;
  std::string salvage_dropped_;
  // What the format check did at open, if anything (rocks_format.h).
  std::string format_note_;
  std::uint64_t fixed_event_ids_from_ = kNoFixedEventIds;  // Set at open.
  // Read-only: what the mark says the store lost (reported by Check()).
  std::vector<std::string> mark_problems_;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;
  rocksdb::ColumnFamilyHandle* timers_ = nullptr;
  rocksdb::ColumnFamilyHandle* payloads_ = nullptr;
  rocksdb::ColumnFamilyHandle* events_ = nullptr;

  // Shared by every use of db_, exclusive for closing.
  SharedMutex close_mu_ ACQUIRED_BEFORE(mu_);
  bool closed_ GUARDED_BY(close_mu_) = false;

  Mutex mu_;
  CondVar cv_;       // The writer waits for work.
  CondVar idle_cv_;  // Sync() waits for the queue to be done.
  CondVar sync_cv_;  // The syncer waits for work.
  CondVar mark_cv_;  // The marker waits out its interval.
  // The marker sleeps until a write (the writer wakes it, and clears this).
  bool mark_asleep_ GUARDED_BY(mu_) = false;
  // Batches not yet written, in order (the writer's group is kept at the
  // front, for views, until it is written).
  std::deque<Queued> queue_ GUARDED_BY(mu_);
  // The state of each live view (rocks_read.cc), and the ids of payloads
  // deleted by groups the writer took while any view lived (appended before
  // the group is written, so a deletion RocksDB shows is always here), from
  // position deletes_base_ on. Kept back to the oldest view's start, and at
  // most options_.max_deletes_kept.
  struct ViewState;
  std::vector<ViewState*> views_ GUARDED_BY(mu_);
  std::deque<std::uint64_t> deletes_ GUARDED_BY(mu_);
  std::uint64_t deletes_base_ GUARDED_BY(mu_) = 0;
  // Drops what no view needs from deletes_.
  void TrimDeletes() REQUIRES(mu_);
  // Marks in `deleted` (by the index `missing` maps each id to) the
  // payloads deleted since `view` was taken, as deletes_ tells; all of
  // them if it no longer can.
  void FindDeletedSince(
      const ViewState& view,
      const std::unordered_map<std::uint64_t, std::size_t>& missing,
      std::vector<bool>& deleted) EXCLUDES(mu_);
  std::function<void(std::function<void()>)> executor_ GUARDED_BY(mu_);
  bool inline_completions_ GUARDED_BY(mu_) = false;
  // Groups of completions handed to the executor and not yet run.
  std::atomic<int> handed_{0};
  // The most completions of one group the writer or syncer runs itself.
  static constexpr std::size_t kInlineCompletions = 4;
  // Completions enough for a sync to start without gathering
  // (RocksOptions::sync_gather).
  static constexpr std::size_t kGatherEnough = 8;
  // The most queued batches, and bytes, WriteHere writes itself.
  static constexpr std::size_t kWriteHereBatches = 4;
  static constexpr std::size_t kWriteHereBytes = 16 << 10;
  Mutex completing_mu_;
  std::atomic<std::size_t> queued_bytes_{0};
  // A thread (the writer, or one in WriteHere) holds a group: groups are
  // written one at a time.
  bool writing_ GUARDED_BY(mu_) = false;
  // Queued batches left for a WriteHere caller (WriteDeferred,
  // CommitDeferred) since a group last took the queue: WriteHere writes
  // only while there is one, so that it never takes a group that the
  // writer was woken for.
  std::size_t deferred_ GUARDED_BY(mu_) = 0;
  bool writer_done_ GUARDED_BY(mu_) = false;
  // Completions of written groups, for the syncer's next sync.
  std::vector<Done> waiting_ GUARDED_BY(mu_);
  bool syncing_ GUARDED_BY(mu_) = false;
  // Something in waiting_ needs a sync (not only the writer's order).
  bool sync_pending_ GUARDED_BY(mu_) = false;
  // Completions being run or handed over.
  int running_ GUARDED_BY(mu_) = 0;
  // Written since the last sync (interval policy, where the writer wakes
  // the syncer when it becomes true; under kAlways, writes nobody waits
  // for), and since when (kAlways: the writer hands the syncer a sync once
  // fsync_interval has passed).
  bool unsynced_ GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point unsynced_since_ GUARDED_BY(mu_);
  bool closing_ GUARDED_BY(mu_) = false;
  std::thread writer_;
  std::thread syncer_;
  std::thread marker_;
  std::atomic<std::uint64_t> durable_seq_{0};
  // The mark last written: by Open, then the marker thread, then Close.
  StoreMark mark_;
  std::atomic<bool> failed_{false};
  // When each running DiskOp started.
  mutable Mutex disk_ops_mu_;
  std::multiset<std::chrono::steady_clock::time_point> disk_ops_
      GUARDED_BY(disk_ops_mu_);
};

}  // namespace delayd

#endif  // DELAYD_SERVER_STORE_ROCKSDB_ROCKS_STORE_H_
