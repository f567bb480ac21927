// Partition leases (pg_lease.h) against a real PostgreSQL the test starts:
// a lease has one owner, moves only when free or expired and then with a
// new epoch; a deposed owner's fenced writes fail; a taker waits for a
// fenced write in progress and then sees it. And the even split Balance
// plans, without a database.
#include "server/store/postgres/pg_lease.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "delayd/text/build_info.h"
#include "server/store/postgres/pg_join.h"
#include "server/store/postgres/pg_lease_keeper.h"
#include "server/store/postgres/pg_schema.h"
#include "tests/server/test_stores.h"

namespace delayd::pg {
namespace {

using namespace std::chrono_literals;
using testing::PostgresServer;

// Whether `done()` came true within 10 s (checked every millisecond).
template <typename Done>
bool Eventually(Done done) {
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A migrated database with 8 partitions, and connections to it.
class PgLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pg_ = testing::SharedPostgres();
    ASSERT_NE(pg_, nullptr);
    url_ = pg_->Url(pg_->NewDatabase());
    Conn c = Connect();
    Schema schema;
    ASSERT_TRUE(Migrate(c.get(), 8, &schema).ok());
    ASSERT_EQ(schema.version, kStartVersion);
  }
  Conn Connect() {
    Conn c(PQconnectdb(url_.c_str()));
    EXPECT_EQ(PQstatus(c.get()), CONNECTION_OK) << ErrorOf(c.get());
    return c;
  }
  static std::vector<int> Parts(const std::vector<Lease>& leases) {
    std::vector<int> out;
    for (const Lease& l : leases) out.push_back(l.part);
    return out;
  }
  // Runs `sql` on `c`; true if it succeeded.
  static bool Ok(PGconn* c, const char* sql) {
    Result r(PQexec(c, sql));
    return PQresultStatus(r.get()) == PGRES_COMMAND_OK ||
           PQresultStatus(r.get()) == PGRES_TUPLES_OK;
  }
  // BEGIN, the fence for `held` as `node`; the fence's result.
  static Result BeginFenced(PGconn* c, std::string_view node,
                            const std::vector<Lease>& held) {
    EXPECT_TRUE(Ok(c, "BEGIN"));
    Params p = FenceParams(node, held);
    return Result(PQexecParams(c, kFenceSql, p.count(), nullptr, p.values(),
                               p.lengths(), p.formats(), 1));
  }
  // Takes `parts` as `node`, trying until taken (they must expire first),
  // for at most 10 s.
  std::vector<Lease> TakeWhenExpired(PGconn* c, std::string_view node,
                                     const std::vector<int>& parts,
                                     const LeaseTerms& terms) {
    std::vector<Lease> taken;
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (taken.size() < parts.size() &&
           std::chrono::steady_clock::now() < end) {
      std::vector<Lease> got;
      EXPECT_TRUE(Acquire(c, node, parts, terms, &got).ok());
      taken.insert(taken.end(), got.begin(), got.end());
      std::this_thread::yield();
    }
    return taken;
  }

