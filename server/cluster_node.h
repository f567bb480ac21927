// A delayd node of a cluster: nodes sharing one PostgreSQL database, each
// owning the partitions it holds a lease on (pg_lease.h). The node's lease
// keeper takes and gives up leases toward an even share; each partition
// gained is taken by the scheduler (its records loaded), each lost one
// dropped at once; a policy another node set is read again; the
// forwarder is told who owns each partition; and the cluster's level
// (pg_schema.h) is kept for the calls that need one.
//
// The node is healthy unless it owns no partition and its lease rounds
// have failed for a whole lease term (it cannot reach the database): told to
// `on_health` when that changes. Its figures go to the scheduler's metrics
// registry: partitions owned, partitions taken and given up, lease rounds.
//
// Thread safety: Start and Stop from one thread; the keeper's callbacks run
// on its threads, one at a time (mu_ guards what they share); Describe from
// any thread. on_health is told under mu_, so that changes reach it in the
// order they happened (the keeper's thread and its watchdog both report):
// it must not call back into the node.
#ifndef DELAYD_SERVER_CLUSTER_NODE_H_
#define DELAYD_SERVER_CLUSTER_NODE_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/api/cluster_view.h"
#include "server/api/forward.h"
#include "server/common/mutex.h"
#include "server/core/scheduler.h"
#include "server/store/postgres/pg_lease_keeper.h"

namespace delayd {

class ClusterNode : public ClusterView {
 public:
  // Told whether the node serves, and if not why.
  using OnHealth = std::function<void(bool serving, const std::string& why)>;

  // `scheduler` runs on a shared PostgreSQL store (PgOptions::shared);
  // it and `forwarder` outlive the node.
  ClusterNode(pg::LeaseKeeper::Options options, Scheduler& scheduler,
              Forwarder* forwarder, OnHealth on_health);
  ~ClusterNode();  // Stop(/*release=*/false) if running.

  void Start();
  // Stops the keeper. With `release` (a graceful stop, once the scheduler
  // has finished its writes), leaves the cluster and gives every lease
  // back for the other nodes to take at once; without, they expire.
  void Stop(bool release);

  // ClusterView: on a connection of its own, opened per call.
  Status Describe(v1::ClusterStatusResponse* out) override;
  Status RequireLevel(int level, std::string_view what) override EXCLUDES(mu_);

 private:
  void OnChange(const std::vector<pg::Lease>& gained,
                const std::vector<int>& lost) EXCLUDES(mu_);
  void OnRound(bool taken, std::chrono::nanoseconds took) EXCLUDES(mu_);
  void OnLevel(const pg::ClusterLevel& level) EXCLUDES(mu_);
  // Tells on_health_ if serving changed.
  void CheckHealth() REQUIRES(mu_);

  Scheduler& scheduler_;
  const OnHealth on_health_;
  const std::string conninfo_, node_;
  const std::chrono::milliseconds term_;
  std::atomic<bool> stopping_{false};
  prometheus::Gauge& owned_;
  prometheus::Family<prometheus::Counter>& moved_;
  prometheus::Counter& taken_;
  prometheus::Counter& given_;
  prometheus::Histogram& round_;
  prometheus::Counter& round_failures_;
  Mutex mu_;
  int held_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point last_round_ GUARDED_BY(mu_);
  bool serving_ GUARDED_BY(mu_) = true;
  // The cluster's level as last read (0: not yet), and the live nodes
  // below this binary's level then.
  int level_ GUARDED_BY(mu_) = 0;
  std::vector<std::string> older_ GUARDED_BY(mu_);
  std::unique_ptr<pg::LeaseKeeper> keeper_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CLUSTER_NODE_H_
