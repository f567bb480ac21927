#include "server/cluster_node.h"

#include <prometheus/family.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include <map>
#include <utility>

#include "delayd/text/build_info.h"
#include "server/api/proto_time.h"
#include "server/common/metrics.h"
#include "server/store/postgres/pg_wire.h"

namespace delayd {

static_assert(pg::kNodeLevel >= kLevelPushAndDedup);

namespace {

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

ClusterNode::ClusterNode(pg::LeaseKeeper::Options options, Scheduler& scheduler,
                         Forwarder* forwarder, OnHealth on_health)
    : scheduler_(scheduler),
      on_health_(std::move(on_health)),
      conninfo_(options.conninfo),
      node_(options.node),
      term_(options.terms.ttl),
      owned_(prometheus::BuildGauge()
                 .Name("delayd_cluster_partitions_owned")
                 .Help("Partitions this node owns now.")
                 .Register(*scheduler.metrics().registry())
                 .Add({})),
      moved_(prometheus::BuildCounter()
                 .Name("delayd_cluster_partitions_moved_total")
                 .Help("Partitions this node took (gained) or stopped "
                       "owning (lost).")
                 .Register(*scheduler.metrics().registry())),
      taken_(moved_.Add({{"direction", "gained"}})),
      given_(moved_.Add({{"direction", "lost"}})),
      round_(prometheus::BuildHistogram()
                 .Name("delayd_cluster_lease_round_seconds")
                 .Help("A lease round: heartbeat, renewal and rebalancing.")
                 .Register(*scheduler.metrics().registry())
                 .Add({}, LatencyBuckets())),
      round_failures_(prometheus::BuildCounter()
                          .Name("delayd_cluster_lease_rounds_failed_total")
                          .Help("Lease rounds the database did not take.")
                          .Register(*scheduler.metrics().registry())
                          .Add({})),
      last_round_(std::chrono::steady_clock::now()) {
  if (forwarder != nullptr) {
    options.on_owners = [forwarder, self = options.advertise](
                            std::map<int, std::string> owners) {
      forwarder->SetOwners(self, std::move(owners));
    };
  }
  options.on_round = [this](bool taken, std::chrono::nanoseconds took) {
    OnRound(taken, took);
  };
  options.on_level = [this](const pg::ClusterLevel& level) { OnLevel(level); };
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

void ClusterNode::OnRound(bool taken, std::chrono::nanoseconds took) {
  if (taken) {
    round_.Observe(std::chrono::duration<double>(took).count());
  } else {
    round_failures_.Increment();
  }
  MutexLock lock(&mu_);
  if (taken) last_round_ = std::chrono::steady_clock::now();
  CheckHealth();
}

void ClusterNode::OnLevel(const pg::ClusterLevel& level) {
  if (level.raised) {
    spdlog::info(
        "the cluster's level is {} now: every live node runs delayd {} or "
        "newer (older releases are refused from now on)",
        level.level, BuildVersion());
  }
  MutexLock lock(&mu_);
  if (level.level < pg::kNodeLevel && level.older != older_) {
    spdlog::info(
        "the cluster's level stays {} while nodes of an older release are "
        "live: {}",
        level.level, Join(level.older));
  }
  level_ = level.level;
  older_ = level.older;
}

Status ClusterNode::RequireLevel(int level, std::string_view what) {
  MutexLock lock(&mu_);
  if (level_ == 0) {
    return Status::Unavailable(
        "this node has not read the cluster's level yet: try again");
  }
  if (level_ >= level) return Status::Ok();
  const std::string older = Join(older_);
  return Status::FailedPrecondition(
      std::string(what) + " need every node of the cluster to run delayd " +
      std::string(BuildVersion()) + " or newer; still older: " +
      (older.empty() ? "none live now (the level is raised at the next "
                       "lease round)"
                     : older));
}

void ClusterNode::CheckHealth() {
  const bool cut_off = std::chrono::steady_clock::now() - last_round_ > term_;
  const bool serving = held_ > 0 || !cut_off;
  if (serving == serving_) return;
  serving_ = serving;
  if (on_health_) {
    on_health_(serving, serving ? ""
                                : "this cluster node owns no partition "
                                  "and cannot reach the database");
  }
}

ClusterNode::~ClusterNode() { Stop(/*release=*/false); }

Status ClusterNode::Describe(v1::ClusterStatusResponse* out) {
  pg::Conn conn = pg::ConnectTo(conninfo_);
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    return Status::Unavailable("cannot reach the database: " +
                               std::string(PQerrorMessage(conn.get())));
  }
  std::vector<pg::NodeRow> nodes;
  std::vector<pg::LeaseRow> leases;
  if (Status s = pg::Describe(conn.get(), term_, &nodes, &leases); !s.ok()) {
    return s;
  }
  out->set_node(node_);
  {
    MutexLock lock(&mu_);
    out->set_cluster_level(static_cast<std::uint32_t>(level_));
  }
  out->mutable_lease_ttl()->set_seconds(term_.count() / 1000);
  out->mutable_lease_ttl()->set_nanos(
      static_cast<std::int32_t>(term_.count() % 1000 * 1'000'000));
  std::map<std::string, v1::ClusterNodeStatus*> by_name;
  for (const pg::NodeRow& n : nodes) {
    auto* status = out->add_nodes();
    status->set_node(n.node);
    status->set_advertise(n.advertise);
    SetTimestamp(n.heartbeat_us * 1000, status->mutable_heartbeat_time());
    SetTimestamp(n.started_us * 1000, status->mutable_start_time());
    status->set_live(n.live);
    status->set_release(n.release);
    status->set_level(static_cast<std::uint32_t>(n.level));
    by_name[n.node] = status;
  }
  for (const pg::LeaseRow& l : leases) {
    auto* lease = out->add_partitions();
    lease->set_partition(static_cast<std::uint32_t>(l.part));
    lease->set_epoch(static_cast<std::uint64_t>(l.epoch));
    if (l.expires_us != 0) {
      SetTimestamp(l.expires_us * 1000, lease->mutable_expire_time());
    }
    if (!l.held) continue;
    lease->set_owner(l.owner);
    if (auto it = by_name.find(l.owner); it != by_name.end()) {
      it->second->add_partitions(static_cast<std::uint32_t>(l.part));
    }
  }
  return Status::Ok();
}

void ClusterNode::Start() { keeper_->Start(); }

void ClusterNode::Stop(bool release) {
  // (The scheduler may be stopped already: what the keeper tells from now
  // on is not passed on.)
  stopping_ = true;
  keeper_->Stop(release);
}

void ClusterNode::OnChange(const std::vector<pg::Lease>& gained,
                           const std::vector<int>& lost) {
  {
    MutexLock lock(&mu_);
    held_ += static_cast<int>(gained.size()) - static_cast<int>(lost.size());
    owned_.Set(held_);
    CheckHealth();
  }
  taken_.Increment(static_cast<double>(gained.size()));
  given_.Increment(static_cast<double>(lost.size()));
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