  PostgresServer* pg_ = nullptr;
  std::string url_;
};

TEST_F(PgLeaseTest, ALeaseHasOneOwnerAndEachTakingANewEpoch) {
  Conn a = Connect(), b = Connect();
  const LeaseTerms terms{60s, 1s};
  std::vector<Lease> held, other;
  ASSERT_TRUE(Acquire(a.get(), "a", {0, 1, 2, 3}, terms, &held).ok());
  ASSERT_EQ(Parts(held), (std::vector<int>{0, 1, 2, 3}));
  for (const Lease& l : held) EXPECT_EQ(l.epoch, 1);
  EXPECT_GT(held[0].valid_until, std::chrono::steady_clock::now() + 55s);
  EXPECT_LT(held[0].valid_until, std::chrono::steady_clock::now() + 60s);
  ASSERT_TRUE(Acquire(b.get(), "b", {0, 1, 2, 3, 4}, terms, &other).ok());
  EXPECT_EQ(Parts(other), (std::vector<int>{4}));  // only the free one
  std::map<int, std::string> owners;
  ASSERT_TRUE(Owners(a.get(), &owners).ok());
  EXPECT_EQ(owners, (std::map<int, std::string>{
                        {0, "a"}, {1, "a"}, {2, "a"}, {3, "a"}, {4, "b"}}));
  // Given up, a lease is free at once; the next owner's epoch is new.
  ASSERT_TRUE(Release(a.get(), "a", {held[0], held[1]}).ok());
  ASSERT_TRUE(Acquire(b.get(), "b", {0, 1}, terms, &other).ok());
  ASSERT_EQ(Parts(other), (std::vector<int>{0, 1}));
  EXPECT_EQ(other[0].epoch, 2);
  // The old owner can neither renew nor release what it lost.
  std::vector<Lease> kept;
  ASSERT_TRUE(Renew(a.get(), "a", held, terms, &kept).ok());
  EXPECT_EQ(Parts(kept), (std::vector<int>{2, 3}));
  ASSERT_TRUE(Release(a.get(), "a", {held[0]}).ok());
  ASSERT_TRUE(Owners(a.get(), &owners).ok());
  EXPECT_EQ(owners[0], "b");
}

TEST_F(PgLeaseTest, AnExpiredLeaseMovesAndItsOldOwnersWritesAreFenced) {
  Conn a = Connect(), b = Connect();
  const LeaseTerms terms{200ms, 100ms};
  std::vector<Lease> mine;
  ASSERT_TRUE(Acquire(a.get(), "a", {5}, terms, &mine).ok());
  ASSERT_EQ(mine.size(), 1u);
  // While held, a's fenced transaction goes through.
  Result fence = BeginFenced(a.get(), "a", mine);
  ASSERT_EQ(PQresultStatus(fence.get()), PGRES_TUPLES_OK)
      << ErrorOf(fence.get());
  ASSERT_TRUE(Ok(a.get(), "COMMIT"));
  // Not renewed, it expires and b takes it.
  const std::vector<Lease> theirs = TakeWhenExpired(b.get(), "b", {5}, terms);
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(theirs[0].epoch, mine[0].epoch + 1);
  // a's next write fails as fenced, and its transaction with it.
  fence = BeginFenced(a.get(), "a", mine);
  EXPECT_EQ(PQresultStatus(fence.get()), PGRES_FATAL_ERROR);
  EXPECT_TRUE(IsFenced(fence.get())) << ErrorOf(fence.get());
  EXPECT_FALSE(Ok(a.get(), "SELECT 1"));  // the transaction is aborted
  ASSERT_TRUE(Ok(a.get(), "ROLLBACK"));
  std::vector<Lease> kept;
  ASSERT_TRUE(Renew(a.get(), "a", mine, terms, &kept).ok());
  EXPECT_TRUE(kept.empty());
  // b's goes through.
  fence = BeginFenced(b.get(), "b", theirs);
  EXPECT_EQ(PQresultStatus(fence.get()), PGRES_TUPLES_OK)
      << ErrorOf(fence.get());
  ASSERT_TRUE(Ok(b.get(), "COMMIT"));
}

TEST_F(PgLeaseTest, ATakerWaitsForAFencedWriteInProgressThenSeesIt) {
  Conn a = Connect(), b = Connect(), watch = Connect();
  ASSERT_TRUE(Ok(watch.get(), "CREATE TABLE t (v int)"));
  const LeaseTerms terms{200ms, 100ms};
  std::vector<Lease> mine;
  ASSERT_TRUE(Acquire(a.get(), "a", {2}, terms, &mine).ok());
  Result fence = BeginFenced(a.get(), "a", mine);
  ASSERT_EQ(PQresultStatus(fence.get()), PGRES_TUPLES_OK);
  ASSERT_TRUE(Ok(a.get(), "INSERT INTO t VALUES (42)"));
  // The lease expires while a's transaction is open; b's taking waits.
  std::vector<Lease> theirs;
  std::thread taker(
      [&] { theirs = TakeWhenExpired(b.get(), "b", {2}, terms); });
  const std::string b_pid = std::to_string(PQbackendPID(b.get()));
  const bool waiting = Eventually([&] {
    Result r(PQexec(watch.get(), ("SELECT wait_event_type FROM "
                                  "pg_stat_activity WHERE pid = " +
                                  b_pid)
                                     .c_str()));
    return PQntuples(r.get()) == 1 &&
           std::string_view(PQgetvalue(r.get(), 0, 0)) == "Lock";
  });
  ASSERT_TRUE(waiting) << "b's UPDATE of the lease should wait on a's lock";
  ASSERT_TRUE(Ok(a.get(), "COMMIT"));
  taker.join();
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(theirs[0].epoch, mine[0].epoch + 1);
  Result seen(PQexec(b.get(), "SELECT v FROM t"));
  ASSERT_EQ(PQntuples(seen.get()), 1);
  EXPECT_STREQ(PQgetvalue(seen.get(), 0, 0), "42");
}

TEST_F(PgLeaseTest, NodesAreLiveWhileTheirHeartbeatIsYoung) {
  Conn c = Connect();
  ASSERT_TRUE(Heartbeat(c.get(), "n2", "i2", "127.0.0.1:7002").ok());
  ASSERT_TRUE(Heartbeat(c.get(), "n1", "i1", "127.0.0.1:7001").ok());
  ASSERT_TRUE(Heartbeat(c.get(), "n1", "i1", "127.0.0.1:7011").ok());  // moved
  // Another process's heartbeat under n1's id is refused.
  EXPECT_EQ(Heartbeat(c.get(), "n1", "other", "127.0.0.1:7021").code(),
            Code::kFailedPrecondition);
  std::vector<std::string> live;
  ASSERT_TRUE(LiveNodes(c.get(), 60s, &live).ok());
  EXPECT_EQ(live, (std::vector<std::string>{"n1", "n2"}));
  ASSERT_TRUE(LiveNodes(c.get(), 0ms, &live).ok());
  EXPECT_TRUE(live.empty());
  Result r(PQexec(c.get(),
                  "SELECT advertise FROM delayd_nodes WHERE node = "
                  "'n1'"));
  EXPECT_STREQ(PQgetvalue(r.get(), 0, 0), "127.0.0.1:7011");
}

// Rolling upgrades (pg_schema.h): the cluster's level stays while a live
// node runs an older release, and is raised with the contract once none
// does; from then on the older release's heartbeat is refused, and this
// release's heartbeat and claim of an id still work.
TEST_F(PgLeaseTest, TheClusterLevelWaitsForOlderNodesThenRefusesThem) {
  Conn c = Connect();
  ASSERT_TRUE(Heartbeat(c.get(), "new", "i1", "127.0.0.1:7001").ok());
  // A heartbeat as delayd 0.1 writes it: no release, no level.
  const char* kOldHeartbeat =
      "INSERT INTO delayd_nodes (node, advertise, heartbeat_at, started_at) "
      "VALUES ('old', '127.0.0.1:7002', now(), now()) ON CONFLICT (node) DO "
      "UPDATE SET heartbeat_at = now()";
  ASSERT_TRUE(Ok(c.get(), kOldHeartbeat));
  ClusterLevel level;
  ASSERT_TRUE(RaiseClusterLevel(c.get(), 60s, &level).ok());
  EXPECT_EQ(level.level, 1);
  EXPECT_FALSE(level.raised);
  EXPECT_EQ(level.older, (std::vector<std::string>{"old (0.1)"}));
  std::vector<NodeRow> nodes;
  std::vector<LeaseRow> leases;
  ASSERT_TRUE(Describe(c.get(), 60s, &nodes, &leases).ok());
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].node, "new");
  EXPECT_EQ(nodes[0].release, BuildVersion());
  EXPECT_EQ(nodes[0].level, kNodeLevel);
  EXPECT_EQ(nodes[1].release, "");
  EXPECT_EQ(nodes[1].level, 1);

  // The old node stopped: once its heartbeat is older than the term, the
  // level is raised, once, with the contract.
  ASSERT_TRUE(Ok(c.get(),
                 "UPDATE delayd_nodes SET heartbeat_at = now() - interval "
                 "'1 hour' WHERE node = 'old'"));
  ASSERT_TRUE(RaiseClusterLevel(c.get(), 60s, &level).ok());
  EXPECT_EQ(level.level, kNodeLevel);
  EXPECT_TRUE(level.raised);
  EXPECT_TRUE(level.older.empty());
  ASSERT_TRUE(RaiseClusterLevel(c.get(), 60s, &level).ok());
  EXPECT_EQ(level.level, kNodeLevel);
  EXPECT_FALSE(level.raised);
  Result v(PQexec(c.get(), "SELECT version, cluster_level FROM delayd_schema"));
  EXPECT_EQ(std::string(PQgetvalue(v.get(), 0, 0)),
            std::to_string(kSchemaVersion));
  EXPECT_EQ(std::string(PQgetvalue(v.get(), 0, 1)), std::to_string(kNodeLevel));

  Result old(PQexec(c.get(), kOldHeartbeat));
  EXPECT_TRUE(IsBelowClusterLevel(old.get())) << ErrorOf(old.get());
  EXPECT_NE(ErrorOf(old.get()).find("older than this cluster admits"),
            std::string::npos);
  Schema schema;
  ASSERT_TRUE(Migrate(c.get(), 8, &schema).ok());  // a restart
  EXPECT_EQ(schema.version, kSchemaVersion);
  EXPECT_TRUE(Heartbeat(c.get(), "new", "i1", "127.0.0.1:7001").ok());
  // The old node's id, taken over by this release (its heartbeat is old).
  EXPECT_TRUE(
      ClaimNodeId(c.get(), "old", "i2", "127.0.0.1:7002", 1s, nullptr).ok());
  EXPECT_TRUE(Heartbeat(c.get(), "old", "i2", "127.0.0.1:7002").ok());
}

