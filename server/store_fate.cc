// Event fates in the store: one record per event that failed a delivery, in
// the meta column family under their own prefix, keyed by event id
// (big-endian, so they are read in id order). Written in the batches of the
// dispatcher, beside the event's own records.
#include <rocksdb/db.h>

#include <cstring>

#include "server/store.h"

namespace delayd {
namespace {

constexpr char kFatePrefix = 'f';

std::string FateKey(std::uint64_t event_id) {
  std::string key(1, kFatePrefix);
  for (int shift = 56; shift >= 0; shift -= 8) {
    key.push_back(static_cast<char>(event_id >> shift));
  }
  return key;
}

}  // namespace

void Store::Batch::PutFate(std::uint64_t event_id, const StoredFate& fate) {
  std::string value(5, '\0');
  std::memcpy(value.data(), &fate.attempts, 4);
  value[4] = fate.dead ? 1 : 0;
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
    std::uint64_t id = 0;
    for (int i = 1; i < 9; ++i) {
      id = id << 8 | static_cast<std::uint8_t>(k[i]);
    }
    StoredFate fate;
    std::memcpy(&fate.attempts, v.data(), 4);
    fate.dead = v[4] == 1;
    fate.error = std::string_view(v.data() + 5, v.size() - 5);
    visit(id, fate);
  }
  if (!it->status().ok()) return Error("reading event fates", it->status());
  return Status::Ok();
}

}  // namespace delayd
