#include "server/store/store.h"

#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/checkpoint.h>

#include <cstring>
#include <ctime>
#include <filesystem>

#include "server/common/duration.h"
#include "server/common/record_codec.h"

namespace delayd {
namespace {

constexpr char kNamespacePrefix = 'n';
constexpr char kCountersPrefix = 'c';
constexpr std::size_t kTimerFixedSize = 4 + 8 + 8;
constexpr std::size_t kEventFixedSize = 4 + 8 + 8 + 8 + 1 + 8;

using record::AppendBE;
using record::AppendRaw;
using record::ReadBE;
using record::ReadRaw;

std::string NamespaceKey(NamespaceId id) {
  std::string out(1, kNamespacePrefix);
  AppendBE(out, id, 4);
  return out;
}

}  // namespace

std::string Store::IdKey(std::uint64_t id) {
  std::string out;
  AppendBE(out, id, 8);
  return out;
}

Status ParseFsyncPolicy(std::string_view text, StoreOptions* options) {
  if (text == "always") {
    options->fsync = FsyncPolicy::kAlways;
  } else if (text == "never") {
    options->fsync = FsyncPolicy::kNever;
  } else if (auto d = ParseDuration(text); d && d->count() > 0) {
    options->fsync = FsyncPolicy::kInterval;
    options->fsync_interval = *d;
  } else {
    return Status::InvalidArgument(
        "--fsync: expected always, never or a positive interval such as "
        "100ms, not '" +
        std::string(text) + "'");
  }
  return Status::Ok();
}

void Store::Batch::PutTimer(std::uint64_t payload_id, NamespaceId ns,
                            std::string_view key, WallNanos fire_time,
                            std::uint64_t version) {
  std::string value;
  value.reserve(kTimerFixedSize + key.size());
  AppendRaw(value, ns);
  AppendRaw(value, fire_time);
  AppendRaw(value, version);
  value.append(key);
  batch_.Put(store_->timers_, IdKey(payload_id), value);
}

void Store::Batch::DeleteTimer(std::uint64_t payload_id) {
  batch_.Delete(store_->timers_, IdKey(payload_id));
}

void Store::Batch::PutPayload(std::uint64_t payload_id,
                              std::string_view payload) {
  batch_.Put(store_->payloads_, IdKey(payload_id),
             rocksdb::Slice(payload.data(), payload.size()));
}

void Store::Batch::DeletePayload(std::uint64_t payload_id) {
  batch_.Delete(store_->payloads_, IdKey(payload_id));
}

void Store::Batch::PutEvent(const StoredEvent& e) {
  std::string value;
  value.reserve(kEventFixedSize + e.key.size());
  AppendRaw(value, e.ns);
  AppendRaw(value, e.version);
  AppendRaw(value, e.fire_time);
  AppendRaw(value, e.fired_at);
  AppendRaw(value, static_cast<std::uint8_t>(e.reason));
  AppendRaw(value, e.payload_id);
  value.append(e.key);
  batch_.Put(store_->events_, IdKey(e.id), value);
}

void Store::Batch::DeleteEvent(std::uint64_t event_id) {
  batch_.Delete(store_->events_, IdKey(event_id));
}

void Store::Batch::PutCounters(std::uint32_t partition,
                               std::uint64_t next_version,
                               std::uint64_t next_event_seq) {
  std::string key(1, kCountersPrefix);
  AppendBE(key, partition, 2);
  std::string value;
  AppendRaw(value, next_version);
  AppendRaw(value, next_event_seq);
  batch_.Put(store_->meta_, key, value);
}

Status Store::Error(const char* what, const rocksdb::Status& s) const {
  Status status = Status::Internal("store in " + options_.dir + ": " + what +
                                   ": " + s.ToString());
  if (options_.on_error) options_.on_error(status);
  return status;
}

Store::~Store() { Close(); }

Status Store::LoadNamespaces(std::vector<std::string>* names) {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), meta_));
  const std::string prefix(1, kNamespacePrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    // (An empty name marks a freed id.)
    if (it->key().size() != 5) {
      return Status::Internal("store in " + options_.dir +
                              ": malformed namespace record");
    }
    const auto id = ReadBE(it->key().data() + 1, 4);
    if (id != names->size()) {
      return Status::Internal("store in " + options_.dir +
                              ": namespace table has a gap at id " +
                              std::to_string(names->size()));
    }
    names->push_back(it->value().ToString());
  }
  if (!it->status().ok()) return Error("reading namespaces", it->status());
  return Status::Ok();
}

