// RocksStore::Open: options, the salvage copy, and the checks against the
// mark.
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <set>
#include <tuple>

#include "server/common/record_codec.h"
#include "server/common/thread_name.h"
#include "server/store/rocksdb/rocks_format.h"
#include "server/store/rocksdb/rocks_mark.h"
#include "server/store/rocksdb/rocks_store.h"

namespace delayd {
namespace {

// The meta record of the store's format: 4 bytes, big-endian.
constexpr char kFormatKey = 'V';
// The meta record of FixedEventIdsFrom(): 8 bytes, big-endian.
constexpr char kFixedIdsKey = 'E';
// Room left, in a store that held timers before its event ids were fixed,
// for its event counters (which those timers still use) below the first
// fixed id: a restart skips at most 1.5 blocks of 2^20 numbers, so this
// lasts about 700,000 restarts (Partition::ReserveIds refuses beyond; and
// as many more with fixed_event_ids turned off, whose counters then give
// every id, before the record could meet them if it were turned on again).
constexpr std::uint64_t kCounterRoom = std::uint64_t{1} << 40;

// A meta record written and synced at open.
rocksdb::Status PutSynced(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* meta,
                          const std::string& key, const std::string& value) {
  rocksdb::WriteOptions sync;
  sync.sync = true;
  return db.Put(sync, meta, key, value);
}

// A store that is damaged: named, with what to do about it.
Status Refusal(const std::string& dir, const std::string& why) {
  return Status::Internal(
      "cannot open the store in " + dir + ": " + why +
      ". The data directory is damaged or unreadable; delayd will not start "
      "on it. Restore it from a backup, or move it aside to start empty; "
      "--salvage starts on what can be recovered (after copying the "
      "directory aside) and logs what it dropped.");
}

// Copies `dir`, as it is, beside itself: salvage drops records, and the
// copy keeps them. The copy's name carries the UTC time to the millisecond
// and, if a copy of that name exists (two salvages within one millisecond,
// or a clock set back), a number after it: the name is taken by creating
// the directory, so two starts never share one.
Status CopyAside(const std::string& dir, std::string* copy) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(
                          now.time_since_epoch())
                          .count() %
                      1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[40];
  const std::size_t n =
      std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &utc);
  std::snprintf(stamp + n, sizeof stamp - n, ".%03dZ",
                static_cast<int>(millis));
  std::string base = dir;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  base += std::string(".before-salvage-") + stamp;
  std::error_code ec;
  for (int attempt = 1;; ++attempt) {
    *copy = attempt == 1 ? base : base + "-" + std::to_string(attempt);
    if (std::filesystem::create_directory(*copy, ec)) break;
    if (ec || attempt == 1000) {
      return Status::Internal(
          "--salvage: cannot create " + *copy + " to copy " + dir +
          " aside first: " + (ec ? ec.message() : "it exists"));
    }
  }
  std::filesystem::copy(dir, *copy, std::filesystem::copy_options::recursive,
                        ec);
  if (ec) {
    return Status::Internal("--salvage: cannot copy " + dir + " aside to " +
                            *copy + " first: " + ec.message());
  }
  return Status::Ok();
}

// Counts each time RocksDB starts slowing or stopping writes.
class StallCounter : public rocksdb::EventListener {
 public:
  explicit StallCounter(Metrics* metrics) : metrics_(metrics) {}
  void OnStallConditionsChanged(const rocksdb::WriteStallInfo& info) override {
    if (info.condition.prev == rocksdb::WriteStallCondition::kNormal &&
        info.condition.cur != rocksdb::WriteStallCondition::kNormal) {
      metrics_->write_stalls().Increment();
    }
  }

 private:
  Metrics* const metrics_;
};
}  // namespace

