// The PostgreSQL store's schema, created and migrated by delayd itself:
// versioned migrations compiled into the binary, applied in one
// transaction under an advisory lock (so that several daemons starting at
// once apply each exactly once). A database whose schema is newer than this
// binary knows is refused.
//
// Tables (all named delayd_*):
//   delayd_schema    one row: the schema's version, and the number of
//                    logical partitions rows are spread over (fixed when
//                    the schema is created)
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
//   delayd_nodes     nodes of a cluster, their heartbeats and the process
//                    holding each node id (pg_lease.h, pg_join.h)
//   delayd_leases    per partition, its owner, epoch and lease expiry
//   delayd_cluster   one row: a keyed digest of the cluster's token
//                    (pg_join.h)
//   delayd_schema_steps  the additive steps applied (below)
//
// Besides the versioned migrations, additive steps (a table, a column with
// a default) are applied by name without raising the version: a binary of
// the same version that predates a step still works beside it.
#ifndef DELAYD_SERVER_STORE_POSTGRES_PG_SCHEMA_H_
#define DELAYD_SERVER_STORE_POSTGRES_PG_SCHEMA_H_

#include <libpq-fe.h>

#include "server/common/status.h"

namespace delayd::pg {

// The schema this binary writes.
inline constexpr int kSchemaVersion = 3;

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

}  // namespace delayd::pg

#endif  // DELAYD_SERVER_STORE_POSTGRES_PG_SCHEMA_H_
