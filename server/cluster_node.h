// A delayd node of a cluster: nodes sharing one PostgreSQL database, each
// owning the partitions it holds a lease on (pg_lease.h). The node's lease
// keeper takes and gives up leases toward an even share; each partition
// gained is taken by the scheduler (its records loaded), each lost one
// dropped at once; a policy another node set is read again; and the
// forwarder is told who owns each partition.
//
// Thread safety: Start and Stop from one thread; the keeper's callbacks run
// on its threads, one at a time.
#ifndef DELAYD_SERVER_CLUSTER_NODE_H_
#define DELAYD_SERVER_CLUSTER_NODE_H_

#include <atomic>
#include <memory>
#include <string>

#include "server/api/forward.h"
#include "server/core/scheduler.h"
#include "server/store/postgres/pg_lease_keeper.h"

namespace delayd {

class ClusterNode {
 public:
  // `scheduler` runs on a shared PostgreSQL store (PgOptions::shared);
  // it and `forwarder` outlive the node.
  ClusterNode(pg::LeaseKeeper::Options options, Scheduler& scheduler,
              Forwarder* forwarder);
  ~ClusterNode();  // Stop(/*release=*/false) if running.

  void Start();
  // Stops the keeper. With `release` (a graceful stop, once the scheduler
  // has finished its writes), leaves the cluster and gives every lease
  // back for the other nodes to take at once; without, they expire.
  void Stop(bool release);

 private:
  void OnChange(const std::vector<pg::Lease>& gained,
                const std::vector<int>& lost);

  Scheduler& scheduler_;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<pg::LeaseKeeper> keeper_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CLUSTER_NODE_H_
