// The PostgreSQL store's schema, created and migrated by delayd itself:
// versioned migrations compiled into the binary, applied in one
// transaction under an advisory lock (so that several daemons starting at
// once apply each exactly once). A database whose schema is newer than this
// binary knows is refused.
//
// Tables (all named delayd_*):
//   delayd_schema    one row: the schema's version, the number of
//                    logical partitions rows are spread over (fixed when
//                    the schema is created), and the cluster's level
//   delayd_jobs      a row per timer, keyed by its payload id; the same row
//                    becomes its event when it fires (event_id set), and
//                    carries the event's fate once a delivery failed
//   delayd_counters  per partition, the limits below which versions and
//                    event ids are handed out
//   delayd_policies  namespace policies, by name
//   delayd_commits   per daemon, the id of its last committed write group
//                    (how a commit whose answer was lost is told)
//   delayd_schedules recurring schedules
//   delayd_dedup     keys' fates in a namespace's dedup window
//   delayd_nodes     nodes of a cluster, their heartbeats, the process
//                    holding each node id (pg_lease.h, pg_join.h), and
//                    its release and level
//   delayd_leases    per partition, its owner, epoch and lease expiry
//   delayd_cluster   one row: a keyed digest of the cluster's token
//                    (pg_join.h)
//   delayd_schema_steps  the steps applied (below)
//
// Besides the versioned migrations, steps (a table, a column with a
// default, an index traded for one no statement needs) apply by name
// without raising the version: an older binary still works beside them.
//
// Rolling upgrades (expand, then contract): a binary applies at start only
// what older binaries work beside (migrations up to kStartVersion, steps),
// so nodes of two releases serve one database together. Each node records
// its release and level (kNodeLevel) with its heartbeat; the cluster's
// level (delayd_schema.cluster_level) is the level every node may count on
// in the others. It is raised (RaiseClusterLevel) once no live node is
// below this binary's level, together with the contract: the migrations
// that only newer binaries may see, which also raise the schema's version
// so that an older binary refuses to start on it, and a trigger that
// refuses an older node's heartbeat (one that started just before).
// Behaviours and stored forms that older nodes cannot read wait for it.
#ifndef DELAYD_SERVER_STORE_POSTGRES_PG_SCHEMA_H_
#define DELAYD_SERVER_STORE_POSTGRES_PG_SCHEMA_H_

#include <libpq-fe.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/common/status.h"

namespace delayd::pg {

// The newest schema this binary knows (after the contract of its level).
inline constexpr int kSchemaVersion = 4;
// The schema a start brings a database to: what the releases of level 1
// (0.1) still run on.
inline constexpr int kStartVersion = 3;

// This binary's level: 1 = delayd 0.1 (nodes that record none), 2 = 0.2
// (push targets and dedup windows: policy records that 0.1 cannot read).
inline constexpr int kNodeLevel = 2;

struct Schema {
  int version = 0;
  int partitions = 0;
};

// Brings the database of `conn` to kSchemaVersion: creates the schema in a
// database without one (with `partitions` logical partitions, 1..1024), or
// applies the migrations it lacks; refuses one whose version is newer.
// `applied` (if not null) tells whether anything changed.
Status Migrate(PGconn* conn, int partitions, Schema* out,
               bool* applied = nullptr);

// The cluster's level as read (or raised) by RaiseClusterLevel.
struct ClusterLevel {
  int level = 1;
  // While the level is below kNodeLevel: the live nodes holding it back,
  // as "node (release)".
  std::vector<std::string> older;
  bool raised = false;  // by this call
};

// Reads the cluster's level and, if it is below kNodeLevel and no node
// whose heartbeat is younger than `ttl` runs a lower level, raises it to
// kNodeLevel with the contract migrations, in one transaction under the
// schema's lock. On a database migrated by Migrate.
Status RaiseClusterLevel(PGconn* conn, std::chrono::milliseconds ttl,
                         ClusterLevel* out);

// Whether `result` failed because a node below the cluster's level wrote
// its heartbeat (SQLSTATE DL002, the contract's trigger).
bool IsBelowClusterLevel(const PGresult* result);

}  // namespace delayd::pg

#endif  // DELAYD_SERVER_STORE_POSTGRES_PG_SCHEMA_H_
