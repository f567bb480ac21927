// Namespace policies in the store: one record per name in the meta column
// family, under their own prefix, written and synced one at a time (they
// change rarely, and an acknowledged change must survive a crash).
#include <rocksdb/db.h>

#include "server/store.h"

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
  if (Status failed = Failed(); !failed.ok()) return failed;
  std::shared_lock lock(close_mu_);
  if (closed_) return Status::Unavailable("the store is closed");
  rocksdb::WriteOptions wo;
  wo.sync = true;
  const std::uint64_t sequence = db_->GetLatestSequenceNumber();
  const std::string key = PolicyKey(name);
  auto s = policy.empty()
               ? db_->Delete(wo, meta_, key)
               : db_->Put(wo, meta_, key,
                          rocksdb::Slice(policy.data(), policy.size()));
  if (!s.ok()) {
    Status error = Error("writing a namespace policy", s);
    NoteWriteError(error);
    return error;
  }
  NoteDurable(sequence);  // The synced write synced the log before it too.
  return Status::Ok();
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
