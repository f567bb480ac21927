// The store's write queue, its writer thread and its syncer (store.h,
// "Writes").
#include <unordered_map>

#include "server/common/record_codec.h"
#include "server/store/store.h"

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
    // (Payload keys are the 8-byte big-endian ids of Store::IdKey.)
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

Status Store::Enqueue(rocksdb::WriteBatch& batch,
                      std::function<void()>& written,
                      std::function<void(Status)>& done, bool sync) {
  if (Status failed = Failed(); !failed.ok()) return failed;
  std::unique_lock lock(mu_);
  if (closing_) return Status::Unavailable("the store is closed");
  auto shared = std::make_shared<const rocksdb::WriteBatch>(std::move(batch));
  queued_bytes_.fetch_add(shared->GetDataSize(), std::memory_order_relaxed);
  queue_.push_back(
      Queued{std::move(shared), std::move(written), std::move(done), sync});
  lock.unlock();
  cv_.notify_one();
  return Status::Ok();
}

void Store::Commit(Batch& batch, std::function<void(Status)> done) {
  if (batch.empty()) {
    done(Status::Ok());
    return;
  }
  std::function<void()> written;
  if (Status s = Enqueue(batch.batch_, written, done, false); !s.ok()) {
    done(std::move(s));
  }
}

Status Store::Write(Batch& batch, std::function<void()> written,
                    std::function<void(Status)> durable) {
  if (batch.empty()) {
    if (written) written();
    durable(Status::Ok());
    return Status::Ok();
  }
  return Enqueue(batch.batch_, written, durable, false);
}

void Store::ReserveIdsLater(std::uint32_t partition,
                            std::uint64_t version_limit,
                            std::uint64_t event_seq_limit,
                            std::function<void(Status)> done) {
  Batch batch(*this);
  batch.PutCounters(partition, version_limit, event_seq_limit);
  std::function<void()> written;
  if (Status s = Enqueue(batch.batch_, written, done, true); !s.ok()) {
    done(std::move(s));
  }
}

rocksdb::Status Store::WriteGroup(const std::vector<Queued>& group) {
  rocksdb::WriteOptions wo;
  std::vector<const rocksdb::WriteBatch*> batches;
  for (const Queued& q : group) {
    if (q.batch) batches.push_back(q.batch.get());
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

void Store::WriterLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
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
             (options_.fsync == FsyncPolicy::kAlways && q.batch != nullptr);
    }
    writing_ = true;
    const bool viewed = !views_.empty();
    lock.unlock();
    if (viewed) {
      // Views learn of the group's deletes before it is written (see Read).
      // They are found without mu_: a view taken meanwhile has the group
      // among its queued batches anyway.
      std::deque<std::uint64_t> deleted;
      NoteDeletes deletes(payloads_->GetID(), deleted);
      for (const Queued& q : group) {
        if (q.batch) q.batch->Iterate(&deletes);
      }
      lock.lock();
      if (!views_.empty()) {
        deletes_.insert(deletes_.end(), deleted.begin(), deleted.end());
        if (deletes_.size() > options_.max_deletes_kept) TrimDeletes();
      }
      lock.unlock();
    }

    Status status = Failed();
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

    lock.lock();
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < group.size(); ++i) {
      if (queue_.front().batch) bytes += queue_.front().batch->GetDataSize();
      queue_.pop_front();
    }
    queued_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    writing_ = false;
    std::vector<std::function<void(Status)>> done;
    for (Queued& q : group) {
      if (q.done) done.push_back(std::move(q.done));
    }
    if (status.ok() && sync) {
      // The syncer syncs it (with whatever else is written by then) while
      // this thread writes the next group.
      waiting_.insert(waiting_.end(), std::make_move_iterator(done.begin()),
                      std::make_move_iterator(done.end()));
      sync_cv_.notify_one();
    } else {
      if (status.ok()) unsynced_ = true;
      RunDone(lock, std::move(done), status);
    }
    idle_cv_.notify_all();
  }
  writer_done_ = true;
  sync_cv_.notify_one();
}

void Store::RunDone(std::unique_lock<std::mutex>& lock,
                    std::vector<std::function<void(Status)>> done,
                    const Status& status) {
  if (done.empty()) return;
  const auto executor = executor_;
  ++running_;
  lock.unlock();
  auto run = [done = std::move(done), status]() mutable {
    for (auto& d : done) d(status);
  };
  if (executor) {
    executor(std::move(run));
  } else {
    run();
  }
  lock.lock();
  --running_;
  idle_cv_.notify_all();
}

void Store::SyncLoop() {
  using Clock = std::chrono::steady_clock;
  std::unique_lock lock(mu_);
  auto last_sync = Clock::now();
  for (;;) {
    auto ready = [&] { return !waiting_.empty() || writer_done_; };
    if (options_.fsync == FsyncPolicy::kInterval) {
      sync_cv_.wait_until(lock, last_sync + options_.fsync_interval, ready);
    } else {
      sync_cv_.wait(lock, ready);
    }
    if (writer_done_ && waiting_.empty()) break;
    const bool due = options_.fsync == FsyncPolicy::kInterval &&
                     Clock::now() >= last_sync + options_.fsync_interval;
    if (waiting_.empty() && !(due && unsynced_)) continue;
    std::vector<std::function<void(Status)>> group;
    group.swap(waiting_);
    unsynced_ = false;
    syncing_ = true;
    lock.unlock();
    Status status = Failed();
    if (status.ok()) {
      // Everything written so far is in the log: the sync covers it.
      const std::uint64_t sequence = db_->GetLatestSequenceNumber();
      const auto started = Clock::now();
      const rocksdb::Status s = [&] {
        DiskOp op(*this);
        return db_->SyncWAL();
      }();
      if (options_.metrics != nullptr) {
        options_.metrics->wal_sync().Observe(
            std::chrono::duration<double>(Clock::now() - started).count());
        if (!group.empty()) {
          options_.metrics->wal_sync_group().Observe(
              static_cast<double>(group.size()));
        }
      }
      if (!s.ok()) {
        status = Error("WAL sync", s);
        NoteWriteError(status);
      } else {
        NoteDurable(sequence);
      }
    }
    last_sync = Clock::now();
    lock.lock();
    syncing_ = false;
    RunDone(lock, std::move(group), status);
    idle_cv_.notify_all();
  }
}

void Store::Flush(std::function<void()> done) {
  {
    std::lock_guard lock(mu_);
    if (!closing_) {
      queue_.push_back(Queued{nullptr, nullptr,
                              [done = std::move(done)](Status) { done(); },
                              true});
      cv_.notify_one();
      return;
    }
  }
  done();  // Closed: everything queued before is written and synced.
}

void Store::Sync() {
  {
    std::unique_lock lock(mu_);
    idle_cv_.wait(lock, [&] {
      return queue_.empty() && !writing_ && waiting_.empty() && !syncing_ &&
             running_ == 0;
    });
  }
  std::shared_lock lock(close_mu_);
  if (closed_ || failed_) return;
  const std::uint64_t sequence = db_->GetLatestSequenceNumber();
  if (db_->SyncWAL().ok()) NoteDurable(sequence);
}

}  // namespace delayd
