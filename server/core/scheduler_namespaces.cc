// Scheduler: the namespace table. A namespace is created by its first write
// (Intern), found by reads (Find), and freed once nothing uses it (Free);
// subscribers may wait for one that does not exist yet.
#include <algorithm>
#include <map>

#include "server/common/stable_hash.h"
#include "server/core/scheduler.h"

namespace delayd {
NamespaceId Scheduler::AddNamespace(std::string name) {
  if (!free_ids_.empty()) {
    const NamespaceId id = free_ids_.back();
    free_ids_.pop_back();
    stable_seeds_[id] = StableSeed(name);
    dispatchers_[id]->Rename(name);
    SetNamespacePolicy(id, PolicyLocked(name));
    counters_.of(id).ResetTotals();
    ns_ids_.emplace(std::move(name), id);
    return id;
  }
  const NamespaceId id = NewDispatcher(name);
  ns_ids_.emplace(std::move(name), id);
  return id;
}

void Scheduler::RestoreNamespaces(std::vector<std::string> names) {
  // Ids are kept as stored: a freed id is not handed to the name after it,
  // whose records name its own id.
  for (std::string& name : names) {
    const NamespaceId id = NewDispatcher(name);
    if (name.empty()) {
      free_ids_.push_back(id);
    } else {
      ns_ids_.emplace(std::move(name), id);
    }
  }
  // The lowest freed id is reused first.
  std::reverse(free_ids_.begin(), free_ids_.end());
}

NamespaceId Scheduler::NewDispatcher(const std::string& name) {
  const auto id = static_cast<NamespaceId>(owned_dispatchers_.size());
  stable_seeds_[id] = StableSeed(name);
  owned_dispatchers_.push_back(std::make_unique<Dispatcher>(
      executor(), timers(), ReadExecutor(), clock_, name, id, counters_,
      metrics_, options_.limits, store_.get(), refs_.get()));
  dispatchers_[id] = owned_dispatchers_.back().get();
  dispatchers_[id]->SetWriteAcksHere(WritesHere());
  if (shared_partitions_) {
    dispatchers_[id]->SetPartitionOf(
        [this](NamespaceId ns, std::string_view key) {
          return PartitionOf(ns, key);
        });
  }
  // A schedule's run closed: its schedule's partition hears of it (that may
  // release a run its overlap policy held back).
  dispatchers_[id]->SetRunClosed([this](NamespaceId ns, std::string_view run) {
    std::string_view key;
    std::uint64_t number = 0;
    if (SplitRunKey(run, &key, &number)) {
      partitions_[PartitionOf(ns, key)]->RunState(ns, run, /*open=*/false);
    }
  });
  // Acknowledged keys of a namespace with a dedup window: their partitions
  // count the window from now.
  dispatchers_[id]->SetSettled(
      [this](NamespaceId ns,
             std::vector<std::pair<std::string, std::uint64_t>> keys) {
        std::map<std::uint32_t,
                 std::vector<std::pair<std::string, std::uint64_t>>>
            by_partition;
        for (auto& k : keys) {
          by_partition[PartitionOf(ns, k.first)].push_back(std::move(k));
        }
        const WallNanos now = clock_.Wall();
        for (const auto& [p, of_p] : by_partition) {
          partitions_[p]->Settled(ns, of_p, now);
        }
      });
  if (!name.empty()) SetNamespacePolicy(id, PolicyLocked(name));
  return id;
}

void Scheduler::SetNamespacePolicy(NamespaceId id, const Policy& policy) {
  dispatchers_[id]->SetPolicy(policy);
  dedup_windows_.Set(id, policy.dedup_window);
}

void Scheduler::Free(NamespaceId id) {
  if (shutting_down_) return;  // The store may be closing.
  WriterLock lock(&ns_mutex_);
  // Revived since (a pin or subscriber taken under this lock), or freed.
  if (refs_->Get(id) != 0 || dispatchers_[id]->name().empty()) return;
  if (store_) {
    // Kept if the store failed: it is freed again when next used and left.
    if (!store_->Failed().ok()) return;
    Batch batch;
    batch.PutNamespace(id, "");
    store_->Commit(batch, nullptr);
  }
  ns_ids_.erase(dispatchers_[id]->name());
  dispatchers_[id]->Rename("");
  free_ids_.push_back(id);
}

void Scheduler::ForEachNamespace(
    const std::function<void(const std::string&, const NamespaceCounters&)>&
        visit,
    bool waiting) {
  ReaderLock lock(&ns_mutex_);
  for (const auto& [name, id] : ns_ids_) visit(name, counters_.of(id));
  if (!waiting) return;
  for (const auto& [name, subs] : waiting_) {
    NamespaceCounters figures;
    for (const Waiting& w : subs) {
      (w.options.watcher ? figures.watchers : figures.workers).fetch_add(1);
    }
    visit(name, figures);
  }
}

bool Scheduler::FiguresOf(
    std::string_view name,
    const std::function<void(const NamespaceCounters&)>& visit) {
  ReaderLock lock(&ns_mutex_);
  if (auto it = ns_ids_.find(name); it != ns_ids_.end()) {
    visit(counters_.of(it->second));
    return true;
  }
  auto w = waiting_.find(name);
  if (w == waiting_.end()) return false;
  NamespaceCounters figures;
  for (const Waiting& sub : w->second) {
    (sub.options.watcher ? figures.watchers : figures.workers).fetch_add(1);
  }
  visit(figures);
  return true;
}

std::size_t Scheduler::namespaces() {
  ReaderLock lock(&ns_mutex_);
  return ns_ids_.size();
}

Status Scheduler::Intern(std::string_view name, NamespacePin* pin) {
  if (auto found = Find(name)) {
    *pin = std::move(*found);
    return Status::Ok();
  }
  const std::string key(name);
  WriterLock lock(&ns_mutex_);
  auto it = ns_ids_.find(key);
  if (it != ns_ids_.end()) {
    const NamespaceId id = it->second;
    refs_->Add(id);
    *pin = NamespacePin::Adopt(refs_.get(), id);
    return Status::Ok();
  }
  if (ns_ids_.size() >= options_.limits.max_namespaces) {
    return Status::ResourceExhausted(
        "namespace limit of " + std::to_string(options_.limits.max_namespaces) +
        " reached");
  }
  // A new namespace's name is on disk before any timer refers to it.
  if (store_) {
    const auto next = free_ids_.empty()
                          ? static_cast<NamespaceId>(owned_dispatchers_.size())
                          : free_ids_.back();
    if (Status s = store_->Failed(); !s.ok()) return s;
    Batch batch;
    batch.PutNamespace(next, key);
    store_->Commit(batch, nullptr);
  }
  const NamespaceId id = AddNamespace(key);
  refs_->Add(id);  // The caller's pin.
  *pin = NamespacePin::Adopt(refs_.get(), id);
  // Subscribers that waited for the namespace move in.
  if (auto w = waiting_.find(key); w != waiting_.end()) {
    for (Waiting& sub : w->second) {
      CountWaiting(sub, -1);  // The dispatcher counts it from now on.
      refs_->Add(id);         // Released when it unsubscribes.
      dispatchers_[id]->Subscribe(sub.id, std::move(sub.subscriber),
                                  sub.options, [] {});
    }
    waiting_.erase(w);
  }
  return Status::Ok();
}

void Scheduler::CountWaiting(const Waiting& w, int delta) {
  auto& counter = w.options.watcher ? counters_.watchers : counters_.workers;
  if (delta > 0) {
    counter.fetch_add(1);
  } else {
    counter.fetch_sub(1);
  }
}

std::optional<NamespacePin> Scheduler::Find(std::string_view name) {
  ReaderLock lock(&ns_mutex_);
  auto it = ns_ids_.find(name);
  if (it == ns_ids_.end()) return std::nullopt;
  refs_->Add(it->second);  // The caller's pin.
  return NamespacePin::Adopt(refs_.get(), it->second);
}

void Scheduler::Subscribe(std::string_view name, std::uint64_t id,
                          std::shared_ptr<Subscriber> subscriber,
                          SubscribeOptions options,
                          std::function<void()> done) {
  bool waits = false;
  {
    WriterLock lock(&ns_mutex_);
    auto it = ns_ids_.find(name);
    if (it != ns_ids_.end()) {
      refs_->Add(it->second);  // Released when it unsubscribes.
      // (A post to the dispatcher's strand.)
      dispatchers_[it->second]->Subscribe(id, std::move(subscriber), options,
                                          std::move(done));
      return;
    }
    if (!shutting_down_) {
      auto w = waiting_.find(name);
      if (w == waiting_.end()) {
        w = waiting_.emplace(std::string(name), std::vector<Waiting>()).first;
      }
      w->second.push_back(Waiting{id, subscriber, options});
      CountWaiting(w->second.back(), +1);
      waits = true;
    }
  }
  if (waits) {
    done();
  } else {
    subscriber->End(ShuttingDown());
  }
}

void Scheduler::Unsubscribe(std::string_view name, std::uint64_t id) {
  WriterLock lock(&ns_mutex_);
  if (auto it = ns_ids_.find(name); it != ns_ids_.end()) {
    dispatchers_[it->second]->Unsubscribe(id);
    return;
  }
  auto w = waiting_.find(name);
  if (w == waiting_.end()) return;
  std::erase_if(w->second, [this, id](const Waiting& s) {
    if (s.id != id) return false;
    CountWaiting(s, -1);
    return true;
  });
  if (w->second.empty()) waiting_.erase(w);
}

}  // namespace delayd
