#include "server/store/rocksdb/rocks_store.h"

#include <rocksdb/utilities/checkpoint.h>

#include <filesystem>

#include "delayd/text/duration.h"
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

std::string CountersKey(std::uint32_t partition) {
  std::string key(1, kCountersPrefix);
  AppendBE(key, partition, 2);
  return key;
}

std::string TimerValue(const StoredTimer& t) {
  std::string value;
  value.reserve(kTimerFixedSize + t.key.size());
  AppendRaw(value, t.ns);
  AppendRaw(value, t.fire_time);
  AppendRaw(value, t.version);
  value.append(t.key);
  return value;
}

std::string EventValue(const StoredEvent& e) {
  std::string value;
  value.reserve(kEventFixedSize + e.key.size());
  AppendRaw(value, e.ns);
  AppendRaw(value, e.version);
  AppendRaw(value, e.fire_time);
  AppendRaw(value, e.fired_at);
  AppendRaw(value, static_cast<std::uint8_t>(e.reason));
  AppendRaw(value, e.payload_id);
  value.append(e.key);
  return value;
}

rocksdb::Slice ToSlice(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace

std::string RocksStore::IdKey(std::uint64_t id) {
  std::string out;
  AppendBE(out, id, 8);
  return out;
}

Status ParseFsyncPolicy(std::string_view text, RocksOptions* options) {
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

StoreOpener RocksStoreOpener(RocksOptions options) {
  return [options = std::move(options)](StoreHooks hooks,
                                        std::unique_ptr<Store>* out) {
    std::unique_ptr<RocksStore> store;
    Status s = RocksStore::Open(options, std::move(hooks), &store);
    if (s.ok()) *out = std::move(store);
    return s;
  };
}

RocksStore::RocksStore(RocksOptions options, StoreHooks hooks)
    : options_(std::move(options)),
      hooks_(std::move(hooks)),
      where_("store in " + options_.dir) {}

RocksStore::~RocksStore() { Close(); }

// Fates and policies are in rocks_records.cc.
void RocksStore::ToRocks(const Batch& batch, rocksdb::WriteBatch& out) const {
  Batch::Reader reader(batch);
  Batch::Change c;
  while (reader.Next(&c)) {
    switch (c.kind) {
      case Batch::Kind::kAddTimer:
        out.Put(payloads_, IdKey(c.timer.payload_id), ToSlice(c.data));
        out.Put(timers_, IdKey(c.timer.payload_id), TimerValue(c.timer));
        break;
      case Batch::Kind::kMoveTimer:
        out.Put(timers_, IdKey(c.timer.payload_id), TimerValue(c.timer));
        break;
      case Batch::Kind::kRemoveTimer:
        out.Delete(timers_, IdKey(c.payload_id));
        out.Delete(payloads_, IdKey(c.payload_id));
        break;
      case Batch::Kind::kFireTimer:
        out.Delete(timers_, IdKey(c.event.payload_id));
        out.Put(events_, IdKey(c.event.id), EventValue(c.event));
        break;
      case Batch::Kind::kRemoveEvent:
        out.Delete(events_, IdKey(c.id));
        out.Delete(payloads_, IdKey(c.payload_id));
        if (c.flag) out.Delete(meta_, FateKey(c.id));
        break;
      case Batch::Kind::kPutFate:
        out.Put(meta_, FateKey(c.id), FateValue(c.fate));
        break;
      case Batch::Kind::kRemoveFate:
        out.Delete(meta_, FateKey(c.id));
        break;
      case Batch::Kind::kReserveIds: {
        std::string value;
        AppendRaw(value, c.version_limit);
        AppendRaw(value, c.event_seq_limit);
        out.Put(meta_, CountersKey(c.partition), value);
        break;
      }
      case Batch::Kind::kPutNamespace:
        out.Put(meta_, NamespaceKey(static_cast<NamespaceId>(c.id)),
                ToSlice(c.name));
        break;
      case Batch::Kind::kPutPolicy:
        if (c.data.empty()) {
          out.Delete(meta_, PolicyKey(c.name));
        } else {
          out.Put(meta_, PolicyKey(c.name), ToSlice(c.data));
        }
        break;
      case Batch::Kind::kPutSchedule:
      case Batch::Kind::kPutDedup: {
        const auto ns = static_cast<NamespaceId>(c.id);
        const std::string key = c.kind == Batch::Kind::kPutSchedule
                                    ? ScheduleKey(ns, c.name)
                                    : DedupKey(ns, c.name);
        if (c.data.empty()) {
          out.Delete(meta_, key);
        } else {
          out.Put(meta_, key, ToSlice(c.data));
        }
        break;
      }
    }
  }
}

Status RocksStore::Error(const char* what, const rocksdb::Status& s) const {
  Status status = Status::Internal(where_ + ": " + what + ": " + s.ToString());
  if (hooks_.on_error) hooks_.on_error(status);
  return status;
}

Status RocksStore::LoadNamespaces(std::vector<std::string>* names) {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), meta_));
  const std::string prefix(1, kNamespacePrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    // (An empty name marks a freed id.)
    if (it->key().size() != 5) {
      return Status::Internal(where_ + ": malformed namespace record");
    }
    const auto id = ReadBE(it->key().data() + 1, 4);
    if (id != names->size()) {
      return Status::Internal(where_ + ": namespace table has a gap at id " +
                              std::to_string(names->size()));
    }
    names->push_back(it->value().ToString());
  }
  if (!it->status().ok()) return Error("reading namespaces", it->status());
  return Status::Ok();
}