// A keeper of node `node`, and what it was told.
struct Node {
  Node(const std::string& url, const std::string& node, LeaseTerms terms)
      : keeper({url,
                node,
                node + "-instance",
                node + ".test:7070",
                8,
                terms,
                {},
                [this](std::map<int, std::string> o) {
                  std::lock_guard lock(mu);
                  owners = std::move(o);
                },
                {},
                {},
                {}},
               [this](const std::vector<Lease>& gained,
                      const std::vector<int>& lost) {
                 for (const Lease& l : gained) epochs[l.part] = l.epoch;
                 gains += gained.size();
                 losses += lost.size();
               }) {}
  std::size_t holds() const { return keeper.held().size(); }
  // The addresses of the partitions' owners, as the last round read them.
  std::map<int, std::string> addresses() {
    std::lock_guard lock(mu);
    return owners;
  }
  std::mutex mu;
  std::map<int, std::string> owners;
  std::map<int, std::int64_t> epochs;  // (its thread only, read after Stop)
  std::atomic<std::size_t> gains{0}, losses{0};
  LeaseKeeper keeper;  // (last: stopped before what it tells is gone)
};

// With rounds 10 s apart, the split and the hand-over happen at once: a
// node that joins, and one that gives leases back, tells the others
// (kLeaseChannel).
TEST_F(PgLeaseTest, KeepersSplitEvenlyAndAGracefulStopHandsOverAtOnce) {
  const LeaseTerms terms{30s, 1s};  // a round every 10 s
  Node a(url_, "a", terms);
  a.keeper.Start();
  ASSERT_TRUE(Eventually([&] { return a.holds() == 8; }));
  Node b(url_, "b", terms);
  b.keeper.Start();
  ASSERT_TRUE(Eventually([&] { return a.holds() == 4 && b.holds() == 4; }))
      << a.holds() << " and " << b.holds();
  for (const Lease& l : a.keeper.held()) EXPECT_LT(l.part, 4);  // its lowest
  // Each keeper tells who owns what, by address (for forwarding), once its
  // round sees the split.
  std::map<int, std::string> split;
  for (int part = 0; part < 8; ++part) {
    split[part] = part < 4 ? "a.test:7070" : "b.test:7070";
  }
  EXPECT_TRUE(Eventually([&] { return b.addresses() == split; }));
  EXPECT_TRUE(Eventually([&] { return a.addresses() == split; }));
  // Stopped with its leases given back: b has them at once.
  const auto stopped = std::chrono::steady_clock::now();
  a.keeper.Stop(/*release=*/true);
  EXPECT_EQ(a.losses.load(), 8u);  // 4 given to b, then 4 at the stop
  ASSERT_TRUE(Eventually([&] { return b.holds() == 8; }));
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 1s);
  b.keeper.Stop(/*release=*/true);
  for (const auto& [part, epoch] : b.epochs) {
    EXPECT_EQ(epoch, 2) << "partition " << part;  // a's, then b's
  }
}

