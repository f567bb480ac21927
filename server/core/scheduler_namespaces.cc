// Scheduler: the namespace table. A namespace is created by its first write
// (Intern), found by reads (Find), and freed once nothing uses it (Free);
// subscribers may wait for one that does not exist yet.
#include "server/core/scheduler.h"

namespace delayd {
NamespaceId Scheduler::AddNamespace(std::string name) {
  if (!name.empty() && !free_ids_.empty()) {
    const NamespaceId id = free_ids_.back();
    free_ids_.pop_back();
    dispatchers_[id]->Rename(name);
    dispatchers_[id]->SetPolicy(PolicyLocked(name));
    counters_.of(id).ResetTotals();
    ns_ids_.emplace(std::move(name), id);
    return id;
  }
  const auto id = static_cast<NamespaceId>(owned_dispatchers_.size());
  owned_dispatchers_.push_back(std::make_unique<Dispatcher>(
      io_, ReadExecutor(), clock_, name, id, counters_, metrics_,
      options_.limits, store_.get(), refs_.get()));
  dispatchers_[id] = owned_dispatchers_.back().get();
  if (!name.empty()) dispatchers_[id]->SetPolicy(PolicyLocked(name));
  if (name.empty()) {
    free_ids_.push_back(id);  // Recovery: an id freed before the restart.
  } else {
    ns_ids_.emplace(std::move(name), id);
  }
  return id;
}

void Scheduler::Free(NamespaceId id) {
  if (shutting_down_) return;  // The store may be closing.
  std::unique_lock lock(ns_mutex_);
  // Revived since (a pin or subscriber taken under this lock), or freed.
  if (refs_->Get(id) != 0 || dispatchers_[id]->name().empty()) return;
  if (store_) {
    if (Status s = store_->PutNamespace(id, ""); !s.ok()) {
      // Kept: it is freed again when next used and left.
      return;
    }
  }
  ns_ids_.erase(dispatchers_[id]->name());
  dispatchers_[id]->Rename("");
  free_ids_.push_back(id);
}

void Scheduler::ForEachNamespace(
    const std::function<void(const std::string&, const NamespaceCounters&)>&
        visit) {
  std::shared_lock lock(ns_mutex_);
  for (const auto& [name, id] : ns_ids_) visit(name, counters_.of(id));
}

std::size_t Scheduler::namespaces() {
  std::shared_lock lock(ns_mutex_);
  return ns_ids_.size();
}

Status Scheduler::Intern(std::string_view name, NamespaceId* id) {
  if (Find(name, id)) return Status::Ok();
  const std::string key(name);
  std::unique_lock lock(ns_mutex_);
  auto it = ns_ids_.find(key);
  if (it != ns_ids_.end()) {
    *id = it->second;
    refs_->Add(*id);
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
    if (Status s = store_->PutNamespace(next, key); !s.ok()) return s;
  }
  *id = AddNamespace(key);
  refs_->Add(*id);  // The caller's pin.
  // Subscribers that waited for the namespace move in.
  if (auto w = waiting_.find(key); w != waiting_.end()) {
    for (Waiting& sub : w->second) {
      CountWaiting(sub, -1);  // The dispatcher counts it from now on.
      refs_->Add(*id);        // Released when it unsubscribes.
      dispatchers_[*id]->Subscribe(sub.id, std::move(sub.subscriber),
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

bool Scheduler::Find(std::string_view name, NamespaceId* id) {
  std::shared_lock lock(ns_mutex_);
  auto it = ns_ids_.find(name);
  if (it == ns_ids_.end()) return false;
  *id = it->second;
  refs_->Add(*id);  // The caller's pin.
  return true;
}

void Scheduler::Subscribe(std::string_view name, std::uint64_t id,
                          std::shared_ptr<Subscriber> subscriber,
                          SubscribeOptions options,
                          std::function<void()> done) {
  {
    std::unique_lock lock(ns_mutex_);
    auto it = ns_ids_.find(name);
    if (it == ns_ids_.end() && !shutting_down_) {
      auto w = waiting_.find(name);
      if (w == waiting_.end()) {
        w = waiting_.emplace(std::string(name), std::vector<Waiting>()).first;
      }
      w->second.push_back(Waiting{id, std::move(subscriber), options});
      CountWaiting(w->second.back(), +1);
      lock.unlock();
      done();
      return;
    }
    if (it != ns_ids_.end()) {
      refs_->Add(it->second);  // Released when it unsubscribes.
      dispatchers_[it->second]->Subscribe(id, std::move(subscriber), options,
                                          std::move(done));
      return;
    }
  }
  subscriber->End(ShuttingDown());
}

void Scheduler::Unsubscribe(std::string_view name, std::uint64_t id) {
  std::unique_lock lock(ns_mutex_);
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
