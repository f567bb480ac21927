// Partition leases for delayd nodes sharing one database (schema version 3:
// delayd_nodes, delayd_leases, delayd_fence). The groundwork of a cluster:
// each of the schema's logical partitions is owned by at most one node at a
// time through a lease row with an epoch.
//
// - A lease is taken only when free or expired, by the database's clock,
//   and each taking adds one to its epoch: the epoch names one tenure.
// - Every write transaction a node makes for a partition calls
//   delayd_fence(node, parts, epochs) first (FenceSql). It locks the lease
//   rows shared and fails the transaction (SQLSTATE DL001, IsFenced) unless
//   each is still this node's at that epoch: a deposed owner's writes fail,
//   and a taker's UPDATE of the lease waits for a fenced transaction in
//   progress to end, so it reads the partition after that write.
// - A node stops acting for a partition before its lease can expire:
//   Lease::valid_until is on the node's own monotonic clock, from the time
//   the statement was sent (before the database's now()), less a margin.
//
// Functions run one statement each on `conn` (no transaction of their own
// beyond it) and return UNAVAILABLE when the database cannot take it now.
// https://www.postgresql.org/docs/15/explicit-locking.html
#ifndef DELAYD_SERVER_STORE_POSTGRES_PG_LEASE_H_
#define DELAYD_SERVER_STORE_POSTGRES_PG_LEASE_H_

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"
#include "server/store/postgres/pg_wire.h"

namespace delayd::pg {

struct Lease {
  int part = 0;
  std::int64_t epoch = 0;
  // Until when this node may act for the partition (its own clock).
  std::chrono::steady_clock::time_point valid_until;
};

struct LeaseTerms {
  std::chrono::milliseconds ttl{5000};
  // How much sooner than the database would let the lease go the node
  // stops: covers the statement's travel and clock rate differences.
  std::chrono::milliseconds margin{1000};
};

// Registers node `node`, held by process `instance` (pg_join.h) and
// reachable by peers at `advertise`, or refreshes its heartbeat (the
// database's now()). FAILED_PRECONDITION if another process holds the id
// now (it was taken over while this one was cut off): this one must stop.
Status Heartbeat(PGconn* conn, std::string_view node, std::string_view instance,
                 std::string_view advertise);

// Takes node `node` of process `instance` out of the live nodes at once (a
// graceful stop), so that the others' shares grow without waiting for its
// heartbeat to age.
Status Leave(PGconn* conn, std::string_view node, std::string_view instance);

// The nodes whose heartbeat is younger than `ttl`, by name.
Status LiveNodes(PGconn* conn, std::chrono::milliseconds ttl,
                 std::vector<std::string>* out);

// Each partition's owner, for leases that have not expired.
Status Owners(PGconn* conn, std::map<int, std::string>* out);

// The address (--advertise) of each partition's owner, for leases that
// have not expired.
Status OwnerAddresses(PGconn* conn, std::map<int, std::string>* out);

// What the database says of the cluster (for operators): every node
// registered, and every partition's lease. Times in microseconds since the
// Unix epoch; `live`: heartbeat younger than the term, `held`: the lease
// has not expired.
struct NodeRow {
  std::string node, advertise;
  std::int64_t heartbeat_us = 0, started_us = 0;
  bool live = false;
  std::string release;  // empty: a release before 0.2 (which records none)
  int level = 1;        // pg_schema.h
};
struct LeaseRow {
  int part = 0;
  std::string owner;  // empty: never taken, or given back
  std::int64_t epoch = 0, expires_us = 0;
  bool held = false;
};
Status Describe(PGconn* conn, std::chrono::milliseconds ttl,
                std::vector<NodeRow>* nodes, std::vector<LeaseRow>* leases);

// Takes those of `parts` that are free or expired; `taken` gets them with
// their new epochs.
Status Acquire(PGconn* conn, std::string_view node,
               const std::vector<int>& parts, const LeaseTerms& terms,
               std::vector<Lease>* taken);

// Extends the leases of `held` that are still this node's at their epochs;
// `kept` gets those (any other was lost: stop acting for it).
Status Renew(PGconn* conn, std::string_view node,
             const std::vector<Lease>& held, const LeaseTerms& terms,
             std::vector<Lease>* kept);

// Lets go of `held` at once, for any node to take.
Status Release(PGconn* conn, std::string_view node,
               const std::vector<Lease>& held);

// Nodes tell each other that a node joined, or gave leases back or took
// some (LISTEN/NOTIFY on kLeaseChannel), for their keepers to run a round at
// once (and learn the new owners). Only a hint: rounds run on their own
// schedule anyway, since a notification is best-effort (lost across a
// fail-over, and not delivered through a pooler in transaction mode).
inline constexpr const char* kLeaseChannel = "delayd_leases";
// And that a namespace's policy changed (sent by the store's transaction
// that wrote it), for every node to read the policies again.
inline constexpr const char* kPolicyChannel = "delayd_policies";
// Listens on both channels.
Status Listen(PGconn* conn);
Status Notify(PGconn* conn);

// Bounds how long each later statement on `conn` waits for a row lock.
// A keeper's statements wait on locks that nodes' write transactions hold
// (delayd_fence's shared locks): one held on and on (a transaction whose
// node was cut off from the database mid-send stays open until the server
// notices) must not hold up the keeper's heartbeat, or its node would stop
// counting as live. A statement that waits longer fails UNAVAILABLE
// (55P03), and the next round tries again.
Status LimitLockWaits(PGconn* conn, std::chrono::milliseconds wait);

// The statement a write transaction starts with, and its parameters.
inline constexpr const char* kFenceSql =
    "SELECT delayd_fence($1::text, $2::int4[], $3::int8[])";
Params FenceParams(std::string_view node, const std::vector<Lease>& held);
// Whether a result failed because a lease was no longer this node's.
bool IsFenced(const PGresult* result);

// Which partitions `me` should take and give up so that the live nodes own
// an even share each: of `partitions`, node i of the sorted live names wants
// partitions / n, one more for the first partitions % n. It gives up its
// excess (highest first) and takes unowned partitions or those of nodes not
// live (lowest first), never one a live node owns. Every node computes the
// same shares, so the cluster settles after each node's next round.
struct Rebalance {
  std::vector<int> take, give;
};
Rebalance Balance(int partitions, const std::vector<std::string>& live,
                  std::string_view me,
                  const std::map<int, std::string>& owners);

}  // namespace delayd::pg

#endif  // DELAYD_SERVER_STORE_POSTGRES_PG_LEASE_H_
