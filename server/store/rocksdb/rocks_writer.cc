// The store's write queue, its writer thread and its syncer
// (rocks_store.h, "Writes").
#include <unordered_map>

#include "server/common/record_codec.h"
#include "server/store/rocksdb/rocks_store.h"

namespace delayd {
namespace {

// Copies the records of several batches into one, so that a group costs one
// RocksDB write (one log append) instead of one per batch. (RocksDB merges
// batches only inside its own write path, for writers that wait in it
// together; the one that does so is not public in RocksDB 7.8.)
class Merge : public rocksdb::WriteBatch::Handler {
 public:
  Merge(rocksdb::WriteBatch* into,
        const std::unordered_map<std::uint32_t, rocksdb::ColumnFamilyHandle*>&
            families)
      : into_(into), families_(families) {}
  rocksdb::Status PutCF(std::uint32_t cf, const rocksdb::Slice& key,
                        const rocksdb::Slice& value) override {
    return into_->Put(families_.at(cf), key, value);
  }
  rocksdb::Status DeleteCF(std::uint32_t cf,
                           const rocksdb::Slice& key) override {
    return into_->Delete(families_.at(cf), key);
  }

 private:
  rocksdb::WriteBatch* into_;
  const std::unordered_map<std::uint32_t, rocksdb::ColumnFamilyHandle*>&
      families_;
};

// Appends the ids of the payloads a batch deletes.
class NoteDeletes : public rocksdb::WriteBatch::Handler {
 public:
  NoteDeletes(std::uint32_t family, std::deque<std::uint64_t>& out)
      : family_(family), out_(out) {}
  rocksdb::Status PutCF(std::uint32_t, const rocksdb::Slice&,
                        const rocksdb::Slice&) override {
    return rocksdb::Status::OK();
  }
  rocksdb::Status DeleteCF(std::uint32_t cf,
                           const rocksdb::Slice& key) override {
    // (Payload keys are the 8-byte big-endian ids of IdKey.)
    if (cf == family_ && key.size() == 8) {
      out_.push_back(record::ReadBE(key.data(), 8));
    }
    return rocksdb::Status::OK();
  }