Status RocksStore::Open(const RocksOptions& options, StoreHooks hooks,
                        std::unique_ptr<RocksStore>* out) {
  std::unique_ptr<RocksStore> store(new RocksStore(options, hooks));
  std::error_code ec;
  if (!options.read_only) std::filesystem::create_directories(options.dir, ec);
  if (ec) {
    return Status::Internal("cannot create data directory " + options.dir +
                            ": " + ec.message());
  }
  if (options.read_only && !std::filesystem::is_directory(options.dir)) {
    return Status::NotFound("no data directory " + options.dir);
  }
  if (options.salvage && !std::filesystem::is_empty(options.dir, ec)) {
    if (Status s = CopyAside(options.dir, &store->salvage_copy_); !s.ok()) {
      return s;
    }
  }
  rocksdb::Env* env = options.EnvOrDefault();
  // What the store had made durable, as last recorded (store_mark.h).
  StoreMark mark;
  bool marked = false;
  std::vector<std::string> missing;  // What the mark says is lost.
  if (Status s = ReadMark(env, options.dir, &mark, &marked); !s.ok()) {
    if (!options.salvage && !options.read_only)
      return Refusal(options.dir, s.message());
    missing.push_back(s.message());
  }
  if (marked) {
    // Checked before RocksDB opens the store: opening on a MANIFEST cut
    // short deletes, as obsolete, the table files it no longer lists.
    if (std::string m = ManifestShortfall(env, options.dir, mark); !m.empty()) {
      if (!options.salvage && !options.read_only)
        return Refusal(options.dir, m);
      missing.push_back(std::move(m));
    }
  }
  rocksdb::DBOptions db;
  db.env = env;
  db.create_if_missing = true;
  db.create_missing_column_families = true;
  db.paranoid_checks = true;
  // A record cut short at the very end of a log is a write that was never
  // acknowledged (a crash mid-write); damage anywhere else refuses to open.
  db.wal_recovery_mode =
      options.skip_damaged_records
          ? rocksdb::WALRecoveryMode::kSkipAnyCorruptedRecords
      : options.salvage
          ? rocksdb::WALRecoveryMode::kPointInTimeRecovery
          : rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  // Bounds the WAL: past this, memtables holding its oldest data are flushed.
  db.max_total_wal_size = 64 << 20;
  // Bounds all memtables together, whatever the payload sizes.
  db.db_write_buffer_size = 16 << 20;
  db.max_background_jobs = 2;
  db.keep_log_file_num = 3;
  db.max_log_file_size = 8 << 20;
  db.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  // One thread at a time inserts into the memtables (the leader of each
  // group of writes), which lets each insert start from an insert hint (see
  // below); RocksDB ignores hints under concurrent memtable writes.
  db.allow_concurrent_memtable_write = false;
  if (hooks.metrics != nullptr) {
    db.listeners.push_back(std::make_shared<StallCounter>(hooks.metrics));
  }

  rocksdb::ColumnFamilyOptions cf;
  // Small memtables: the store's share of RAM stays a few tens of MiB.
  cf.write_buffer_size = 4 << 20;
  cf.max_write_buffer_number = 3;
  cf.level_compaction_dynamic_level_bytes = true;
  // Most records live minutes to hours and are rewritten by compaction
  // several times before they are deleted: compress only the last level,
  // where long-lived data settles, and spend no CPU compressing the rest.
  cf.compression = rocksdb::kNoCompression;
  cf.bottommost_compression = rocksdb::kLZ4Compression;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(8 << 20);
  table.cache_index_and_filter_blocks = true;
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));

  // Timers, payloads and events are keyed by ids that grow over time, so a
  // new key nearly always belongs next to the previous insert. One insert
  // hint per column family (every key has the same, empty, prefix) makes
  // the memtable's skip list resume from the previous insert's position
  // instead of searching from its top: a durable Batch under --fsync=never
  // ran 1.25-1.27x faster with it.
  rocksdb::ColumnFamilyOptions by_id = cf;
  by_id.memtable_insert_with_hint_prefix_extractor.reset(
      rocksdb::NewCappedPrefixTransform(0));
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, cf},
      {"timers", by_id},
      {"payloads", by_id},
      {"events", by_id}};
  // The store's format (rocks_format.h): a newer one is refused before
  // anything is opened; this format's family is created when missing.
  FoundFormat found;
  if (Status s = FindFormat(db, options.dir, &found); !s.ok()) return s;
  if (found.format > kStoreFormat)
    return NewerFormat(options.dir, found.format);
  for (const std::string& name : found.format_families) {
    families.push_back({name, cf});
  }
  if (!options.read_only && found.format != kStoreFormat) {
    families.push_back({FormatFamily(kStoreFormat), cf});
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      options.read_only ? rocksdb::DB::OpenForReadOnly(
                              db, options.dir, families, &store->handles_, &raw)
                        : rocksdb::DB::Open(db, options.dir, families,
                                            &store->handles_, &raw);
  if (!s.ok()) {
    std::string why = s.ToString();
    if (s.IsCorruption() || (s.IsIOError() && why.find("lock") == why.npos)) {
      return Refusal(options.dir, why);
    } else if (why.find("lock") != why.npos) {
      why += ". Is another delayd using this data directory?";
    }
    return Status::Internal("cannot open the store in " + options.dir + ": " +
                            why);
  }
  store->db_.reset(raw);
  store->meta_ = store->handles_[0];
  store->timers_ = store->handles_[1];
  store->payloads_ = store->handles_[2];
  store->events_ = store->handles_[3];
  const std::uint64_t recovered = store->db_->GetLatestSequenceNumber();
  if (marked) {
    if (std::string m = SequenceShortfall(options.dir, mark, recovered);
        !m.empty()) {
      if (!options.salvage && !options.read_only) {
        store->failed_ = true;  // Closes without writing (nor marking).
        store->Close();
        return Refusal(options.dir, m);
      }
      missing.push_back(std::move(m));
    }
  }
  if (Status s = store->RecordFixedEventIds(found.exists); !s.ok()) {
    store->failed_ = true;
    store->Close();
    return s;
  }
  if (options.read_only) {
    store->mark_problems_ = std::move(missing);
  } else {
    // (After the check against the mark, which this write would blur.)
    if (Status s = store->RecordFormat(found.exists); !s.ok()) {
      store->failed_ = true;
      store->Close();
      return s;
    }
    // What the store holds now is durable (RocksDB flushed what it replayed
    // from the log, and wrote a new MANIFEST; the format record is synced).
    store->durable_seq_ = store->db_->GetLatestSequenceNumber();
    if (Status s = store->UpdateMark(); !s.ok()) {
      store->failed_ = true;
      store->Close();
      return Status::Internal("cannot open the store in " + options.dir + ": " +
                              s.message());
    }
  }
  if (!store->salvage_copy_.empty()) {
    missing.push_back(store->NameDropped());
    for (const auto& m : missing) {
      store->salvage_dropped_ +=
          (store->salvage_dropped_.empty() ? "" : "; ") + m;
    }
  }
  store->writer_ = std::thread([s = store.get()] { s->WriterLoop(); });
  NameThread(store->writer_, "store-writer");
  store->syncer_ = std::thread([s = store.get()] { s->SyncLoop(); });
  NameThread(store->syncer_, "store-syncer");
  if (!options.read_only) {
    store->marker_ = std::thread([s = store.get()] { s->MarkLoop(); });
    NameThread(store->marker_, "store-marker");
  }
  *out = std::move(store);
  return Status::Ok();
}