TEST_F(PgLeaseTest, ACrashedKeepersLeasesMoveOnlyOnceExpired) {
  const LeaseTerms terms{600ms, 200ms};
  Node a(url_, "a", terms), b(url_, "b", terms);
  a.keeper.Start();
  b.keeper.Start();
  ASSERT_TRUE(Eventually([&] { return a.holds() == 4 && b.holds() == 4; }));
  std::vector<Lease> crashed = a.keeper.held();
  a.keeper.Stop(/*release=*/false);  // as if killed: the rows stay a's
  const auto died = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return b.holds() == 8; }));
  // Not before a's leases could have expired (its last renewal was at most
  // a round before it stopped).
  EXPECT_GT(std::chrono::steady_clock::now() - died, 600ms - 200ms);
  b.keeper.Stop(/*release=*/true);
  for (const Lease& l : crashed) {
    EXPECT_EQ(b.epochs[l.part], l.epoch + 1) << "partition " << l.part;
  }
}

TEST_F(PgLeaseTest, AKeeperCutOffFromTheDatabaseLetsGoOnItsOwnClock) {
  std::string error;
  auto own = PostgresServer::Start(&error);
  ASSERT_NE(own, nullptr) << error;
  const std::string url = own->Url(own->NewDatabase());
  {
    Conn c(PQconnectdb(url.c_str()));
    Schema schema;
    ASSERT_TRUE(Migrate(c.get(), 8, &schema).ok());
  }
  const LeaseTerms terms{600ms, 200ms};
  Node a(url, "a", terms);
  a.keeper.Start();
  ASSERT_TRUE(Eventually([&] { return a.holds() == 8; }));
  const std::vector<Lease> held = a.keeper.held();
  own->Stop();
  // The keeper drops a lease, then tells of it: wait for both.
  ASSERT_TRUE(Eventually([&] { return a.holds() == 0 && a.losses == 8u; }));
  // Let go no later than the validity its own clock gave each lease.
  const auto now = std::chrono::steady_clock::now();
  for (const Lease& l : held) EXPECT_LT(l.valid_until, now);
  a.keeper.Stop(/*release=*/true);
}

