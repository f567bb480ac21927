// Scheduler: namespace policies, kept by name.
#include "server/core/scheduler.h"

namespace delayd {

Status Scheduler::RecoverPolicies() {
  std::vector<std::pair<std::string, std::string>> stored;
  if (Status s = store_->LoadPolicies(&stored); !s.ok()) return s;
  WriterLock lock(&ns_mutex_);
  for (auto& [name, bytes] : stored) {
    auto policy = DecodePolicy(bytes);
    if (!policy) {
      return Status::Internal(store_->where() + ": the policy of namespace '" +
                              name + "' is malformed");
    }
    policies_.emplace(std::move(name), *policy);
  }
  return Status::Ok();
}

const Policy& Scheduler::PolicyLocked(const std::string& name) const {
  static const Policy kDefault;
  auto it = policies_.find(name);
  return it == policies_.end() ? kDefault : it->second;
}

Policy Scheduler::PolicyOf(std::string_view name) {
  ReaderLock lock(&ns_mutex_);
  return PolicyLocked(std::string(name));
}

void Scheduler::ApplyPolicy(const std::string& name, const Policy& policy) {
  {
    WriterLock lock(&ns_mutex_);
    if (policy == Policy()) {
      policies_.erase(name);
    } else {
      policies_[name] = policy;
    }
    // (A post to the dispatcher's strand.)
    if (auto it = ns_ids_.find(name); it != ns_ids_.end()) {
      SetNamespacePolicy(it->second, policy);
    }
  }
  if (policy_observer_) policy_observer_(name);
}

void Scheduler::SetPolicyObserver(std::function<void(const std::string&)> f) {
  MutexLock lock(&policy_mutex_);
  policy_observer_ = std::move(f);
}

std::vector<std::string> Scheduler::PolicyNames() {
  ReaderLock lock(&ns_mutex_);
  std::vector<std::string> names;
  names.reserve(policies_.size());
  for (const auto& [name, policy] : policies_) names.push_back(name);
  return names;
}

void Scheduler::SetPolicy(std::string_view name, const PolicyChange& change,
                          std::function<void(Status, const Policy&)> done) {
  const std::string key(name);
  Policy policy;
  Status status;
  {
    MutexLock one_at_a_time(&policy_mutex_);
    {
      ReaderLock lock(&ns_mutex_);
      auto queued = policies_queued_.find(key);
      status = change(queued != policies_queued_.end() ? queued->second.last
                                                       : PolicyLocked(key),
                      &policy);
      const bool known =
          policies_.contains(key) || policies_queued_.contains(key);
      if (status.ok() && policy != Policy() && !known &&
          policies_.size() + policies_queued_.size() >=
              options_.limits.max_namespaces) {
        status = Status::ResourceExhausted(
            "policy limit of " +
            std::to_string(options_.limits.max_namespaces) +
            " (--max-namespaces) reached");
      }
    }
    if (status.ok() && !store_) ApplyPolicy(key, policy);
    if (status.ok() && store_) {
      // Durable before it applies: a policy in force is one a restart
      // keeps. Applied in the store's order, once written.
      Batch batch;
      batch.PutPolicy(key, policy == Policy() ? "" : EncodePolicy(policy));
      Queued& queued = policies_queued_[key];
      ++queued.count;
      queued.last = policy;
      store_->CommitSynced(batch, [this, key, policy, done](Status s) {
        {
          MutexLock lock(&policy_mutex_);
          if (--policies_queued_[key].count == 0) policies_queued_.erase(key);
          if (s.ok()) ApplyPolicy(key, policy);
        }
        done(std::move(s), policy);
      });
      return;
    }
  }
  done(std::move(status), policy);
}

void Scheduler::ReloadPolicies(std::function<void(Status)> done) {
  asio::post(*reads_, [this, done = std::move(done)] {
    std::vector<std::pair<std::string, std::string>> stored;
    Status s = store_->LoadPolicies(&stored);
    std::unordered_map<std::string, Policy> read;
    for (auto& [name, bytes] : stored) {
      if (!s.ok()) break;
      if (auto policy = DecodePolicy(bytes)) {
        read.emplace(std::move(name), *policy);
      } else {
        s = Status::Internal(store_->where() + ": the policy of namespace '" +
                             name + "' is malformed");
      }
    }
    if (s.ok()) {
      MutexLock one_at_a_time(&policy_mutex_);
      std::vector<std::pair<std::string, Policy>> changed;
      {
        ReaderLock lock(&ns_mutex_);
        for (const auto& [name, policy] : read) {
          if (PolicyLocked(name) != policy) changed.emplace_back(name, policy);
        }
        for (const auto& [name, policy] : policies_) {
          if (!read.contains(name)) changed.emplace_back(name, Policy());
        }
      }
      // (A policy this node is writing applies once written, in order.)
      for (const auto& [name, policy] : changed) {
        if (!policies_queued_.contains(name)) ApplyPolicy(name, policy);
      }
    }
    if (done) done(std::move(s));
  });
}

}  // namespace delayd
