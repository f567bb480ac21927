// Scheduler: namespace policies, kept by name.
#include "server/core/scheduler.h"

namespace delayd {

Status Scheduler::RecoverPolicies() {
  std::vector<std::pair<std::string, std::string>> stored;
  if (Status s = store_->LoadPolicies(&stored); !s.ok()) return s;
  for (auto& [name, bytes] : stored) {
    auto policy = DecodePolicy(bytes);
    if (!policy) {
      return Status::Internal("store in " + store_->options().dir +
                              ": the policy of namespace '" + name +
                              "' is malformed");
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
  std::shared_lock lock(ns_mutex_);
  return PolicyLocked(std::string(name));
}

Status Scheduler::SetPolicy(std::string_view name, const Policy& policy) {
  const std::string key(name);
  const bool is_default = policy == Policy();
  std::lock_guard one_at_a_time(policy_mutex_);
  {
    std::shared_lock lock(ns_mutex_);
    if (!is_default && !policies_.contains(key) &&
        policies_.size() >= options_.limits.max_namespaces) {
      return Status::ResourceExhausted(
          "policy limit of " + std::to_string(options_.limits.max_namespaces) +
          " (--max-namespaces) reached");
    }
  }
  // Durable before it applies: a policy in force is one a restart keeps.
  if (store_) {
    if (Status s =
            store_->PutPolicy(key, is_default ? "" : EncodePolicy(policy));
        !s.ok()) {
      return s;
    }
  }
  std::unique_lock lock(ns_mutex_);
  if (is_default) {
    policies_.erase(key);
  } else {
    policies_[key] = policy;
  }
  if (auto it = ns_ids_.find(key); it != ns_ids_.end()) {
    dispatchers_[it->second]->SetPolicy(policy);
  }
  return Status::Ok();
}

}  // namespace delayd
