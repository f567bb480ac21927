// A store in memory, for the core's unit tests: the contract of store.h
// (batches written in order, completions through the executor, reads
// through views) with what "the disk" does in the test's hands.
//
// What it holds lives in a Disk shared by every store opened on it, so a
// test can stop a scheduler and start another on the same Disk (a restart),
// hold the writer (a stalled disk) and fail writes (a failing one).
//
// Thread safety: every method may be called from any thread; mu_ guards
// everything but the Disk, which has its own mutex.
#ifndef DELAYD_SERVER_STORE_MEMORY_MEMORY_STORE_H_
#define DELAYD_SERVER_STORE_MEMORY_MEMORY_STORE_H_

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/common/mutex.h"
#include "server/store/store.h"

namespace delayd {

class MemoryStore final : public Store {
 public:
  // What survives a restart, with the test's hands on it.
  class Disk {
   public:
    // While held, nothing queued is written (a stalled disk).
    void Hold() EXCLUDES(mu_);
    void Release() EXCLUDES(mu_);
    // Every write from now on fails with `error` (OK: none does).
    void FailWrites(Status error) EXCLUDES(mu_);
    // How many of each record it holds.
    std::size_t timers() const EXCLUDES(mu_);
    std::size_t events() const EXCLUDES(mu_);
    std::size_t fates() const EXCLUDES(mu_);
    // The fate of event `id`, if stored.
    std::optional<StoredFate> FateOf(std::uint64_t id) const EXCLUDES(mu_);
    // Makes stores opened from now on share `n` partitions
    // (Store::SharedPartitions); the disk then checks each change's
    // partition against what its batch says it touches.
    void SharePartitions(std::uint32_t n) EXCLUDES(mu_);
    std::uint32_t shared_partitions() const EXCLUDES(mu_);
    // What stores opened from now on give as FixedEventIdsFrom()
    // (kNoFixedEventIds unless set).
    void FixEventIdsFrom(std::uint64_t seq) EXCLUDES(mu_);
    std::uint64_t fixed_event_ids_from() const EXCLUDES(mu_);
    // Changes written of a partition their batch did not name, and of one
    // it named.
    std::uint64_t untouched() const EXCLUDES(mu_);
    std::uint64_t touched() const EXCLUDES(mu_);

   private:
    friend class MemoryStore;
    struct Timer {
      NamespaceId ns;
      std::string key;
      WallNanos fire_time;
      std::uint64_t version;
    };
    struct EventRecord {
      StoredEvent event;
      std::string key;
    };
    struct Fate {
      std::uint32_t attempts;
      bool dead;
      std::string error;
      WallNanos retry_at;
    };
    void Apply(const Batch& batch) REQUIRES(mu_);
    // Counts a change of `ns`'s `key` in touched_ or untouched_.
    void Check(const Batch& batch, NamespaceId ns, std::string_view key)
        REQUIRES(mu_);
    void Check(const Batch& batch, std::uint32_t partition) REQUIRES(mu_);
    // Checks change `c` of `batch` (before it is applied).
    void CheckPartition(const Batch& batch, const Batch::Change& c)
        REQUIRES(mu_);

    mutable Mutex mu_;
    CondVar released_;
    bool held_ GUARDED_BY(mu_) = false;
    Status fail_ GUARDED_BY(mu_);
    std::map<std::uint64_t, Timer> timers_ GUARDED_BY(mu_);
    std::map<std::uint64_t, std::string> payloads_ GUARDED_BY(mu_);
    std::map<std::uint64_t, EventRecord> events_ GUARDED_BY(mu_);
    std::map<std::uint64_t, Fate> fates_ GUARDED_BY(mu_);
    std::vector<std::string> namespaces_ GUARDED_BY(mu_);
    std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> counters_
        GUARDED_BY(mu_);
    std::map<std::string, std::string> policies_ GUARDED_BY(mu_);
    std::map<std::pair<NamespaceId, std::string>, std::string> schedules_
        GUARDED_BY(mu_);
    std::map<std::pair<NamespaceId, std::string>, std::string> dedup_
        GUARDED_BY(mu_);
    std::uint32_t shared_ GUARDED_BY(mu_) = 0;
    std::uint64_t fixed_ids_from_ GUARDED_BY(mu_) = Store::kNoFixedEventIds;
    std::uint64_t touched_ GUARDED_BY(mu_) = 0;
    std::uint64_t untouched_ GUARDED_BY(mu_) = 0;
  };

  // Opens a store on `disk` for whoever calls the opener (a scheduler).
  static StoreOpener Opener(std::shared_ptr<Disk> disk);
  MemoryStore(std::shared_ptr<Disk> disk, StoreHooks hooks);
  ~MemoryStore() override;  // Close().

  const std::string& where() const override { return where_; }
  // As the disk's when the store was opened. Shared, a batch touching a
  // partition not held (SetHeld) is refused, as the PostgreSQL store's
  // fence would.
  std::uint32_t SharedPartitions() const override { return shared_; }
  std::uint64_t FixedEventIdsFrom() const override { return fixed_ids_from_; }
  void SetHeld(const Held& held) override EXCLUDES(mu_);
  Status LoadPartition(std::uint32_t part, std::uint64_t* version_limit,
                       std::uint64_t* event_seq_limit,
                       const PartitionVisitor& visit) override;
  Status LoadNamespaces(std::vector<std::string>* names) override;
  Status LoadCounters(std::uint64_t* next_version,
                      std::uint64_t* next_event_seq) override;
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

  void Commit(Batch& batch, Done done) override;
  void Write(Batch& batch, std::function<void()> written,
             Done durable) override;
  void CommitSynced(Batch& batch, Done done) override;
  Status WriteNow(Batch& batch) override;
  Status Failed() const override;
  void SetExecutor(
      std::function<void(std::function<void()>)> executor) override;
  // On: the writer thread runs each batch's completion itself.
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
  Status Backup(const std::string& dir) override;

 private:
  class MemoryView;
  struct Queued {
    std::shared_ptr<const Batch> batch;
    std::function<void()> written;
    Done done;
  };
  void Enqueue(Batch& batch, std::function<void()> written, Done done)
      EXCLUDES(mu_);
  void WriterLoop() EXCLUDES(mu_);

  const std::shared_ptr<Disk> disk_;
  const StoreHooks hooks_;
  const std::string where_ = "memory store";
  const std::uint32_t shared_;
  const std::uint64_t fixed_ids_from_;
  mutable Mutex mu_;
  Held held_ GUARDED_BY(mu_);
  CondVar cv_;
  CondVar idle_;
  std::deque<Queued> queue_ GUARDED_BY(mu_);
  bool writing_ GUARDED_BY(mu_) = false;
  // The writer runs a batch's completions (Sync waits for them too).
  bool completing_ GUARDED_BY(mu_) = false;
  bool closing_ GUARDED_BY(mu_) = false;
  bool failed_ GUARDED_BY(mu_) = false;
  std::function<void(std::function<void()>)> executor_ GUARDED_BY(mu_);
  bool inline_completions_ GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point busy_since_ GUARDED_BY(mu_);
  std::thread writer_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_STORE_MEMORY_MEMORY_STORE_H_
