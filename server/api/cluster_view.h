// What a cluster node tells of its cluster (the ClusterStatus call): an
// interface the service calls, implemented by the node (cluster_node.h),
// which sits above the service.
#ifndef DELAYD_SERVER_API_CLUSTER_VIEW_H_
#define DELAYD_SERVER_API_CLUSTER_VIEW_H_

#include <string_view>

#include "delayd/v1/delayd.pb.h"
#include "server/common/status.h"

namespace delayd {

// The cluster level (server/store/postgres/pg_schema.h) from which every
// node reads policies with a push target or a dedup window (0.2).
inline constexpr int kLevelPushAndDedup = 2;

class ClusterView {
 public:
  virtual ~ClusterView() = default;
  // Reads the nodes and the partition leases from the database into `out`.
  // Blocks on the database: never on a gRPC thread. From any thread.
  virtual Status Describe(v1::ClusterStatusResponse* out) = 0;
  // OK if every node of the cluster runs at `level` or above (the
  // cluster's level, as this node last read it); else FAILED_PRECONDITION
  // naming the older nodes, or UNAVAILABLE before the first reading, as a
  // refusal of `what`. Does not block. From any thread.
  virtual Status RequireLevel(int level, std::string_view what) = 0;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_CLUSTER_VIEW_H_