Status RocksStore::RecordFormat(bool existed) {
  const std::string key(1, kFormatKey);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_, key, &value);
  std::uint32_t format = 1;  // (A store from before formats were recorded.)
  if (s.ok()) {
    if (value.size() != 4) {
      return Status::Internal(where_ + ": malformed store format record");
    }
    format = static_cast<std::uint32_t>(record::ReadBE(value.data(), 4));
    if (format > kStoreFormat) return NewerFormat(options_.dir, format);
    if (format == kStoreFormat) return Status::Ok();
  } else if (!s.IsNotFound()) {
    return Error("reading the store's format", s);
  }
  // Format 1 to 2 changes no record: the family made at open and this
  // record are the upgrade, each idempotent, so a crash between them leaves
  // a store the next start upgrades again.
  value.clear();
  record::AppendBE(value, kStoreFormat, 4);
  if (s = PutSynced(*db_, meta_, key, value); !s.ok()) {
    return Error("recording the store's format", s);
  }
  if (existed) {
    format_note_ = "upgraded the store in " + options_.dir + " from format " +
                   std::to_string(format) + " to " +
                   std::to_string(kStoreFormat) +
                   " (no record changed; delayd 0.1 no longer opens it)";
  }
  return Status::Ok();
}

Status RocksStore::RecordFixedEventIds(bool existed) {
  if (!options_.fixed_event_ids) return Status::Ok();
  const std::string key(1, kFixedIdsKey);
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), meta_, key, &value);
  if (s.ok()) {
    if (value.size() != 8) {
      return Status::Internal(where_ + ": malformed record of fixed event ids");
    }
    fixed_event_ids_from_ = record::ReadBE(value.data(), 8);
    return Status::Ok();
  }
  if (!s.IsNotFound()) return Error("reading the fixed event ids' record", s);
  std::uint64_t from = 0;
  if (existed) {
    std::uint64_t next_version = 0, next_event_seq = 0;
    if (Status st = LoadCounters(&next_version, &next_event_seq); !st.ok()) {
      return st;
    }
    if (next_version != 0 || next_event_seq != 0) {
      from = std::max(next_version, next_event_seq) + kCounterRoom;
    }
  }
  fixed_event_ids_from_ = from;
  if (options_.read_only) return Status::Ok();
  value.clear();
  record::AppendBE(value, from, 8);
  if (s = PutSynced(*db_, meta_, key, value); !s.ok()) {
    return Error("recording the fixed event ids", s);
  }
  if (from != 0) {
    format_note_ += std::string(format_note_.empty() ? "" : "; ") +
                    "--fixed-event-ids: timers set from now on fire with "
                    "their version as their event id (versions from " +
                    std::to_string(from << 10) +
                    "); those set before keep ids of their own";
  }
  return Status::Ok();
}

