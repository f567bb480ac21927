// Who may be a node of a cluster: checked before a node takes any lease.
//
// - The cluster's token. The first node to join records a keyed digest of
//   its token (HMAC-SHA256 of a random salt, keyed by the token) in
//   delayd_cluster; every later node must hold a token with the same digest.
//   The database never holds the token itself: reading it does not let one
//   call the nodes.
// - Its node id. A node id is held by one process at a time (an instance
//   id, random per process, beside the id in delayd_nodes): a process
//   whose id another one holds with a fresh heartbeat is refused; an id
//   whose holder stopped (its row gone) or died (its heartbeat older than
//   the lease term) is taken over. A node whose id was taken over while it
//   was cut off (its heartbeat finds another instance) must stop.
//
// Each function runs on `conn`, whose schema is migrated (pg_schema.h).
#ifndef DELAYD_SERVER_STORE_POSTGRES_PG_JOIN_H_
#define DELAYD_SERVER_STORE_POSTGRES_PG_JOIN_H_

#include <libpq-fe.h>

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "server/common/status.h"

namespace delayd::pg {

// OK if `token` is the cluster's (recording it if this is the cluster's
// first node); PERMISSION_DENIED if the cluster holds another;
// UNAVAILABLE if the database cannot say now.
Status CheckClusterToken(PGconn* conn, std::string_view token);

// Claims node id `node` for process `instance`, peers reaching it at
// `advertise`. A holder whose heartbeat is younger than `ttl` and still
// beating keeps it: then ALREADY_EXISTS, naming the id, where its holder
// said it is reached and how old its heartbeat is. A heartbeat that stays
// still is waited out (up to `ttl`: its holder may have died a moment
// ago); `waiting` is told once, with why, if it is.
Status ClaimNodeId(PGconn* conn, std::string_view node,
                   std::string_view instance, std::string_view advertise,
                   std::chrono::milliseconds ttl,
                   const std::function<void(const std::string&)>& waiting);

// A new process's instance id: 128 random bits, in hex.
std::string NewInstanceId();

}  // namespace delayd::pg

#endif  // DELAYD_SERVER_STORE_POSTGRES_PG_JOIN_H_
