#include "server/cluster_node.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace delayd {

ClusterNode::ClusterNode(pg::LeaseKeeper::Options options, Scheduler& scheduler,
                         Forwarder* forwarder)
    : scheduler_(scheduler) {
  if (forwarder != nullptr) {
    options.on_owners = [forwarder, self = options.advertise](
                            std::map<int, std::string> owners) {
      forwarder->SetOwners(self, std::move(owners));
    };
  }
  // A policy set on any node applies on every node.
  options.on_policies = [this] {
    if (stopping_) return;
    scheduler_.ReloadPolicies([](Status s) {
      if (!s.ok()) spdlog::error("reading the policies: {}", s.message());
    });
  };
  keeper_ = std::make_unique<pg::LeaseKeeper>(
      std::move(options),
      [this](const std::vector<pg::Lease>& gained,
             const std::vector<int>& lost) { OnChange(gained, lost); });
}

ClusterNode::~ClusterNode() { Stop(/*release=*/false); }

void ClusterNode::Start() { keeper_->Start(); }

void ClusterNode::Stop(bool release) {
  // (The scheduler may be stopped already: what the keeper tells from now
  // on is not passed on.)
  stopping_ = true;
  keeper_->Stop(release);
}

void ClusterNode::OnChange(const std::vector<pg::Lease>& gained,
                           const std::vector<int>& lost) {
  if (stopping_) return;
  // Losses first, and at once: the node stops acting for a partition before
  // its lease can expire.
  for (int part : lost) {
    scheduler_.DropPartition(static_cast<std::uint32_t>(part), nullptr);
    spdlog::info("partition {}: no longer this node's", part);
  }
  for (const pg::Lease& l : gained) {
    const auto started = std::chrono::steady_clock::now();
    scheduler_.TakePartition(
        static_cast<std::uint32_t>(l.part), l.epoch,
        [this, l, started](Status s) {
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
              std::chrono::steady_clock::now() - started);
          if (s.ok()) {
            spdlog::info("partition {}: taken (epoch {}, loaded in {} ms)",
                         l.part, l.epoch, ms.count());
            return;
          }
          // Not acted for: its lease is left to expire, for any node
          // (this one included) to take again.
          spdlog::error("partition {}: could not be taken: {}", l.part,
                        s.message());
          if (!stopping_) keeper_->Drop(l.part);
        });
  }
}

}  // namespace delayd
