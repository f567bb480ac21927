// A node's partition leases, kept (pg_lease.h): a thread with a database
// connection of its own that, every third of the lease TTL (and at once
// when another node joins, gives leases back or takes some: kLeaseChannel),
// records the node's heartbeat, renews what it holds, and takes or gives up
// partitions toward an even share of the live nodes (Balance); until the
// cluster's level is this binary's, it also tries to raise it. What it
// gains and loses is told to `on_change`, on its thread, gains with their
// epochs (the fencing tokens of the node's writes).
//
// No statement of a round waits more than a sixth of the term for a row
// lock (LimitLockWaits): a write transaction left open on the leases holds
// up a taking, never the heartbeat of the rounds after it.
//
// A lease is dropped, and told as lost, when it is not renewed (another node
// took it) or when its own-clock validity passes without a renewal (the
// database cannot be reached): a node never acts for a partition longer
// than the database would let it. The second is watched by a thread of its
// own, which no database call can hold up.
//
// Locking: mu_ guards held_ and stopping_; the connection is the keeper
// thread's. tell_mu_ is held from a change of held_ until on_change has
// been told of it (so the two threads tell changes in the order they made
// them), and is taken before mu_; on_change runs without mu_ held.
#ifndef DELAYD_SERVER_STORE_POSTGRES_PG_LEASE_KEEPER_H_
#define DELAYD_SERVER_STORE_POSTGRES_PG_LEASE_KEEPER_H_

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "server/common/mutex.h"
#include "server/store/postgres/pg_lease.h"
#include "server/store/postgres/pg_schema.h"

namespace delayd::pg {

class LeaseKeeper {
 public:
  struct Options {
    std::string conninfo;
    std::string node;       // unique in the cluster
    std::string instance;   // this process's (pg_join.h), holding `node`
    std::string advertise;  // how peers reach this node
    int partitions = 0;     // the schema's
    LeaseTerms terms;
    // Told (on the keeper's thread) when another node changed a policy
    // (kPolicyChannel), and every kPolicyRefresh whatever the channel says
    // (a notification is lost across a fail-over). May be null.
    std::function<void()> on_policies;
    // Told (on the keeper's thread) after each round the database took:
    // each partition's owner's address (OwnerAddresses). May be null.
    std::function<void(std::map<int, std::string>)> on_owners;
    // Told (on the keeper's thread) after each round, taken by the database
    // (its heartbeat and renewal) or not, with how long it took. May be null.
    std::function<void(bool taken, std::chrono::nanoseconds took)> on_round;
    // Told (on the keeper's thread, once) that another process holds the
    // node id now: this one must stop, without leaving (the id is not its
    // own). May be null.
    std::function<void(const std::string& why)> on_evicted;
    // Told (on the keeper's thread) after each round that read the
    // cluster's level (pg_schema.h: RaiseClusterLevel, tried every round
    // until the level is this binary's). May be null.
    std::function<void(const ClusterLevel&)> on_level;
  };
  static constexpr std::chrono::seconds kPolicyRefresh{30};
  using OnChange = std::function<void(const std::vector<Lease>& gained,
                                      const std::vector<int>& lost)>;

  LeaseKeeper(Options options, OnChange on_change);
  ~LeaseKeeper();  // Stop(/*release=*/true) if running
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  void Start();
  // Stops the thread. With `release`, leaves the live nodes and gives every
  // lease back, for others to take at their next round (a graceful stop);
  // without, leaves them to expire (as a crash would). Told as lost either
  // way.
  void Stop(bool release) EXCLUDES(mu_);

  // The leases held now, by partition.
  std::vector<Lease> held() const EXCLUDES(mu_);
  // Stops renewing the lease of `part` (the node could not act for it): it
  // expires, and any node may take it then, this one included. Not told.
  void Drop(int part) EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_, tell_mu_);
  // One round: heartbeat, renew, rebalance. Needs a connection. False if
  // the database did not take the heartbeat and the renewal.
  bool Round(PGconn* conn) EXCLUDES(mu_, tell_mu_);
  // Waits until `until`, a notification on `conn` (if connected), or Stop.
  void WaitForRound(PGconn* conn, std::chrono::steady_clock::time_point until)
      EXCLUDES(mu_);
  // Drops leases whose own-clock validity passed; returns their parts.
  std::vector<int> DropExpired() REQUIRES(mu_);
  // The watchdog: drops and tells each lease as its validity passes.
  void Watch() EXCLUDES(mu_, tell_mu_);
  void Tell(const std::vector<Lease>& gained, const std::vector<int>& lost)
      REQUIRES(tell_mu_);

  const Options options_;
  const OnChange on_change_;
  Mutex tell_mu_;
  mutable Mutex mu_;
  CondVar wake_;
  CondVar changed_;  // held_ changed, or stopping: for the watchdog.
  std::vector<Lease> held_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  bool release_ GUARDED_BY(mu_) = false;
  std::thread thread_;
  std::thread watchdog_;
  int wake_fd_ = -1;      // An eventfd: Stop wakes WaitForRound's poll.
  bool joined_ = false;   // The keeper thread's: told the others it came.
  bool evicted_ = false;  // The keeper thread's: on_evicted was told.
  int level_ = 0;         // The keeper thread's: the cluster's, as read.
  // The keeper thread's: when on_policies was last told.
  std::chrono::steady_clock::time_point policies_told_;
  // Reads the notifications libpq holds: true if one is of kLeaseChannel
  // (time for a round); tells on_policies of kPolicyChannel's.
  bool TakeNotifications(PGconn* conn);
};

}  // namespace delayd::pg

#endif  // DELAYD_SERVER_STORE_POSTGRES_PG_LEASE_KEEPER_H_
