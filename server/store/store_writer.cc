// The store's write queue and its writer thread, and reads that see the
// queue (store.h, "Writes").
#include <algorithm>
#include <optional>
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

// Finds, in batches read in order, what became of given payload keys: the
// last Put (its value) or Delete of each wins, by index.
class FindPayloads : public rocksdb::WriteBatch::Handler {
 public:
  FindPayloads(std::uint32_t family,
               const std::unordered_map<std::string, std::size_t>& wanted,
               std::vector<std::string>& values, std::vector<bool>& seen,
               std::vector<bool>& deleted)
      : family_(family),
        wanted_(wanted),
        values_(values),
        seen_(seen),
        deleted_(deleted) {}
  rocksdb::Status PutCF(std::uint32_t cf, const rocksdb::Slice& key,
                        const rocksdb::Slice& value) override {
    if (auto i = Index(cf, key)) {
      values_[*i].assign(value.data(), value.size());
      seen_[*i] = true;
      deleted_[*i] = false;
    }
    return rocksdb::Status::OK();
  }
  rocksdb::Status DeleteCF(std::uint32_t cf,
                           const rocksdb::Slice& key) override {
    if (auto i = Index(cf, key)) {
      values_[*i].clear();
      seen_[*i] = true;
      deleted_[*i] = true;
    }
    return rocksdb::Status::OK();
  }

