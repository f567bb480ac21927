// What a cluster node tells of its cluster (the ClusterStatus call): an
// interface the service calls, implemented by the node (cluster_node.h),
// which sits above the service.
#ifndef DELAYD_SERVER_API_CLUSTER_VIEW_H_
#define DELAYD_SERVER_API_CLUSTER_VIEW_H_

#include "delayd/v1/delayd.pb.h"
#include "server/common/status.h"

namespace delayd {

class ClusterView {
 public:
  virtual ~ClusterView() = default;
  // Reads the nodes and the partition leases from the database into `out`.
  // Blocks on the database: never on a gRPC thread. From any thread.
  virtual Status Describe(v1::ClusterStatusResponse* out) = 0;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_CLUSTER_VIEW_H_