// A database call of the keeper's that hangs (here: its heartbeat waits for
// a row lock this test holds) does not keep the node acting for its
// partitions: they are let go as their own-clock validity passes.
TEST_F(PgLeaseTest, AKeeperWhoseDatabaseCallHangsLetsGoOnItsOwnClock) {
  const LeaseTerms terms{600ms, 200ms};
  Node a(url_, "a", terms);
  a.keeper.Start();
  ASSERT_TRUE(Eventually([&] { return a.holds() == 8; }));
  Conn lock = Connect();
  ASSERT_TRUE(Ok(lock.get(), "BEGIN"));
  ASSERT_TRUE(
      Ok(lock.get(), "SELECT * FROM delayd_nodes WHERE node = 'a' FOR UPDATE"));
  const auto locked = std::chrono::steady_clock::now();
  // Let go while the call still hangs (the lock is held until below): a
  // lease's validity ends at most its term after the lock (its last renewal
  // came before), given a second for a loaded machine. The keeper drops a
  // lease, then tells of it: wait for both.
  ASSERT_TRUE(Eventually([&] { return a.holds() == 0 && a.losses == 8u; }));
  EXPECT_LT(std::chrono::steady_clock::now() - locked, 600ms + 1s);
  ASSERT_TRUE(Ok(lock.get(), "ROLLBACK"));
  // The call returns; the keeper takes them again, under new epochs.
  ASSERT_TRUE(Eventually([&] { return a.holds() == 8; }));
  a.keeper.Stop(/*release=*/true);
  for (const auto& [part, epoch] : a.epochs) {
    EXPECT_EQ(epoch, 2) << "partition " << part;
  }
}

