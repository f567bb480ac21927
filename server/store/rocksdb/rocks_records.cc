// Fates, policies and schedules in the RocksDB store, in the meta column
// family under their own prefixes.
//
// A fate record, keyed by 'f' and the event id (big-endian, so they are read
// in id order): attempts (4), flags (1: bit 0 dead, bit 1 a retry time
// follows), the retry time (8, if flagged), then the last error's text.
// Records written before retry times were kept have flags 0 or 1.
//
// A policy record, keyed by 'p' and the namespace name: the encoded policy.
//
// A schedule record, keyed by 's', the namespace id (4, big-endian) and the
// schedule's key: the schedule as the core encoded it. A dedup record
// (format 3), keyed by 'd', the namespace id and the key: the key's fate as
// the core encoded it.
#include <rocksdb/db.h>

#include "server/common/record_codec.h"
#include "server/store/rocksdb/rocks_store.h"

namespace delayd {
namespace {

constexpr char kFatePrefix = 'f';
constexpr char kPolicyPrefix = 'p';
constexpr char kSchedulePrefix = 's';
constexpr char kDedupPrefix = 'd';
constexpr std::uint8_t kDead = 1;
constexpr std::uint8_t kHasRetryAt = 2;

}  // namespace

std::string RocksStore::FateKey(std::uint64_t event_id) {
  std::string key(1, kFatePrefix);
  record::AppendBE(key, event_id, 8);
  return key;
}

std::string RocksStore::FateValue(const StoredFate& fate) {
  std::string value;
  record::AppendRaw(value, fate.attempts);
  std::uint8_t flags = fate.dead ? kDead : 0;
  if (fate.retry_at != 0) flags |= kHasRetryAt;
  record::AppendRaw(value, flags);
  if (fate.retry_at != 0) record::AppendRaw(value, fate.retry_at);
  value.append(fate.error);
  return value;
}

std::string RocksStore::PolicyKey(std::string_view name) {
  std::string key(1, kPolicyPrefix);
  key.append(name);
  return key;
}

std::string RocksStore::ScheduleKey(NamespaceId ns, std::string_view key) {
  std::string k(1, kSchedulePrefix);
  record::AppendBE(k, ns, 4);
  k.append(key);
  return k;
}

std::string RocksStore::DedupKey(NamespaceId ns, std::string_view key) {
  std::string k(1, kDedupPrefix);
  record::AppendBE(k, ns, 4);
  k.append(key);
  return k;
}

Status RocksStore::ForEachFate(
    const std::function<void(std::uint64_t, const StoredFate&)>& visit) {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), meta_));
  const std::string prefix(1, kFatePrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    const std::uint8_t flags =
        v.size() >= 5 ? static_cast<std::uint8_t>(v[4]) : 0xFF;
    if (k.size() != 9 || flags > (kDead | kHasRetryAt) ||
        ((flags & kHasRetryAt) && v.size() < 13)) {
      return Status::Internal(where_ + ": malformed event fate record");
    }
    const char* p = v.data();
    StoredFate fate;
    fate.attempts = record::ReadRaw<std::uint32_t>(p);
    p += 1;
    fate.dead = (flags & kDead) != 0;
    if (flags & kHasRetryAt) fate.retry_at = record::ReadRaw<WallNanos>(p);
    fate.error = std::string_view(p, v.data() + v.size() - p);
    visit(record::ReadBE(k.data() + 1, 8), fate);
  }
  if (!it->status().ok()) return Error("reading event fates", it->status());
  return Status::Ok();
}

Status RocksStore::LoadPolicies(
    std::vector<std::pair<std::string, std::string>>* policies) {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), meta_));
  const std::string prefix(1, kPolicyPrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    policies->emplace_back(it->key().ToString().substr(1),
                           it->value().ToString());
  }
  if (!it->status().ok()) return Error("reading policies", it->status());
  return Status::Ok();
}

Status RocksStore::ForEachKeyed(
    char prefix_byte, const char* what,
    const std::function<void(NamespaceId, std::string_view, std::string_view)>&
        visit) {
  // Read once, in order, as ForEachTimer reads timers: through the cache
  // would only evict what is hot.
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.readahead_size = 4 << 20;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, meta_));
  const std::string prefix(1, prefix_byte);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() < 6) {
      return Status::Internal(where_ + ": malformed " + what + " record");
    }
    visit(static_cast<NamespaceId>(record::ReadBE(k.data() + 1, 4)),
          std::string_view(k.data() + 5, k.size() - 5),
          std::string_view(it->value().data(), it->value().size()));
  }
  if (!it->status().ok()) {
    return Error((std::string("reading ") + what + " records").c_str(),
                 it->status());
  }
  return Status::Ok();
}

Status RocksStore::ForEachSchedule(
    const std::function<void(NamespaceId, std::string_view, std::string_view)>&
        visit) {
  return ForEachKeyed(kSchedulePrefix, "schedule", visit);
}

Status RocksStore::ForEachDedup(
    const std::function<void(NamespaceId, std::string_view, std::string_view)>&
        visit) {
  return ForEachKeyed(kDedupPrefix, "dedup", visit);
}

}  // namespace delayd
