// Reads of payloads that see the write queue, and the views they read
// through (rocks_store.h, "Reads").
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "server/store/rocksdb/rocks_store.h"

namespace delayd {

// What a view keeps: the batches queued when it was taken, and where its
// part of the store's log of deleted payload ids starts (an absolute
// position: deletes_base_ counts what was dropped).
struct RocksStore::ViewState {
  std::vector<std::shared_ptr<const rocksdb::WriteBatch>> queued;
  std::uint64_t deletes_from = 0;
};

class RocksStore::RocksView final : public Store::View {
 public:
  explicit RocksView(RocksStore* store) : store_(store) {}
  ~RocksView() override {
    MutexLock lock(&store_->mu_);
    auto& views = store_->views_;
    views.erase(std::find(views.begin(), views.end(), &state));
    store_->TrimDeletes();
  }
  ViewState state;

 private:
  RocksStore* const store_;
};

namespace {

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

}  // namespace

std::shared_ptr<const Store::View> RocksStore::NewView() {
  auto view = std::make_shared<RocksView>(this);
  MutexLock lock(&mu_);
  // (The writer's group stays in queue_ until it is written.)
  view->state.queued.reserve(queue_.size());
  for (const Queued& q : queue_) {
    if (q.batch) view->state.queued.push_back(q.batch);
  }
  view->state.deletes_from = deletes_base_ + deletes_.size();
  views_.push_back(&view->state);
  return view;
}

void RocksStore::TrimDeletes() {
  const std::uint64_t end = deletes_base_ + deletes_.size();
  // Back to the oldest view's start, and no more than
  // options_.max_deletes_kept.
  std::uint64_t from = end;
  for (const ViewState* view : views_) {
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

Status RocksStore::GetPayloads(std::span<const std::uint64_t> ids,
                               std::vector<std::string>* payloads,
                               std::vector<bool>* readable) {
  std::vector<bool> gone;
  return Read(ids, nullptr, payloads, readable, &gone);
}

bool RocksStore::ReadCached(std::span<const std::uint64_t> ids,
                            std::vector<std::string>* payloads,
                            std::vector<bool>* readable) {
  if (!options_.cached_reads || ids.empty()) return false;
  // (Closing holds close_mu_ while it flushes: not waited for.)
  if (!close_mu_.TryLockShared()) return false;
  const bool read = !closed_ && ReadCachedOpen(ids, payloads, readable);
  close_mu_.UnlockShared();
  return read;
}

bool RocksStore::ReadCachedOpen(std::span<const std::uint64_t> ids,
                                std::vector<std::string>* payloads,
                                std::vector<bool>* readable) {
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

std::vector<rocksdb::Status> RocksStore::MultiGetPayloads(
    const rocksdb::ReadOptions& options,
    const std::vector<rocksdb::Slice>& keys, std::vector<std::string>* values) {
  const std::vector<rocksdb::ColumnFamilyHandle*> families(keys.size(),
                                                           payloads_);
  return db_->MultiGet(options, families, keys, values);
}

Status RocksStore::GetPayloads(std::span<const std::uint64_t> ids,
                               const View& view,
                               std::vector<std::string>* payloads,
                               std::vector<bool>* readable,
                               std::vector<bool>* gone) {
  return Read(ids, &static_cast<const RocksView&>(view), payloads, readable,
              gone);
}

void RocksStore::FindDeletedSince(
    const ViewState& view,
    const std::unordered_map<std::uint64_t, std::size_t>& missing,
    std::vector<bool>& deleted) {
  // The log is scanned kSlice entries at a time, letting mu_ go between
  // slices: after a read held up for long, the part to scan may be up to
  // max_deletes_kept long (1Mi ids took 3.4-4.0 ms to scan on a 2-core
  // test machine; a slice, about 15 us), and Commit must not wait on it.
  // The view, alive, keeps its part from being trimmed, but for the bound;
  // deletes appended after the scan starts are of groups written after the
  // payloads were found missing, so the scan stops at the end it first saw.
  constexpr std::uint64_t kSlice = 4096;
  MutexLock lock(&mu_);
  const std::uint64_t end = deletes_base_ + deletes_.size();
  for (std::uint64_t at = view.deletes_from; at < end;) {
    if (at < deletes_base_) {
      // Too old to tell (more deletes since than are kept): taken as gone.
      for (const auto& [id, i] : missing) deleted[i] = true;
      return;
    }
    const std::uint64_t stop = std::min(end, at + kSlice);
    for (; at < stop; ++at) {
      auto it = missing.find(deletes_[at - deletes_base_]);
      if (it != missing.end()) deleted[it->second] = true;
    }
    if (at < end) {
      MutexUnlock unlock(&mu_);  // Lets Commit in between slices.
    }
  }
}

Status RocksStore::Read(std::span<const std::uint64_t> ids,
                        const RocksView* view,
                        std::vector<std::string>* payloads,
                        std::vector<bool>* readable, std::vector<bool>* gone) {
  payloads->assign(ids.size(), std::string());
  readable->assign(ids.size(), false);
  gone->assign(ids.size(), false);
  if (ids.empty()) return Status::Ok();
  DiskOp op(*this);
  if (options_.before_payload_read) options_.before_payload_read();
  // Payloads still queued when the view was taken: the last write or delete
  // of each wins.
  std::vector<std::string> queued(ids.size());
  std::vector<bool> found(ids.size(), false);
  std::vector<bool>& deleted = *gone;
  if (view != nullptr && !view->state.queued.empty()) {
    std::unordered_map<std::string, std::size_t> wanted;
    for (std::size_t i = 0; i < ids.size(); ++i) wanted[IdKey(ids[i])] = i;
    FindPayloads finder(payloads_->GetID(), wanted, queued, found, deleted);
    for (const auto& batch : view->state.queued) batch->Iterate(&finder);
  }
  std::vector<std::string> keys;
  std::vector<rocksdb::Slice> slices;
  std::vector<std::size_t> from_db;
  keys.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (!found[i]) {
      keys.push_back(IdKey(ids[i]));
      from_db.push_back(i);
    } else if (!deleted[i]) {
      (*payloads)[i] = std::move(queued[i]);
      (*readable)[i] = true;
    }
  }
  if (from_db.empty()) return Status::Ok();
  for (const std::string& k : keys) slices.emplace_back(k);
  ReaderLock lock(&close_mu_);
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
    if (!missing.empty()) FindDeletedSince(view->state, missing, deleted);
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

}  // namespace delayd