 private:
  const std::uint32_t family_;
  std::deque<std::uint64_t>& out_;
};

}  // namespace

void RocksStore::Enqueue(Batch& batch, std::function<void()> written, Done done,
                         bool sync, bool wake_writer) {
  Status refused = Failed();
  // Turned into RocksDB's records here, outside mu_: the writer only
  // writes (converting a firing of thousands of timers on the writer made
  // durable firing 10 % slower).
  std::shared_ptr<rocksdb::WriteBatch> rocks;
  if (refused.ok()) {
    ReaderLock lock(&close_mu_);
    if (closed_) {
      refused = Status::Unavailable(where_ + " is closed");
    } else {
      rocks = std::make_shared<rocksdb::WriteBatch>();
      ToRocks(batch, *rocks);
    }
  }
  {
    MutexLock lock(&mu_);
    if (refused.ok() && closing_) {
      refused = Status::Unavailable(where_ + " is closed");
    }
    if (refused.ok()) {
      queued_bytes_.fetch_add(rocks->GetDataSize(), std::memory_order_relaxed);
      queue_.push_back(
          Queued{std::move(rocks), std::move(written), std::move(done), sync});
      if (!wake_writer) ++deferred_;
    } else if (done) {
      // Not written: its completion through the executor (this thread may
      // hold its caller's lock).
      std::vector<Done> one;
      one.push_back(std::move(done));
      RunDone(std::move(one), refused, /*idle=*/false);
    }
  }
  batch.Clear();
  if (refused.ok() && wake_writer) cv_.Signal();
}

void RocksStore::Commit(Batch& batch, Done done) {
  Enqueue(batch, nullptr, std::move(done), false, true);
}

void RocksStore::Write(Batch& batch, std::function<void()> written,
                       Done durable) {
  Enqueue(batch, std::move(written), std::move(durable), false, true);
}

void RocksStore::CommitSynced(Batch& batch, Done done) {
  Enqueue(batch, nullptr, std::move(done), true, true);
}

void RocksStore::SetExecutor(
    std::function<void(std::function<void()>)> executor) {
  MutexLock lock(&mu_);
  executor_ = std::move(executor);
}

void RocksStore::SetInlineCompletions(bool on) {
  MutexLock lock(&mu_);
  inline_completions_ = on;
}

rocksdb::Status RocksStore::WriteGroup(const std::vector<Queued>& group) {
  // The whole group is one RocksDB write: one log append.
  rocksdb::WriteOptions wo;
  std::vector<const rocksdb::WriteBatch*> batches;
  for (const Queued& q : group) {
    if (q.batch && q.batch->Count() > 0) batches.push_back(q.batch.get());
  }
  if (batches.empty()) return rocksdb::Status::OK();
  DiskOp op(*this);
  if (batches.size() == 1) {
    return db_->Write(wo, const_cast<rocksdb::WriteBatch*>(batches[0]));
  }
  std::unordered_map<std::uint32_t, rocksdb::ColumnFamilyHandle*> families;
  for (auto* h : handles_) families[h->GetID()] = h;
  rocksdb::WriteBatch merged;
  Merge merge(&merged, families);
  for (const auto* b : batches) {
    if (rocksdb::Status s = b->Iterate(&merge); !s.ok()) return s;
  }
  return db_->Write(wo, &merged);
}

void RocksStore::WriterLoop() {
  MutexLock lock(&mu_);
  for (;;) {
    // (While another thread writes a group, WriteHere, the writer waits:
    // groups are written one at a time, in order.)
    while (writing_ || (queue_.empty() && !closing_)) {
      if (writing_ || !unsynced_ || options_.fsync != FsyncPolicy::kAlways) {
        cv_.Wait(&mu_);
      } else if (!cv_.WaitUntil(&mu_,
                                unsynced_since_ + options_.fsync_interval)) {
        SyncUnsyncedIfDue();
      }
    }
    if (queue_.empty()) break;  // Closing, and everything written.
    WriteQueue();
  }
  writer_done_ = true;
  sync_cv_.Signal();
}

void RocksStore::WriteDeferred(Batch& batch, std::function<void()> written,
                               Done durable) {
  Enqueue(batch, std::move(written), std::move(durable), false,
          /*wake_writer=*/false);
}

bool RocksStore::CommitDeferred(Batch& batch, Done done) {
  const bool deferred = options_.fsync != FsyncPolicy::kAlways;
  Enqueue(batch, nullptr, std::move(done), false, /*wake_writer=*/!deferred);
  return deferred;
}

void RocksStore::WriteHere() {
  MutexLock lock(&mu_);
  // Only a small queue: a burst's firings are written by the writer while
  // the caller's thread goes on firing (written here, firing throughput
  // measured 2-6 % lower).
  if (!writing_ && !closing_ && deferred_ > 0 &&
      queue_.size() <= kWriteHereBatches &&
      queued_bytes_.load(std::memory_order_relaxed) <= kWriteHereBytes) {
    WriteQueue();
  }
  // What came meanwhile, or closing: the writer's (it may be waiting for
  // this thread's group, or have slept through a deferred batch).
  if (!writing_ && (!queue_.empty() || closing_)) cv_.Signal();
}

void RocksStore::WriteQueue() {
  // The whole queue is one group: what arrives while it is written waits
  // for the next one, and no longer.
  std::vector<Queued> group;
  group.reserve(queue_.size());
  deferred_ = 0;
  bool sync = false;
  bool writes = false;  // Some batch is not empty.
  for (Queued& q : queue_) {
    const bool written = q.batch != nullptr && q.batch->Count() > 0;
    writes = writes || written;
    // Under kAlways, a write someone waits for (its `done`) is synced
    // before that runs; one nobody waits for (a firing whose timers were
    // set durably, a dedup fate) is synced with the next that is, or
    // once fsync_interval passes (above): until then a loss of the
    // machine undoes it, and with it nothing written after it.
    sync = sync || q.sync ||
           (options_.fsync == FsyncPolicy::kAlways && written && q.done);
    group.push_back(
        Queued{q.batch, std::move(q.written), std::move(q.done), q.sync});
  }
  writing_ = true;
  if (!views_.empty()) {
    // Views learn of the group's deletes before it is written (see Read).
    // They are found without mu_: a view taken meanwhile has the group
    // among its queued batches anyway.
    std::deque<std::uint64_t> deleted;
    {
      MutexUnlock unlock(&mu_);
      NoteDeletes deletes(payloads_->GetID(), deleted);
      for (const Queued& q : group) {
        if (q.batch) q.batch->Iterate(&deletes);
      }
    }
    if (!views_.empty()) {
      deletes_.insert(deletes_.end(), deleted.begin(), deleted.end());
      if (deletes_.size() > options_.max_deletes_kept) TrimDeletes();
    }
  }

  Status status;
  {
    MutexUnlock unlock(&mu_);
    status = Failed();
    if (status.ok()) {
      if (rocksdb::Status s = WriteGroup(group); !s.ok()) {
        status = Error("write", s);
        NoteWriteError(status);
      }
    }
    if (status.ok()) {
      for (Queued& q : group) {
        if (q.written) q.written();
      }
    }
  }

  std::size_t bytes = 0;
  for (std::size_t i = 0; i < group.size(); ++i) {
    if (queue_.front().batch) {
      bytes += queue_.front().batch->GetDataSize();
    }
    queue_.pop_front();
  }
  queued_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  writing_ = false;
  if (mark_asleep_) {  // (What it wrote may change the mark.)
    mark_asleep_ = false;
    mark_cv_.Signal();
  }
  std::vector<Done> done;
  for (Queued& q : group) {
    if (q.done) done.push_back(std::move(q.done));
  }
  if (status.ok() && sync) {
    // The syncer syncs it (with whatever else is written by then) while
    // this thread writes the next group.
    waiting_.insert(waiting_.end(), std::make_move_iterator(done.begin()),
                    std::make_move_iterator(done.end()));
    sync_pending_ = true;
    if (options_.on_waiting_sync) options_.on_waiting_sync();
    sync_cv_.Signal();
  } else {
    if (status.ok() && writes && !unsynced_) {
      unsynced_ = true;
      unsynced_since_ = std::chrono::steady_clock::now();
      // (Under an interval the syncer sleeps until there is something
      // to sync.)
      if (options_.fsync == FsyncPolicy::kInterval) sync_cv_.Signal();
    }
    RunDone(std::move(done), status, /*idle=*/queue_.empty());
    SyncUnsyncedIfDue();  // (Writes that never stop need it too.)
  }
  idle_cv_.SignalAll();
}

void RocksStore::SyncUnsyncedIfDue() {
  if (options_.fsync != FsyncPolicy::kAlways || !unsynced_ ||
      std::chrono::steady_clock::now() <
          unsynced_since_ + options_.fsync_interval) {
    return;
  }
  // The syncer syncs it, and everything else written so far.
  unsynced_ = false;
  sync_pending_ = true;
  sync_cv_.Signal();
}

void RocksStore::RunDone(std::vector<Done> done, const Status& status,
                         bool idle) {
  if (done.empty()) return;
  // Here only for a few (many are a burst's: they run beside the next
  // write or sync instead), and while none handed over earlier waits:
  // completions run in the order the store finished them either way.
  const bool here = idle && inline_completions_ &&
                    done.size() <= kInlineCompletions &&
                    handed_.load(std::memory_order_acquire) == 0;
  auto executor = here ? nullptr : executor_;
  if (executor) handed_.fetch_add(1, std::memory_order_relaxed);
  ++running_;
  {
    MutexUnlock unlock(&mu_);
    auto run = [done = std::move(done), status]() mutable {
      for (auto& d : done) d(status);
    };
    if (executor) {
      executor([this, run = std::move(run)]() mutable {
        MutexLock one_group(&completing_mu_);
        run();
        handed_.fetch_sub(1, std::memory_order_release);
      });
    } else if (here) {
      MutexLock one_group(&completing_mu_);
      run();
    } else {
      run();  // (Recovery: no executor yet.)
    }
  }
  --running_;
  idle_cv_.SignalAll();
}

void RocksStore::SyncLoop() {
  using Clock = std::chrono::steady_clock;
  MutexLock lock(&mu_);
  auto last_sync = Clock::now();
  // Whether completions came while the last sync ran: callers that do not
  // wait for one another (a caller that waits for each answer never does).
  bool overlapped = false;
  for (;;) {
    if (options_.fsync == FsyncPolicy::kInterval) {
      // Until the interval since the last sync passes with something
      // written since; with nothing written, until a write (the writer
      // signals the first) rather than once an interval: an idle store
      // sleeps.
      while (waiting_.empty() && !sync_pending_ && !writer_done_) {
        if (!unsynced_) {
          sync_cv_.Wait(&mu_);
        } else if (!sync_cv_.WaitUntil(&mu_,
                                       last_sync + options_.fsync_interval)) {
          break;  // Due.
        }
      }
    } else {
      while (waiting_.empty() && !sync_pending_ && !writer_done_) {
        sync_cv_.Wait(&mu_);
      }
    }
    if (writer_done_ && waiting_.empty()) break;
    const bool due = options_.fsync == FsyncPolicy::kInterval &&
                     Clock::now() >= last_sync + options_.fsync_interval;
    const bool needed = sync_pending_ || (due && unsynced_);
    if (waiting_.empty() && !needed) continue;
    if (needed && overlapped && options_.fsync == FsyncPolicy::kAlways &&
        waiting_.size() < kGatherEnough && !writer_done_) {
      // A sync soon after the last one gathers what comes meanwhile
      // (RocksOptions::sync_gather; zero: none).
      const auto start = last_sync + options_.sync_gather;
      if (Clock::now() < start) {
        MutexUnlock unlock(&mu_);
        std::this_thread::sleep_until(start);
      }
    }
    std::vector<Done> group;
    group.swap(waiting_);
    unsynced_ = false;
    sync_pending_ = false;
    syncing_ = true;
    Status status;
    {
      MutexUnlock unlock(&mu_);
      status = Failed();
      if (status.ok() && needed) status = SyncLog(group.size());
    }
    if (needed) {
      last_sync = Clock::now();
      overlapped = !waiting_.empty();
    }
    syncing_ = false;
    RunDone(std::move(group), status,
            /*idle=*/waiting_.empty() && !sync_pending_);
    idle_cv_.SignalAll();
  }
}

Status RocksStore::SyncLog(std::size_t completions) {
  using Clock = std::chrono::steady_clock;
  // Everything written so far is in the log: the sync covers it.
  const std::uint64_t sequence = db_->GetLatestSequenceNumber();
  const auto started = Clock::now();
  const rocksdb::Status s = [&] {
    DiskOp op(*this);
    return db_->SyncWAL();
  }();
  if (hooks_.metrics != nullptr) {
    hooks_.metrics->wal_sync().Observe(
        std::chrono::duration<double>(Clock::now() - started).count());
    if (completions > 0) {
      hooks_.metrics->wal_sync_group().Observe(
          static_cast<double>(completions));
    }
  }
  if (!s.ok()) {
    Status status = Error("WAL sync", s);
    NoteWriteError(status);
    return status;
  }
  NoteDurable(sequence);
  return Status::Ok();
}

void RocksStore::Flush(std::function<void()> done) {
  {
    MutexLock lock(&mu_);
    if (!closing_) {
      queue_.push_back(Queued{nullptr, nullptr,
                              [done = std::move(done)](Status) { done(); },
                              true});
      cv_.Signal();
      return;
    }
  }
  done();  // Closed: everything queued before is written and synced.
}

void RocksStore::Sync() {
  {
    MutexLock lock(&mu_);
    while (!queue_.empty() || writing_ || !waiting_.empty() || syncing_ ||
           running_ != 0) {
      idle_cv_.Wait(&mu_);
    }
  }
  ReaderLock lock(&close_mu_);
  if (closed_ || failed_) return;
  const std::uint64_t sequence = db_->GetLatestSequenceNumber();
  if (db_->SyncWAL().ok()) NoteDurable(sequence);
}

}  // namespace delayd
