// Event fates in the store: one record per event that failed a delivery, in
// the meta column family under their own prefix, keyed by event id
// (big-endian, so they are read in id order). Written in the batches of the
// dispatcher, beside the event's own records.
#include <rocksdb/db.h>

#include "server/common/record_codec.h"
#include "server/store/store.h"

namespace delayd {
namespace {

constexpr char kFatePrefix = 'f';

std::string FateKey(std::uint64_t event_id) {
  std::string key(1, kFatePrefix);
  record::AppendBE(key, event_id, 8);
  return key;
}

}  // namespace

void Store::Batch::PutFate(std::uint64_t event_id, const StoredFate& fate) {
  std::string value;
  record::AppendRaw(value, fate.attempts);
  record::AppendRaw<std::uint8_t>(value, fate.dead ? 1 : 0);
  value.append(fate.error);
  batch_.Put(store_->meta_, FateKey(event_id), value);
}

void Store::Batch::DeleteFate(std::uint64_t event_id) {
  batch_.Delete(store_->meta_, FateKey(event_id));
}

Status Store::ForEachFate(
    const std::function<void(std::uint64_t, const StoredFate&)>& visit) {
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), meta_));
  const std::string prefix(1, kFatePrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    const rocksdb::Slice k = it->key();
    const rocksdb::Slice v = it->value();
    if (k.size() != 9 || v.size() < 5 || static_cast<std::uint8_t>(v[4]) > 1) {
      return Status::Internal("store in " + options_.dir +
                              ": malformed event fate record");
    }
    const char* p = v.data();
    StoredFate fate;
    fate.attempts = record::ReadRaw<std::uint32_t>(p);
    fate.dead = record::ReadRaw<std::uint8_t>(p) == 1;
    fate.error = std::string_view(p, v.data() + v.size() - p);
    visit(record::ReadBE(k.data() + 1, 8), fate);
  }
  if (!it->status().ok()) return Error("reading event fates", it->status());
  return Status::Ok();
}

}  // namespace delayd
