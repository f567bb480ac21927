// The store's write queue, its writer thread and its syncer
// (rocks_store.h, "Writes").
#include "server/store/rocksdb/rocks_store.h"

namespace delayd {
namespace {

// Appends the ids of the payloads a batch deletes.
void NoteDeletes(const Batch& batch, std::deque<std::uint64_t>& out) {
  Batch::Reader reader(batch);
  Batch::Change c;
  while (reader.Next(&c)) {
    if (c.kind == Batch::Kind::kRemoveTimer ||
        c.kind == Batch::Kind::kRemoveEvent) {
      out.push_back(c.payload_id);
    }
  }
}

}  // namespace

void RocksStore::Enqueue(Batch& batch, std::function<void()> written, Done done,
                         bool sync) {
  Status refused = Failed();
  {
    MutexLock lock(&mu_);
    if (refused.ok() && closing_) {
      refused = Status::Unavailable(where_ + " is closed");
    }
    if (refused.ok()) {
      auto shared = std::make_shared<const Batch>(std::move(batch));
      queued_bytes_.fetch_add(shared->bytes(), std::memory_order_relaxed);
      queue_.push_back(
          Queued{std::move(shared), std::move(written), std::move(done), sync});
    } else if (done) {
      // Not written: its completion, like any, through the executor.
      std::vector<Done> one;
      one.push_back(std::move(done));
      RunDone(std::move(one), refused);
    }
  }
  batch.Clear();
  if (refused.ok()) cv_.Signal();
}

void RocksStore::Commit(Batch& batch, Done done) {
  Enqueue(batch, nullptr, std::move(done), false);
}

void RocksStore::Write(Batch& batch, std::function<void()> written,
                       Done durable) {
  Enqueue(batch, std::move(written), std::move(durable), false);
}

void RocksStore::CommitSynced(Batch& batch, Done done) {
  Enqueue(batch, nullptr, std::move(done), true);
}

void RocksStore::SetExecutor(
    std::function<void(std::function<void()>)> executor) {
  MutexLock lock(&mu_);
  executor_ = std::move(executor);
}

rocksdb::Status RocksStore::WriteGroup(const std::vector<Queued>& group) {
  // The whole group is one RocksDB write: one log append.
  rocksdb::WriteBatch rocks;
  for (const Queued& q : group) {
    if (q.batch) ToRocks(*q.batch, rocks);
  }
  if (rocks.Count() == 0) return rocksdb::Status::OK();
  DiskOp op(*this);
  return db_->Write(rocksdb::WriteOptions(), &rocks);
}

void RocksStore::WriterLoop() {
  MutexLock lock(&mu_);
  for (;;) {
    while (queue_.empty() && !closing_) cv_.Wait(&mu_);
    if (queue_.empty()) break;  // Closing, and everything written.
    // The whole queue is one group: what arrives while it is written waits
    // for the next one, and no longer.
    std::vector<Queued> group;
    group.reserve(queue_.size());
    bool sync = false;
    for (Queued& q : queue_) {
      group.push_back(
          Queued{q.batch, std::move(q.written), std::move(q.done), q.sync});
      sync = sync || q.sync ||
             (options_.fsync == FsyncPolicy::kAlways && q.batch != nullptr &&
              !q.batch->empty());
    }
    writing_ = true;
    if (!views_.empty()) {
      // Views learn of the group's deletes before it is written (see Read).
      // They are found without mu_: a view taken meanwhile has the group
      // among its queued batches anyway.
      std::deque<std::uint64_t> deleted;
      {
        MutexUnlock unlock(&mu_);
        for (const Queued& q : group) {
          if (q.batch) NoteDeletes(*q.batch, deleted);
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
      if (queue_.front().batch) bytes += queue_.front().batch->bytes();
      queue_.pop_front();
    }
    queued_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    writing_ = false;
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
      sync_cv_.Signal();
    } else {
      if (status.ok()) unsynced_ = true;
      RunDone(std::move(done), status);
    }
    idle_cv_.SignalAll();
  }
  writer_done_ = true;
  sync_cv_.Signal();
}

void RocksStore::RunDone(std::vector<Done> done, const Status& status) {
  if (done.empty()) return;
  const auto executor = executor_;
  ++running_;
  {
    MutexUnlock unlock(&mu_);
    auto run = [done = std::move(done), status]() mutable {
      for (auto& d : done) d(status);
    };
    if (executor) {
      executor(std::move(run));
    } else {
      run();
    }
  }
  --running_;
  idle_cv_.SignalAll();
}

void RocksStore::SyncLoop() {
  using Clock = std::chrono::steady_clock;
  MutexLock lock(&mu_);
  auto last_sync = Clock::now();
  for (;;) {
    if (options_.fsync == FsyncPolicy::kInterval) {
      while (waiting_.empty() && !writer_done_ &&
             sync_cv_.WaitUntil(&mu_, last_sync + options_.fsync_interval)) {
      }
    } else {
      while (waiting_.empty() && !writer_done_) sync_cv_.Wait(&mu_);
    }
    if (writer_done_ && waiting_.empty()) break;
    const bool due = options_.fsync == FsyncPolicy::kInterval &&
                     Clock::now() >= last_sync + options_.fsync_interval;
    const bool needed = sync_pending_ || (due && unsynced_);
    if (waiting_.empty() && !needed) continue;
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
    if (needed) last_sync = Clock::now();
    syncing_ = false;
    RunDone(std::move(group), status);
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