std::string RocksStore::NameDropped() {
  RocksOptions past;
  past.dir = salvage_copy_;
  past.read_only = true;
  past.skip_damaged_records = true;
  past.env = options_.env;
  std::unique_ptr<RocksStore> copy;
  std::vector<std::string> copy_names, names;
  if (Status s = Open(past, StoreHooks(), &copy);
      !s.ok() || !copy->LoadNamespaces(&copy_names).ok() ||
      !LoadNamespaces(&names).ok()) {
    return "which keys, the copy cannot tell";
  }
  const auto name_in = [](const std::vector<std::string>& names,
                          NamespaceId ns) {
    return ns < names.size() ? names[ns] : "#" + std::to_string(ns);
  };
  // (namespace, key, version) of what this store kept.
  using Entry = std::tuple<std::string, std::string, std::uint64_t>;
  std::set<Entry> timers, events;
  ForEachTimer([&](const StoredTimer& t) {
    timers.emplace(name_in(names, t.ns), t.key, t.version);
  });
  ForEachEvent([&](const StoredEvent& e) {
    events.emplace(name_in(names, e.ns), e.key, e.version);
  });
  constexpr std::size_t kNamed = 20;  // Keys named in the log, at most.
  std::vector<std::string> named;
  std::uint64_t dropped = 0;
  const auto note = [&](const std::set<Entry>& kept, NamespaceId ns,
                        std::string_view key, std::uint64_t version,
                        const char* what) {
    Entry entry(name_in(copy_names, ns), key, version);
    if (kept.count(entry)) return;
    ++dropped;
    if (named.size() < kNamed) {
      named.push_back(std::string(what) + " '" + std::get<0>(entry) + "'/'" +
                      std::get<1>(entry) + "' version " +
                      std::to_string(version));
    }
  };
  copy->ForEachTimer([&](const StoredTimer& t) {
    note(timers, t.ns, t.key, t.version, "timer");
  });
  copy->ForEachEvent([&](const StoredEvent& e) {
    note(events, e.ns, e.key, e.version, "event");
  });
  std::string text = "the copy's log, read past its damage, holds " +
                     std::to_string(dropped) +
                     " timers and events this store does not";
  for (std::size_t i = 0; i < named.size(); ++i) {
    text += (i ? ", " : ": ") + named[i];
  }
  if (dropped > named.size()) text += ", ...";
  return text;
}

}  // namespace delayd