// A write transaction left open on leases (its node was cut off from the
// database mid-send; the server keeps the transaction until it notices)
// holds up the taking of those leases, but never the taker's heartbeat and
// renewals: the taker stays live and keeps its own partitions meanwhile,
// and takes the others once the transaction ends.
TEST_F(PgLeaseTest, ATransactionLeftOpenOnLeasesHoldsUpNoKeepersHeartbeat) {
  // (Terms long enough for a loaded machine under a sanitizer: rounds
  // 0.5 s apart, lock waits of 0.25 s, renewals valid for 1 s.)
  const LeaseTerms terms{1500ms, 500ms};
  Node a(url_, "a", terms), b(url_, "b", terms);
  a.keeper.Start();
  b.keeper.Start();
  ASSERT_TRUE(Eventually([&] { return a.holds() == 4 && b.holds() == 4; }));
  // (a may have taken all eight first and given four to b: counted lost.)
  const std::size_t lost_before = a.losses.load();
  Conn cut = Connect();
  Result fence = BeginFenced(cut.get(), "b", b.keeper.held());
  ASSERT_EQ(PQresultStatus(fence.get()), PGRES_TUPLES_OK);
  b.keeper.Stop(/*release=*/false);
  // Three terms past b's leases' expiry, a's taking of them waits on the
  // open transaction's locks all along; a's own four stay a's.
  Conn watch = Connect();
  const auto end = std::chrono::steady_clock::now() + 3 * terms.ttl;
  while (std::chrono::steady_clock::now() < end) {
    ASSERT_EQ(a.losses.load(), lost_before)
        << "a lost leases while a taking waited";
    std::vector<std::string> live;
    ASSERT_TRUE(LiveNodes(watch.get(), terms.ttl, &live).ok());
    ASSERT_TRUE(std::find(live.begin(), live.end(), "a") != live.end())
        << "a's heartbeat stopped while a taking waited";
    std::this_thread::sleep_for(20ms);  // (a sampling interval)
  }
  EXPECT_EQ(a.holds(), 4u);
  ASSERT_TRUE(Ok(cut.get(), "ROLLBACK"));
  ASSERT_TRUE(Eventually([&] { return a.holds() == 8; }));
  a.keeper.Stop(/*release=*/true);
}

TEST(PgLeaseBalance, LiveNodesGetEvenSharesAndNeverTakeFromEachOther) {
  const std::vector<std::string> live = {"a", "b", "c"};
  // Nothing owned yet: 16 over 3 is 6, 5, 5, each taking the lowest free.
  Rebalance r = Balance(16, live, "a", {});
  EXPECT_EQ(r.take.size(), 6u);
  EXPECT_TRUE(r.give.empty());
  EXPECT_EQ(Balance(16, live, "c", {}).take.size(), 5u);
  // a owns everything: it gives up the ten highest.
  std::map<int, std::string> owners;
  for (int p = 0; p < 16; ++p) owners[p] = "a";
  r = Balance(16, live, "a", owners);
  EXPECT_TRUE(r.take.empty());
  EXPECT_EQ(r.give, (std::vector<int>{6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  // b may take nothing a live node owns...
  EXPECT_TRUE(Balance(16, live, "b", owners).take.empty());
  // ...but what a dead node owns, lowest first.
  for (int p = 8; p < 16; ++p) owners[p] = "gone";
  r = Balance(16, live, "b", owners);
  EXPECT_EQ(r.take, (std::vector<int>{8, 9, 10, 11, 12}));
  // A node not yet in the live list counts itself.
  r = Balance(4, {"a"}, "b", {{0, "a"}, {1, "a"}});
  EXPECT_EQ(r.take, (std::vector<int>{2, 3}));
}

}  // namespace
}  // namespace delayd::pg