Status RocksStore::LoadCounters(std::uint64_t* next_version,
                                std::uint64_t* next_event_seq) {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), meta_));
  const std::string prefix(1, kCountersPrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    if (it->value().size() != 16) {
      return Status::Internal(where_ + ": malformed counter record");
    }
    const char* p = it->value().data();
    *next_version = std::max(*next_version, ReadRaw<std::uint64_t>(p));
    *next_event_seq = std::max(*next_event_seq, ReadRaw<std::uint64_t>(p));
  }
  if (!it->status().ok()) return Error("reading counters", it->status());
  return Status::Ok();
}

Status RocksStore::ForEachTimer(
    const std::function<void(const StoredTimer&)>& visit) {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.readahead_size = 4 << 20;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, timers_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() != 8 || v.size() <= kTimerFixedSize) {
      return Status::Internal(where_ + ": malformed timer record");
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

Status RocksStore::ForEachEvent(
    const std::function<void(const StoredEvent&)>& visit) {
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, events_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() != 8 || v.size() <= kEventFixedSize) {
      return Status::Internal(where_ + ": malformed event record");
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

RocksStore::DiskOp::DiskOp(RocksStore& store) : store_(store) {
  MutexLock lock(&store_.disk_ops_mu_);
  at_ = store_.disk_ops_.insert(std::chrono::steady_clock::now());
}

RocksStore::DiskOp::~DiskOp() {
  MutexLock lock(&store_.disk_ops_mu_);
  store_.disk_ops_.erase(at_);
}

std::chrono::nanoseconds RocksStore::Busy() const {
  MutexLock lock(&disk_ops_mu_);
  if (disk_ops_.empty()) return std::chrono::nanoseconds(0);
  return std::chrono::steady_clock::now() - *disk_ops_.begin();
}

bool RocksStore::Backlogged(std::string* why) const {
  if (queued_bytes_.load(std::memory_order_relaxed) <=
      options_.max_backlog_bytes) {
    return false;
  }
  if (why != nullptr) {
    *why = "the store is behind (more than " +
           std::to_string(options_.max_backlog_bytes >> 20) +
           " MiB wait to be written); try again";
  }
  return true;
}

Status RocksStore::WriteSynced(rocksdb::WriteBatch& batch, const char* what) {
  if (Status failed = Failed(); !failed.ok()) return failed;
  ReaderLock lock(&close_mu_);
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

Status RocksStore::WriteNow(Batch& batch) {
  rocksdb::WriteBatch rocks;
  bool closed;
  {
    ReaderLock lock(&close_mu_);
    closed = closed_;
    if (!closed) ToRocks(batch, rocks);
  }
  batch.Clear();
  if (closed) return Status::Unavailable(where_ + " is closed");
  return WriteSynced(rocks, "writing");
}

std::vector<Store::Gauge> RocksStore::Gauges() {
  std::vector<Gauge> out;
  ReaderLock lock(&close_mu_);
  if (closed_ || !db_) return out;
  auto property = [&](const char* name, const char* help,
                      const char* rocksdb_name) {
    std::uint64_t value = 0;
    if (db_->GetAggregatedIntProperty(rocksdb_name, &value)) {
      out.push_back({name, help, static_cast<double>(value)});
    }
  };
  property("delayd_store_pending_compaction_bytes",
           "Bytes RocksDB estimates compaction has to rewrite.",
           "rocksdb.estimate-pending-compaction-bytes");
  property("delayd_store_live_data_bytes",
           "RocksDB's estimate of the live data's size.",
           "rocksdb.estimate-live-data-size");
  property("delayd_store_memtable_bytes", "Bytes in RocksDB's memtables.",
           "rocksdb.cur-size-all-mem-tables");
  return out;
}

void RocksStore::NoteDurable(std::uint64_t sequence) {
  std::uint64_t seen = durable_seq_.load();
  while (seen < sequence &&
         !durable_seq_.compare_exchange_weak(seen, sequence)) {
  }
}

Status RocksStore::UpdateMark(bool* changed) {
  if (changed != nullptr) *changed = false;
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
    if (hooks_.on_error) hooks_.on_error(s);
    return s;
  }
  mark_ = std::move(next);
  if (changed != nullptr) *changed = true;
  return Status::Ok();
}

void RocksStore::MarkLoop() {
  // Often enough that a store damaged after a few seconds of writes is
  // caught; rarely enough to cost nothing (three small syncs).
  constexpr auto kMarkInterval = std::chrono::seconds(1);
  // An idle store's check (listing RocksDB's live files) cost more than the
  // rest of its idle wake-ups together; what changes the mark without a
  // write (a flush or compaction finishing after the last one) is recorded
  // this late at most, and a mark recorded earlier stays true meanwhile.
  constexpr auto kMarkIdleInterval = std::chrono::seconds(60);
  MutexLock lock(&mu_);
  bool changed = true;  // The last check found a change: still active.
  for (;;) {
    const bool active = changed;
    const auto next = std::chrono::steady_clock::now() +
                      (active ? kMarkInterval : kMarkIdleInterval);
    mark_asleep_ = !active;
    while (!closing_ && (active || mark_asleep_) &&
           mark_cv_.WaitUntil(&mu_, next)) {
    }
    mark_asleep_ = false;
    if (closing_) return;
    changed = true;
    // Woken from sleep (by a write, or once the idle interval passed):
    // checks a second later, when that write is durable.
    if (!active) continue;
    MutexUnlock unlock(&mu_);
    ReaderLock open(&close_mu_);
    if (!closed_ && !failed_ && UpdateMark(&changed).ok()) continue;
    changed = true;  // (Closed, failed, or not written: tried again.)
  }
}

Status RocksStore::Backup(const std::string& dir) {
  if (Status failed = Failed(); !failed.ok()) return failed;
  ReaderLock lock(&close_mu_);
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

void RocksStore::NoteWriteError(const Status& error) {
  if (failed_.exchange(true)) return;
  if (hooks_.on_write_failure) hooks_.on_write_failure(error);
}

Status RocksStore::Failed() const {
  if (!failed_) return Status::Ok();
  return Status::Unavailable(where_ +
                             ": a write failed before; no more are taken "
                             "until delayd restarts");
}

std::vector<std::string> RocksStore::OpenNotes() const {
  std::vector<std::string> notes;
  if (!format_note_.empty()) notes.push_back(format_note_);
  if (salvage_copy_.empty()) return notes;
  notes.push_back(
      "--salvage: the data directory as it was is kept, untouched, in " +
      salvage_copy_ +
      "; whatever followed damage in its log was dropped (the counts above "
      "are what remained)");
  notes.push_back("--salvage: dropped: " + salvage_dropped_);
  return notes;
}

void RocksStore::Close() {
  {
    MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
  }
  cv_.SignalAll();
  mark_cv_.SignalAll();
  if (writer_.joinable()) writer_.join();  // Once the queue is written.
  if (syncer_.joinable()) syncer_.join();  // Once that is synced.
  if (marker_.joinable()) marker_.join();
  WriterLock lock(&close_mu_);
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
