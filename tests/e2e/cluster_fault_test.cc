// Three delayd nodes on a PostgreSQL primary with a synchronous standby
// (the nodes given both hosts), under a mixed load (sets, moves,
// removes over two namespaces, through whichever nodes run; workers on
// every node acknowledging), through one fault each: two nodes killed,
// a node frozen past its lease, a rolling SIGTERM restart, the database's
// primary killed and its standby promoted, a node cut off from the
// database. After each: no acknowledged timer lost, none removed fired,
// none early or at a time other than its last acknowledged one, and
// duplicates no more than what can be in flight at the faults.
#include <signal.h>

#include <iostream>
#include <set>
#include <sstream>
#include <vector>

#include "server/common/rfc3339.h"
#include "tests/common/tcp_proxy.h"
#include "tests/e2e/fault_load.h"

namespace delayd::testing {
namespace {

class ClusterFaults : public Cluster {
 protected:
  static constexpr const char* kNames[] = {"a", "b", "c"};

  // Node `name` on `url` (url_ if empty), running and in the book.
  void Start(const std::string& name, const std::string& url = "") {
    auto& node = nodes_[name];
    node = Node(name, {}, url);
    ASSERT_TRUE(node->WaitForPort(30s)) << node->output();
    book_.Up(name, node->address());
  }
  // The three nodes, once each owns partitions, on the primary and a
  // synchronous standby (c on `url_of_c` if given).
  void StartThree(const std::string& url_of_c = "") {
    std::string error;
    standby_ = pg_->StartStandby("s1", &error);
    ASSERT_NE(standby_, nullptr) << error;
    url_ = "postgresql://delayd@127.0.0.1:" + std::to_string(pg_->port()) +
           ",127.0.0.1:" + std::to_string(standby_->port()) + "/" + db_ +
           "?target_session_attrs=read-write";
    ASSERT_NO_FATAL_FAILURE(Start("a"));
    ASSERT_NO_FATAL_FAILURE(Start("b"));
    ASSERT_NO_FATAL_FAILURE(Start("c", url_of_c));
    ASSERT_TRUE(Eventually([&] { return OwnerCount() == 3; }, 20s)) << Owners();
  }
  // How many nodes own partitions, as the database says.
  int OwnerCount() {
    const std::string owners = Owners();
    return owners.empty() ? 0
                          : std::count(owners.begin(), owners.end(), ',') + 1;
  }
  bool Owns(const std::string& name) {
    return ("," + Owners()).find("," + name + ":") != std::string::npos;
  }
  // Whether nodes other than `name` hold every partition's lease.
  bool OthersOwnAll(const std::string& name) {
    return pg_->Exec(db_,
                     "SELECT count(*) FROM delayd_leases WHERE expires_at > "
                     "now() AND owner <> '" +
                         name + "'") == "64";
  }