 private:
  std::optional<std::size_t> Index(std::uint32_t cf,
                                   const rocksdb::Slice& key) const {
    if (cf != family_) return std::nullopt;
    auto it = wanted_.find(key.ToString());
    if (it == wanted_.end()) return std::nullopt;
    return it->second;
  }
  const std::uint32_t family_;
  const std::unordered_map<std::string, std::size_t>& wanted_;
  std::vector<std::string>& values_;
  std::vector<bool>& seen_;
  std::vector<bool>& deleted_;
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

Store::View::~View() {
  if (!state_) return;
  std::lock_guard lock(store_->mu_);
  auto& views = store_->views_;
  views.erase(std::find(views.begin(), views.end(), state_.get()));
  store_->TrimDeletes();
}

Store::View Store::NewView() {
  View view;
  view.store_ = this;
  view.state_ = std::make_shared<View::State>();
  std::lock_guard lock(mu_);
  // (The writer's group stays in queue_ until it is written.)
  view.state_->queued.reserve(queue_.size());
  for (const Queued& q : queue_) {
    if (q.batch) view.state_->queued.push_back(q.batch);
  }
  view.state_->deletes_from = deletes_base_ + deletes_.size();
  views_.push_back(view.state_.get());
  return view;
}

void Store::TrimDeletes() {
  const std::uint64_t end = deletes_base_ + deletes_.size();
  // Back to the oldest view's start, and no more than
  // options_.max_deletes_kept.
  std::uint64_t from = end;
  for (const View::State* view : views_) {
    from = std::min(from, view->deletes_from);
  }
  from = std::max(from, deletes_.size() > options_.max_deletes_kept
                            ? end - options_.max_deletes_kept
                            : deletes_base_);
  deletes_.erase(
      deletes_.begin(),
      deletes_.begin() + static_cast<std::ptrdiff_t>(from - deletes_base_));
  deletes_base_ = from;
}

Status Store::GetPayloads(std::span<const std::uint64_t> ids,
                          std::vector<std::string>* payloads,
                          std::vector<bool>* readable) {
  std::vector<bool> gone;
  return Read(ids, nullptr, payloads, readable, &gone);
}

bool Store::ReadCached(std::span<const std::uint64_t> ids,
                       std::vector<std::string>* payloads,
                       std::vector<bool>* readable) {
  if (!options_.cached_reads || ids.empty()) return false;
  // (Closing holds close_mu_ while it flushes: not waited for.)
  std::shared_lock lock(close_mu_, std::try_to_lock);
  if (!lock.owns_lock() || closed_) return false;
  std::vector<std::string> keys;
  keys.reserve(ids.size());
  for (std::uint64_t id : ids) keys.push_back(IdKey(id));
  rocksdb::ReadOptions read;
  // Anything that would need I/O (a block, an index, a table not yet
  // open) comes back Incomplete instead.
  read.read_tier = rocksdb::kBlockCacheTier;
  std::vector<std::string> values;
  const std::vector<rocksdb::Status> statuses =
      MultiGetPayloads(read, {keys.begin(), keys.end()}, &values);
  for (const rocksdb::Status& s : statuses) {
    if (!s.ok()) return false;  // Read from disk instead (or found damaged).
  }
  *payloads = std::move(values);
  readable->assign(ids.size(), true);
  return true;
}

std::vector<rocksdb::Status> Store::MultiGetPayloads(
    const rocksdb::ReadOptions& options,
    const std::vector<rocksdb::Slice>& keys, std::vector<std::string>* values) {
  const std::vector<rocksdb::ColumnFamilyHandle*> families(keys.size(),
                                                           payloads_);
  return db_->MultiGet(options, families, keys, values);
}

Status Store::GetPayloads(std::span<const std::uint64_t> ids, const View& view,
                          std::vector<std::string>* payloads,
                          std::vector<bool>* readable,
                          std::vector<bool>* gone) {
  return Read(ids, &view, payloads, readable, gone);
}

Status Store::Read(std::span<const std::uint64_t> ids, const View* view,
                   std::vector<std::string>* payloads,
                   std::vector<bool>* readable, std::vector<bool>* gone) {
  payloads->assign(ids.size(), std::string());
  readable->assign(ids.size(), false);
  gone->assign(ids.size(), false);
  if (ids.empty()) return Status::Ok();
  if (options_.before_payload_read) options_.before_payload_read();
  std::vector<std::string> keys;
  keys.reserve(ids.size());
  for (std::uint64_t id : ids) keys.push_back(IdKey(id));
  // Payloads still queued when the view was taken: the last Put or Delete
  // of each wins.
  std::vector<std::string> queued(ids.size());
  std::vector<bool> found(ids.size(), false);
  std::vector<bool>& deleted = *gone;
  if (view != nullptr && !view->state_->queued.empty()) {
    std::unordered_map<std::string, std::size_t> wanted;
    for (std::size_t i = 0; i < ids.size(); ++i) wanted[keys[i]] = i;
    FindPayloads finder(payloads_->GetID(), wanted, queued, found, deleted);
    for (const auto& batch : view->state_->queued) batch->Iterate(&finder);
  }
  std::vector<rocksdb::Slice> slices;
  std::vector<std::size_t> from_db;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!found[i]) {
      slices.emplace_back(keys[i]);
      from_db.push_back(i);
    } else if (!deleted[i]) {
      (*payloads)[i] = std::move(queued[i]);
      (*readable)[i] = true;
    }
  }
  if (from_db.empty()) return Status::Ok();
  std::shared_lock lock(close_mu_);
  if (closed_) return Status::Unavailable("the store is closed");
  std::vector<std::string> values;
  const std::vector<rocksdb::Status> statuses =
      MultiGetPayloads(rocksdb::ReadOptions(), slices, &values);
  // One missing because a group written after the view deleted it was there
  // when the view was taken: it is gone, not damaged.
  if (view != nullptr) {
    std::unordered_map<std::uint64_t, std::size_t> missing;
    for (std::size_t j = 0; j < statuses.size(); ++j) {
      if (statuses[j].IsNotFound()) missing[ids[from_db[j]]] = from_db[j];
    }
    if (!missing.empty()) {
      std::lock_guard queue_lock(mu_);
      const std::uint64_t from = view->state_->deletes_from;
      if (from < deletes_base_) {
        // Too old to tell (more deletes since than are kept): taken as gone.
        for (const auto& [id, i] : missing) deleted[i] = true;
      } else {
        for (auto k = deletes_.begin() +
                      static_cast<std::ptrdiff_t>(from - deletes_base_);
             k != deletes_.end(); ++k) {
          if (auto it = missing.find(*k); it != missing.end()) {
            deleted[it->second] = true;
          }
        }
      }
    }
  }
  Status first;
  for (std::size_t j = 0; j < statuses.size(); ++j) {
    const std::size_t i = from_db[j];
    if (statuses[j].ok()) {
      (*payloads)[i] = std::move(values[j]);
      (*readable)[i] = true;
    } else if (deleted[i]) {
      continue;
    } else if (first.ok()) {
      first = Error(("reading payload " + std::to_string(ids[i])).c_str(),
                    statuses[j]);
    }
  }
  return first;
}

rocksdb::Status Store::WriteGroup(const std::vector<Queued>& group) {
  rocksdb::WriteOptions wo;
  std::vector<const rocksdb::WriteBatch*> batches;
  for (const Queued& q : group) {
    if (q.batch) batches.push_back(q.batch.get());
  }
  if (batches.empty()) return rocksdb::Status::OK();
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
      const rocksdb::Status s = db_->SyncWAL();
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
