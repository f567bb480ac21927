#include "server/store/memory/memory_store.h"

#include <algorithm>

#include "server/common/stable_hash.h"
#include "server/common/thread_name.h"

namespace delayd {

// What a view keeps: the batches queued when it was taken.
class MemoryStore::MemoryView final : public Store::View {
 public:
  std::vector<std::shared_ptr<const Batch>> queued;
};

StoreOpener MemoryStore::Opener(std::shared_ptr<Disk> disk) {
  return [disk](StoreHooks hooks, std::unique_ptr<Store>* out) {
    *out = std::make_unique<MemoryStore>(disk, std::move(hooks));
    return Status::Ok();
  };
}

MemoryStore::MemoryStore(std::shared_ptr<Disk> disk, StoreHooks hooks)
    : disk_(std::move(disk)),
      hooks_(std::move(hooks)),
      shared_(disk_->shared_partitions()),
      fixed_ids_from_(disk_->fixed_event_ids_from()) {
  writer_ = std::thread([this] { WriterLoop(); });
  NameThread(writer_, "store-writer");
}

MemoryStore::~MemoryStore() { Close(); }

Status MemoryStore::LoadNamespaces(std::vector<std::string>* names) {
  MutexLock lock(&disk_->mu_);
  *names = disk_->namespaces_;
  return Status::Ok();
}

Status MemoryStore::LoadCounters(std::uint64_t* next_version,
                                 std::uint64_t* next_event_seq) {
  MutexLock lock(&disk_->mu_);
  for (const auto& [partition, limits] : disk_->counters_) {
    *next_version = std::max(*next_version, limits.first);
    *next_event_seq = std::max(*next_event_seq, limits.second);
  }
  return Status::Ok();
}

Status MemoryStore::ForEachTimer(
    const std::function<void(const StoredTimer&)>& visit) {
  MutexLock lock(&disk_->mu_);
  for (const auto& [id, t] : disk_->timers_) {
    visit(StoredTimer{t.ns, t.key, t.fire_time, t.version, id});
  }
  return Status::Ok();
}

Status MemoryStore::ForEachEvent(
    const std::function<void(const StoredEvent&)>& visit) {
  MutexLock lock(&disk_->mu_);
  for (const auto& [id, e] : disk_->events_) {
    StoredEvent event = e.event;
    event.key = e.key;
    visit(event);
  }
  return Status::Ok();
}

Status MemoryStore::ForEachFate(
    const std::function<void(std::uint64_t, const StoredFate&)>& visit) {
  MutexLock lock(&disk_->mu_);
  for (const auto& [id, f] : disk_->fates_) {
    visit(id, StoredFate{f.attempts, f.dead, f.error, f.retry_at});
  }
  return Status::Ok();
}

Status MemoryStore::LoadPartition(std::uint32_t part,
                                  std::uint64_t* version_limit,
                                  std::uint64_t* event_seq_limit,
                                  const PartitionVisitor& visit) {
  MutexLock lock(&disk_->mu_);
  if (disk_->shared_ == 0)
    return Store::LoadPartition(part, nullptr, nullptr, {});
  auto name = [this](NamespaceId ns) -> std::string_view {
    disk_->mu_.AssertHeld();  // (Called from LoadPartition's own scope.)
    if (ns < disk_->namespaces_.size()) return disk_->namespaces_[ns];
    return {};
  };
  auto in = [&](NamespaceId ns, std::string_view key) {
    disk_->mu_.AssertHeld();  // (Called from LoadPartition's own scope.)
    return StablePartition(name(ns), key, disk_->shared_) == part;
  };
  auto counters = disk_->counters_.find(part);
  *version_limit =
      counters == disk_->counters_.end() ? 0 : counters->second.first;
  *event_seq_limit =
      counters == disk_->counters_.end() ? 0 : counters->second.second;
  for (const auto& [id, data] : disk_->schedules_) {
    if (in(id.first, id.second))
      visit.schedule(name(id.first), id.second, data);
  }
  for (const auto& [id, data] : disk_->dedup_) {
    if (visit.dedup && in(id.first, id.second))
      visit.dedup(name(id.first), id.second, data);
  }
  for (const auto& [id, t] : disk_->timers_) {
    if (in(t.ns, t.key)) {
      visit.timer(name(t.ns),
                  StoredTimer{t.ns, t.key, t.fire_time, t.version, id});
    }
  }
  for (const auto& [id, e] : disk_->events_) {
    if (!in(e.event.ns, e.key)) continue;
    StoredEvent event = e.event;
    event.key = e.key;
    auto f = disk_->fates_.find(id);
    if (f == disk_->fates_.end()) {
      visit.event(name(e.event.ns), event, nullptr);
      continue;
    }
    const StoredFate fate{f->second.attempts, f->second.dead, f->second.error,
                          f->second.retry_at};
    visit.event(name(e.event.ns), event, &fate);
  }
  return Status::Ok();
}

void MemoryStore::SetHeld(const Held& held) {
  MutexLock lock(&mu_);
  held_ = held;
}

Status MemoryStore::LoadPolicies(
    std::vector<std::pair<std::string, std::string>>* policies) {
  MutexLock lock(&disk_->mu_);
  for (const auto& p : disk_->policies_) policies->push_back(p);
  return Status::Ok();
}

Status MemoryStore::ForEachSchedule(
    const std::function<void(NamespaceId, std::string_view, std::string_view)>&
        visit) {
  MutexLock lock(&disk_->mu_);
  for (const auto& [id, data] : disk_->schedules_)
    visit(id.first, id.second, data);
  return Status::Ok();
}

Status MemoryStore::ForEachDedup(
    const std::function<void(NamespaceId, std::string_view, std::string_view)>&
        visit) {
  MutexLock lock(&disk_->mu_);
  for (const auto& [id, data] : disk_->dedup_) visit(id.first, id.second, data);
  return Status::Ok();
}

void MemoryStore::Enqueue(Batch& batch, std::function<void()> written,
                          Done done) {
  std::function<void(std::function<void()>)> executor;
  Status refused;
  {
    MutexLock lock(&mu_);
    if (failed_) refused = Status::Unavailable("memory store: failed before");
    if (closing_) refused = Status::Unavailable("the store is closed");
    if (refused.ok() && shared_ != 0) {
      for (std::uint32_t p : batch.touched()) {
        if (!held_.contains(p)) {
          refused = Status::Unavailable("partition " + std::to_string(p) +
                                        " is not held: not written");
        }
      }
    }
    if (refused.ok()) {
      queue_.push_back(Queued{std::make_shared<const Batch>(std::move(batch)),
                              std::move(written), std::move(done)});
    }
    executor = executor_;
  }
  batch.Clear();
  if (refused.ok()) {
    cv_.Signal();
  } else if (done) {
    auto run = [done = std::move(done), refused] { done(refused); };
    if (executor) {
      executor(std::move(run));
    } else {
      run();
    }
  }
}

void MemoryStore::Commit(Batch& batch, Done done) {
  Enqueue(batch, nullptr, std::move(done));
}

void MemoryStore::Write(Batch& batch, std::function<void()> written,
                        Done durable) {
  Enqueue(batch, std::move(written), std::move(durable));
}

void MemoryStore::CommitSynced(Batch& batch, Done done) {
  Enqueue(batch, nullptr, std::move(done));
}

Status MemoryStore::WriteNow(Batch& batch) {
  {
    MutexLock lock(&mu_);
    if (closing_) {
      batch.Clear();
      return Status::Unavailable("the store is closed");
    }
  }
  MutexLock lock(&disk_->mu_);
  if (!disk_->fail_.ok()) return disk_->fail_;
  disk_->Apply(batch);
  batch.Clear();
  return Status::Ok();
}

void MemoryStore::WriterLoop() {
  MutexLock lock(&mu_);
  for (;;) {
    while (queue_.empty() && !closing_) cv_.Wait(&mu_);
    if (queue_.empty()) break;
    Queued q = std::move(queue_.front());
    writing_ = true;
    busy_since_ = std::chrono::steady_clock::now();
    Status status;
    {
      MutexUnlock unlock(&mu_);
      MutexLock disk(&disk_->mu_);
      while (disk_->held_) disk_->released_.Wait(&disk_->mu_);
      status = disk_->fail_;
      if (status.ok() && q.batch) disk_->Apply(*q.batch);
    }
    queue_.pop_front();
    writing_ = false;
    completing_ = true;
    if (!status.ok() && !failed_) {
      failed_ = true;
      if (hooks_.on_error) hooks_.on_error(status);
      if (hooks_.on_write_failure) hooks_.on_write_failure(status);
    }
    const auto executor = inline_completions_ ? nullptr : executor_;
    {
      MutexUnlock unlock(&mu_);
      if (status.ok() && q.written) q.written();
      if (q.done) {
        auto run = [done = std::move(q.done), status] { done(status); };
        if (executor) {
          executor(std::move(run));
        } else {
          run();
        }
      }
    }
    completing_ = false;
    idle_.SignalAll();
  }
}

Status MemoryStore::Failed() const {
  MutexLock lock(&mu_);
  return failed_ ? Status::Unavailable("memory store: failed before")
                 : Status::Ok();
}

void MemoryStore::SetExecutor(
    std::function<void(std::function<void()>)> executor) {
  MutexLock lock(&mu_);
  executor_ = std::move(executor);
}

void MemoryStore::SetInlineCompletions(bool on) {
  MutexLock lock(&mu_);
  inline_completions_ = on;
}

bool MemoryStore::Backlogged(std::string*) const { return false; }

std::chrono::nanoseconds MemoryStore::Busy() const {
  MutexLock lock(&mu_);
  if (!writing_) return std::chrono::nanoseconds(0);
  return std::chrono::steady_clock::now() - busy_since_;
}

void MemoryStore::Flush(std::function<void()> done) {
  Batch empty;
  Enqueue(empty, nullptr, [done](Status) { done(); });
}

void MemoryStore::Sync() {
  MutexLock lock(&mu_);
  while (!queue_.empty() || writing_ || completing_) idle_.Wait(&mu_);
}

void MemoryStore::Close() {
  {
    MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
  }
  cv_.SignalAll();
  if (writer_.joinable()) writer_.join();
}

std::shared_ptr<const Store::View> MemoryStore::NewView() {
  auto view = std::make_shared<MemoryView>();
  MutexLock lock(&mu_);
  for (const Queued& q : queue_) {
    if (q.batch) view->queued.push_back(q.batch);
  }
  return view;
}

Status MemoryStore::GetPayloads(std::span<const std::uint64_t> ids,
                                std::vector<std::string>* payloads,
                                std::vector<bool>* readable) {
  payloads->assign(ids.size(), std::string());
  readable->assign(ids.size(), false);
  MutexLock lock(&disk_->mu_);
  Status first;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto it = disk_->payloads_.find(ids[i]);
    if (it == disk_->payloads_.end()) {
      if (first.ok()) {
        first = Status::Internal("memory store: no payload " +
                                 std::to_string(ids[i]));
      }
      continue;
    }
    (*payloads)[i] = it->second;
    (*readable)[i] = true;
  }
  return first;
}

Status MemoryStore::GetPayloads(std::span<const std::uint64_t> ids,
                                const View& view,
                                std::vector<std::string>* payloads,
                                std::vector<bool>* readable,
                                std::vector<bool>* gone) {
  payloads->assign(ids.size(), std::string());
  readable->assign(ids.size(), false);
  gone->assign(ids.size(), false);
  // What the view's queued batches say of each id: the last word wins.
  const auto queued = PayloadsIn(static_cast<const MemoryView&>(view).queued);
  MutexLock lock(&disk_->mu_);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (auto q = queued.find(ids[i]); q != queued.end()) {
      (*gone)[i] = !q->second.has_value();
      if (q->second) {
        (*payloads)[i] = *q->second;
        (*readable)[i] = true;
      }
      continue;
    }
    auto it = disk_->payloads_.find(ids[i]);
    if (it == disk_->payloads_.end()) {
      (*gone)[i] = true;  // Deleted since the view (nothing here is damaged).
      continue;
    }
    (*payloads)[i] = it->second;
    (*readable)[i] = true;
  }
  return Status::Ok();
}

Status MemoryStore::Backup(const std::string&) {
  return Status::FailedPrecondition("the memory store keeps no backups");
}

}  // namespace delayd