  // The load and three workers per namespace, each starting on another
  // node.
  void Begin() {
    load_ = std::make_unique<FaultLoad>(book_);
    for (const char* ns : kFaultNamespaces) {
      for (int i = 0; i < 3; ++i) {
        workers_.push_back(std::make_unique<FaultWorker>(book_, ns, i));
      }
    }
  }
  // Until the load has set `n` more keys.
  void Load(std::size_t n) {
    const std::size_t from = load_->size();
    ASSERT_TRUE(Eventually([&] { return load_->size() >= from + n; }, 60s))
        << load_->size() - from << " of " << n;
  }
  // Prints `what` with the wall clock's time, to be read beside the nodes'
  // log lines.
  static void Mark(const std::string& what) {
    std::cout << "[ fault    ] " << Rfc3339Millis(WallNow()) << " " << what
              << std::endl;
  }
  // What a failed wait for the owners says: each node's warnings, errors,
  // signals and starts, then its last lines (the whole logs would be cut
  // short by ctest's output limit).
  std::string Story() {
    std::string out;
    for (const auto& [name, node] : nodes_) {
      std::istringstream lines(node->output());
      std::vector<std::string> tail;
      out +=
          "--- " + name + (node->exited() ? " (exited)" : " (running)") + "\n";
      for (std::string line; std::getline(lines, line);) {
        if (line.find(" error ") != std::string::npos ||
            line.find(" warning ") != std::string::npos ||
            line.find(" critical ") != std::string::npos ||
            line.find("signal") != std::string::npos ||
            line.find("starting") != std::string::npos) {
          out += line + "\n";
        }
        tail.push_back(line);
      }
      out += "  (last lines)\n";
      for (std::size_t i = tail.size() > 8 ? tail.size() - 8 : 0;
           i < tail.size(); ++i) {
        out += tail[i] + "\n";
      }
    }
    return out;
  }
  // What a failed Finish says of the keys not delivered: each with its
  // fire time, its row in the database and its partition's owner.
  std::string Lost(const std::map<std::string, Told>& told) {
    const FaultTally t = Check(told, Joined(workers_));
    std::string out = std::to_string(t.lost) + " not delivered (now " +
                      std::to_string(WallNow()) + "):\n";
    for (const std::string& key : t.examples) {
      const Told& was = told.at(key);
      out += "  " + was.ns + "/" + key + " fire " + std::to_string(was.fire) +
             ", row: " +
             pg_->Exec(db_,
                       "SELECT concat_ws(' ', id, part, fire_time, version, "
                       "event_id, fired_at, attempts, dead) FROM delayd_jobs "
                       "WHERE ns = '" +
                           was.ns + "' AND key = '" + key + "'::bytea") +
             ", owner " + OwnerOf(key, was.ns) + "\n";
    }
    // Each node's lines on those keys' partitions, and its signals.
    std::set<std::string> parts;
    for (const std::string& key : t.examples) {
      const Told& was = told.at(key);
      parts.insert("partition " +
                   std::to_string(StablePartition(was.ns, key, 64)) + ":");
    }
    for (const auto& [name, node] : nodes_) {
      std::istringstream lines(node->output());
      out += "--- " + name + "\n";
      for (std::string line; std::getline(lines, line);) {
        bool keep = line.find("signal") != std::string::npos ||
                    line.find("starting") != std::string::npos;
        for (const auto& p : parts) keep |= line.find(p) != std::string::npos;
        if (keep) out += line + "\n";
      }
    }
    return out;
  }
  void Kill(const std::string& name) {
    book_.Down(name);
    nodes_[name]->Stop(SIGKILL, 10s);
  }

  // Stops the load, waits for every acknowledged timer to be delivered,
  // watches a while for late duplicates, and checks (see the file's
  // comment); `faults` bounds the duplicates.
  void Finish(const std::string& what, int faults) {
    load_->Stop();
    const auto told = load_->told();
    ASSERT_TRUE(Eventually(
        [&] { return Check(told, Joined(workers_)).lost == 0; }, 60s))
        << Lost(told);
    // An event whose ack was lost comes again after its ack timeout (3 s):
    // a window past it.
    std::this_thread::sleep_for(4s);
    for (auto& w : workers_) w->Stop();
    FaultTally t = Check(told, Joined(workers_));
    std::cout << what << ": " << t.acknowledged << " acknowledged, "
              << t.removed << " removed, " << t.uncertain
              << " uncertain; duplicates " << t.duplicates
              << "; first delivery after due p50 " << t.LateMs(0.5)
              << " ms, p99 " << t.LateMs(0.99) << " ms, max " << t.LateMs(1.0)
              << " ms\n";
    for (const auto& [error, n] : load_->errors()) {
      std::cout << "  " << n << " uncertain after: " << error << "\n";
    }
    std::string examples;
    for (const auto& key : t.examples) examples += key + " ";
    EXPECT_GT(t.acknowledged, 500u);
    EXPECT_EQ(t.lost, 0u) << examples;
    EXPECT_EQ(t.removed_fired, 0u) << examples;
    EXPECT_EQ(t.early, 0u) << examples;
    EXPECT_EQ(t.wrong_time, 0u) << examples;
    EXPECT_LE(t.duplicates, static_cast<std::size_t>(faults) * workers_.size() *
                                FaultWorker::kMaxInFlight);
  }