Status Store::LoadCounters(std::uint64_t* next_version,
                           std::uint64_t* next_event_seq) {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), meta_));
  const std::string prefix(1, kCountersPrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    if (it->value().size() != 16) {
      return Status::Internal("store in " + options_.dir +
                              ": malformed counter record");
    }
    const char* p = it->value().data();
    *next_version = std::max(*next_version, ReadRaw<std::uint64_t>(p));
    *next_event_seq = std::max(*next_event_seq, ReadRaw<std::uint64_t>(p));
  }
  if (!it->status().ok()) return Error("reading counters", it->status());
  return Status::Ok();
}

Status Store::ForEachTimer(
    const std::function<void(const StoredTimer&)>& visit) {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.readahead_size = 4 << 20;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, timers_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() != 8 || v.size() <= kTimerFixedSize) {
      return Status::Internal("store in " + options_.dir +
                              ": malformed timer record");
    }
    const char* p = v.data();
    StoredTimer t;
    t.payload_id = ReadBE(k.data(), 8);
    t.ns = ReadRaw<NamespaceId>(p);
    t.fire_time = ReadRaw<WallNanos>(p);
    t.version = ReadRaw<std::uint64_t>(p);
    t.key = std::string_view(p, v.data() + v.size() - p);
    visit(t);
  }
  if (!it->status().ok()) return Error("reading timers", it->status());
  return Status::Ok();
}

Status Store::ForEachEvent(
    const std::function<void(const StoredEvent&)>& visit) {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, events_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() != 8 || v.size() <= kEventFixedSize) {
      return Status::Internal("store in " + options_.dir +
                              ": malformed event record");
    }
    const char* p = v.data();
    StoredEvent e;
    e.id = ReadBE(k.data(), 8);
    e.ns = ReadRaw<NamespaceId>(p);
    e.version = ReadRaw<std::uint64_t>(p);
    e.fire_time = ReadRaw<WallNanos>(p);
    e.fired_at = ReadRaw<WallNanos>(p);
    e.reason = static_cast<Reason>(ReadRaw<std::uint8_t>(p));
    e.payload_id = ReadRaw<std::uint64_t>(p);
    e.key = std::string_view(p, v.data() + v.size() - p);
    visit(e);
  }
  if (!it->status().ok()) return Error("reading events", it->status());
  return Status::Ok();
}

Store::DiskOp::DiskOp(Store& store) : store_(store) {
  std::lock_guard lock(store_.disk_ops_mu_);
  at_ = store_.disk_ops_.insert(std::chrono::steady_clock::now());
}

Store::DiskOp::~DiskOp() {
  std::lock_guard lock(store_.disk_ops_mu_);
  store_.disk_ops_.erase(at_);
}

std::chrono::nanoseconds Store::Busy() const {
  std::lock_guard lock(disk_ops_mu_);
  if (disk_ops_.empty()) return std::chrono::nanoseconds(0);
  return std::chrono::steady_clock::now() - *disk_ops_.begin();
}

Status Store::WriteSynced(rocksdb::WriteBatch& batch, const char* what) {
  if (Status failed = Failed(); !failed.ok()) return failed;
  std::shared_lock lock(close_mu_);
  if (closed_) return Status::Unavailable("the store is closed");
  rocksdb::WriteOptions wo;
  wo.sync = true;
  const std::uint64_t sequence = db_->GetLatestSequenceNumber();
  DiskOp op(*this);
  auto s = db_->Write(wo, &batch);
  if (!s.ok()) {
    Status error = Error(what, s);
    NoteWriteError(error);
    return error;
  }
  NoteDurable(sequence);  // The synced write synced the log before it too.
  return Status::Ok();
}

