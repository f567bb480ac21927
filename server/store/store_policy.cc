// Namespace policies in the store: one record per name in the meta column
// family, under their own prefix, written and synced one at a time (they
// change rarely, and an acknowledged change must survive a crash).
#include <rocksdb/db.h>

#include "server/store/store.h"

namespace delayd {
namespace {

constexpr char kPolicyPrefix = 'p';

std::string PolicyKey(std::string_view name) {
  std::string key(1, kPolicyPrefix);
  key.append(name);
  return key;
}

}  // namespace

Status Store::PutPolicy(std::string_view name, std::string_view policy) {
  rocksdb::WriteBatch batch;
  if (policy.empty()) {
    batch.Delete(meta_, PolicyKey(name));
  } else {
    batch.Put(meta_, PolicyKey(name),
              rocksdb::Slice(policy.data(), policy.size()));
  }
  return WriteSynced(batch, "writing a namespace policy");
}

Status Store::LoadPolicies(
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

}  // namespace delayd