  std::unique_ptr<PostgresServer> standby_;
  std::map<std::string, std::unique_ptr<DaemonProcess>> nodes_;
  NodeBook book_;
  std::unique_ptr<FaultLoad> load_;
  std::vector<std::unique_ptr<FaultWorker>> workers_;
};

TEST_F(ClusterFaults, KillingOneNodeThenASecondLosesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartThree());
  Begin();
  ASSERT_NO_FATAL_FAILURE(Load(300));
  Kill("a");
  ASSERT_NO_FATAL_FAILURE(Load(300));
  Kill("b");
  ASSERT_TRUE(Eventually([&] { return Owners() == "c:64"; }, 20s)) << Owners();
  ASSERT_NO_FATAL_FAILURE(Load(300));
  Finish("two nodes killed", 2);
}

// Frozen past its lease, b loses its partitions to a and c; woken, it
// neither writes nor delivers for them (a firing of its would come early,
// late at a moved time, or twice), and takes its share again.
TEST_F(ClusterFaults, AFrozenNodeActsOnNothingItLost) {
  ASSERT_NO_FATAL_FAILURE(StartThree());
  Begin();
  ASSERT_NO_FATAL_FAILURE(Load(300));
  book_.Down("b");
  ASSERT_TRUE(nodes_["b"]->Freeze());
  ASSERT_TRUE(Eventually([&] { return OthersOwnAll("b"); }, 5s)) << Owners();
  ASSERT_NO_FATAL_FAILURE(Load(300));
  ASSERT_TRUE(nodes_["b"]->Thaw());
  book_.Up("b", nodes_["b"]->address());
  ASSERT_TRUE(Eventually([&] { return OwnerCount() == 3; }, 30s))
      << Owners() << "\n"
      << Story();
  ASSERT_NO_FATAL_FAILURE(Load(300));
  Finish("a node frozen past its lease", 1);
}

TEST_F(ClusterFaults, ARollingRestartWithSigtermLosesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartThree());
  Begin();
  ASSERT_NO_FATAL_FAILURE(Load(200));
  for (const char* name : kNames) {
    book_.Down(name);
    EXPECT_EQ(nodes_[name]->Stop(SIGTERM, 20s), 0) << nodes_[name]->output();
    ASSERT_NO_FATAL_FAILURE(Load(100));
    ASSERT_NO_FATAL_FAILURE(Start(name));
    ASSERT_TRUE(Eventually([&] { return OwnerCount() == 3; }, 30s)) << Owners();
    ASSERT_NO_FATAL_FAILURE(Load(200));
  }
  Finish("rolling SIGTERM restart", 3);
}

// The nodes are given both hosts; the primary is killed and the standby
// promoted under load: they find the new primary without a restart.
TEST_F(ClusterFaults, KillingTheDatabasesPrimaryLosesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartThree());
  Begin();
  ASSERT_NO_FATAL_FAILURE(Load(300));
  pg_->Stop(SIGKILL);
  ASSERT_TRUE(standby_->Promote());
  std::swap(pg_, standby_);  // (Owners() asks the new primary.)
  ASSERT_NO_FATAL_FAILURE(Load(300));
  ASSERT_TRUE(Eventually([&] { return OwnerCount() == 3; }, 30s)) << Owners();
  ASSERT_NO_FATAL_FAILURE(Load(300));
  Finish("primary killed, standby promoted", 1);
}

// c reaches the database through a proxy that goes silent: c's leases
// lapse, a and b take its partitions; once the proxy passes traffic again,
// c takes its share back.
TEST_F(ClusterFaults, ANodeCutOffFromTheDatabaseActsOnNothingItLost) {
  TcpProxy proxy(pg_->port());
  ASSERT_NE(proxy.port(), 0);
  ASSERT_NO_FATAL_FAILURE(StartThree("postgresql://delayd@127.0.0.1:" +
                                     std::to_string(proxy.port()) + "/" + db_));
  Begin();
  ASSERT_NO_FATAL_FAILURE(Load(300));
  Mark("c cut off");
  proxy.Cut();
  // (Within a few lease terms: this load's write groups fit in one of the
  // proxy's reads, so the cut falls between c's transactions. One cut in
  // the middle would hold the partitions it touched until the heal: the
  // README's keepalives.)
  ASSERT_TRUE(Eventually([&] { return OthersOwnAll("c"); }, 5s)) << Owners();
  Mark("a and b own all");
  ASSERT_NO_FATAL_FAILURE(Load(300));
  Mark("c healed");
  proxy.Heal();
  ASSERT_TRUE(Eventually([&] { return OwnerCount() == 3; }, 30s))
      << Owners() << "\n"
      << Story();
  ASSERT_NO_FATAL_FAILURE(Load(300));
  Finish("a node cut off from the database", 1);
}

}  // namespace
}  // namespace delayd::testing