Status Store::PutNamespace(NamespaceId id, std::string_view name) {
  rocksdb::WriteBatch batch;
  batch.Put(meta_, NamespaceKey(id), rocksdb::Slice(name.data(), name.size()));
  std::function<void()> written;
  std::function<void(Status)> done;
  return Enqueue(batch, written, done, false);
}

Status Store::ReserveIds(std::uint32_t partition, std::uint64_t version_limit,
                         std::uint64_t event_seq_limit) {
  Batch batch(*this);
  batch.PutCounters(partition, version_limit, event_seq_limit);
  return WriteSynced(batch.batch_, "reserving ids");
}

std::optional<std::uint64_t> Store::Property(const std::string& name) {
  std::shared_lock lock(close_mu_);
  std::uint64_t value = 0;
  if (closed_ || !db_ || !db_->GetAggregatedIntProperty(name, &value)) {
    return std::nullopt;
  }
  return value;
}

void Store::NoteDurable(std::uint64_t sequence) {
  std::uint64_t seen = durable_seq_.load();
  while (seen < sequence &&
         !durable_seq_.compare_exchange_weak(seen, sequence)) {
  }
}

Status Store::UpdateMark() {
  StoreMark next;
  next.sequence = durable_seq_.load();
  std::vector<std::string> files;
  if (rocksdb::Status s =
          db_->GetLiveFiles(files, &next.manifest_size, /*flush=*/false);
      !s.ok()) {
    return Error("listing the store's files", s);
  }
  for (const auto& f : files) {
    if (f.starts_with("/MANIFEST-")) next.manifest = f.substr(1);
  }
  if (next == mark_) return Status::Ok();
  rocksdb::Env* env = options_.EnvOrDefault();
  if (Status s = WriteMark(env, options_.dir, next); !s.ok()) {
    if (options_.on_error) options_.on_error(s);
    return s;
  }
  mark_ = std::move(next);
  return Status::Ok();
}

void Store::MarkLoop() {
  // Often enough that a store damaged after a few seconds of writes is
  // caught; rarely enough to cost nothing (three small syncs).
  constexpr auto kMarkInterval = std::chrono::seconds(1);
  std::unique_lock lock(mu_);
  while (!mark_cv_.wait_for(lock, kMarkInterval, [&] { return closing_; })) {
    lock.unlock();
    {
      std::shared_lock open(close_mu_);
      if (!closed_ && !failed_) UpdateMark();
    }
    lock.lock();
  }
}

Status Store::Checkpoint(const std::string& dir) {
  if (Status failed = Failed(); !failed.ok()) return failed;
  std::shared_lock lock(close_mu_);
  if (closed_) return Status::Unavailable("the store is closed");
  rocksdb::Checkpoint* raw = nullptr;
  rocksdb::Status s = rocksdb::Checkpoint::Create(db_.get(), &raw);
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  if (s.ok()) s = checkpoint->CreateCheckpoint(dir);
  if (!s.ok()) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    return Error(("backup to " + dir).c_str(), s);
  }
  return Status::Ok();
}

void Store::NoteWriteError(const Status& error) {
  if (failed_.exchange(true)) return;
  if (options_.on_write_failure) options_.on_write_failure(error);
}

Status Store::Failed() const {
  if (!failed_) return Status::Ok();
  return Status::Unavailable("store in " + options_.dir +
                             ": a write failed before; no more are taken "
                             "until delayd restarts");
}

void Store::Close() {
  {
    std::lock_guard lock(mu_);
    if (closing_) return;
    closing_ = true;
  }
  cv_.notify_all();
  mark_cv_.notify_all();
  if (writer_.joinable()) writer_.join();  // Once the queue is written.
  if (syncer_.joinable()) syncer_.join();  // Once that is synced.
  if (marker_.joinable()) marker_.join();
  std::unique_lock lock(close_mu_);
  closed_ = true;
  if (!db_) return;
  if (!failed_ && !options_.read_only) {
    db_->SyncWAL();
    // Flushing the memtables makes the next start read tables, not replay
    // logs.
    rocksdb::FlushOptions flush;
    if (db_->Flush(flush, handles_).ok()) {
      NoteDurable(db_->GetLatestSequenceNumber());
    }
    UpdateMark();
  }
  for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);
  handles_.clear();
  db_->Close();
  db_.reset();
}

}  // namespace delayd
