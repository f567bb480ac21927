// Three delayd nodes (the binary, DELAYD_BINARY) of one cluster on a
// PostgreSQL of the test's, with the face of TestDaemon: the API tests
// built against it (cluster_api_test) make every call through node a,
// which owns a third of the partitions and forwards, splits, joins and
// relays the rest.
//
// One PostgreSQL serves the whole test program (a database per cluster);
// it is stopped at exit.
#ifndef DELAYD_TESTS_COMMON_CLUSTER_DAEMON_H_
#define DELAYD_TESTS_COMMON_CLUSTER_DAEMON_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <memory>
#include <thread>

#include "delayd/v1/delayd.grpc.pb.h"
#include "tests/common/cluster_log.h"
#include "tests/common/daemon_process.h"
#include "tests/common/postgres_server.h"
#include "tests/common/temp_dir.h"

namespace delayd::testing {

class ClusterDaemon {
 public:
  static constexpr int kPartitions = 64;  // delayd's default.
  static constexpr const char* kNames[] = {"a", "b", "c"};

  ClusterDaemon() { Start(); }

  bool started() const { return started_; }
  std::uint32_t partitions() const { return kPartitions; }
  v1::Delayd::Stub& stub() { return *stub_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  // The address stub() calls, for a channel of a test's own.
  std::string target() const { return nodes_[0]->address(); }
  // Stops every node with SIGTERM, a at last (each with a grace of 500 ms,
  // whatever `grace`).
  void Shutdown(std::chrono::milliseconds /*grace*/ = 1000ms) {
    for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
      EXPECT_EQ((*it)->Stop(SIGTERM, 20s), 0) << (*it)->output();
    }
  }

 private:
  // The nodes, once each owns partitions and knows who owns the others.
  void Start() {
    PostgresServer* pg = Postgres();
    ASSERT_NE(pg, nullptr) << "PostgreSQL did not start";
    db_ = pg->NewDatabase();
    std::ofstream(dir_ / "token") << "cluster-api-token-0123456789\n";
    for (const char* name : kNames) {
      nodes_.push_back(std::make_unique<DaemonProcess>(
          DELAYD_BINARY,
          std::vector<std::string>{
              "--store", pg->Url(db_), "--node-id", name, "--advertise",
              "127.0.0.1:0", "--cluster-token-file", dir_ / "token",
              "--lease-ttl", "1s", "--shutdown-grace", "500ms"}));
      ASSERT_TRUE(nodes_.back()->WaitForPort(30s)) << nodes_.back()->output();
    }
    const auto end = std::chrono::steady_clock::now() + 30s;
    while (!Settled(*pg) || !KnowsOwners()) {
      ASSERT_LT(std::chrono::steady_clock::now(), end);
      std::this_thread::sleep_for(20ms);
    }
    channel_ = grpc::CreateChannel(nodes_[0]->address(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Delayd::NewStub(channel_);
    started_ = true;
  }

  static PostgresServer* Postgres() {
    static std::unique_ptr<PostgresServer> pg = [] {
      std::string error;
      auto s = PostgresServer::Start(&error);
      EXPECT_NE(s, nullptr) << error;
      return s;
    }();
    return pg.get();
  }

  // Whether every node holds its share of the partitions (they spread out
  // over a few lease rounds) and has loaded what it holds, as its log says.
  bool Settled(PostgresServer& pg) {
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const std::string name = kNames[i];
      const int owned = std::atoi(
          pg.Exec(db_, "SELECT count(*) FROM delayd_leases WHERE owner = '" +
                           name + "' AND expires_at > now()")
              .c_str());
      if (owned < kPartitions / 3 ||
          PartitionsLoaded(nodes_[i]->output()) != owned) {
        return false;
      }
    }
    return true;
  }
  // Whether every node answers a call that needs the owners' map (each
  // learns it from the database in its first lease round).
  bool KnowsOwners() {
    for (const auto& node : nodes_) {
      auto stub = v1::Delayd::NewStub(grpc::CreateChannel(
          node->address(), grpc::InsecureChannelCredentials()));
      v1::ListTimersRequest req;
      req.set_namespace_("default");
      v1::ListTimersResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 5s);
      if (!stub->ListTimers(&ctx, req, &resp).ok()) return false;
    }
    return true;
  }

  TempDir dir_;
  std::string db_;
  std::vector<std::unique_ptr<DaemonProcess>> nodes_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Delayd::Stub> stub_;
  bool started_ = false;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_CLUSTER_DAEMON_H_
