// Who may be a node of a cluster, and how a node leaves it: a node needs
// the cluster's token and must prove it holds it before it takes a lease;
// a second process with a live node's id is refused; a node that stops
// relays the answers to the calls it forwarded; a frozen node whose id was
// taken stops when it wakes. Real processes on one PostgreSQL.
#include <gtest/gtest.h>

#include <fstream>
#include <future>

#include "tests/common/metrics_scrape.h"
#include "tests/e2e/cluster_harness.h"

namespace delayd::testing {
namespace {

TEST_F(Cluster, ANodeWithoutAClusterTokenRefusesToStart) {
  DaemonProcess d(
      DELAYD_BINARY,
      {"--store", url_, "--node-id", "a", "--advertise", "127.0.0.1:0"}, 2s);
  EXPECT_EQ(d.Stop(0, 10s), 1);
  EXPECT_NE(d.output().find("needs --cluster-token-file"), std::string::npos)
      << d.output();
}

// A node must prove it holds the cluster's token before it takes a lease:
// one started with another token is refused in one line, exits 2 and takes
// nothing; the cluster's calls go on.
TEST_F(Cluster, ANodeWithAnotherClusterTokenIsRefusedAndTakesNothing) {
  auto a = Node("a");
  ASSERT_TRUE(a->WaitForPort(30s)) << a->output();
  ASSERT_TRUE(Eventually([&] { return Owners() == "a:64"; }, 20s)) << Owners();
  std::ofstream(dir_ / "other-token") << "another-secret-0123456789\n";
  DaemonProcess x(
      DELAYD_BINARY,
      {"--store", url_, "--node-id", "x", "--advertise", "127.0.0.1:0",
       "--cluster-token-file", dir_ / "other-token", "--lease-ttl", "1s"},
      2s);
  EXPECT_EQ(x.Stop(0, 10s), 2) << x.output();
  EXPECT_NE(x.output().find("refusing to join the cluster as node 'x': this "
                            "node's cluster token"),
            std::string::npos)
      << x.output();
  EXPECT_EQ(Owners(), "a:64");
  EXPECT_EQ(
      pg_->Exec(db_, "SELECT count(*) FROM delayd_nodes WHERE node = 'x'"),
      "0");
  auto stub = StubOf(*a);
  v1::SetTimerResponse resp;
  EXPECT_TRUE(Set(*stub, "k", WallNow() + 60'000'000'000, &resp).ok());
}

// A second process with a live node's id is refused, naming the id, and
// changes nothing of the first (its address stays); a node killed and
// started again takes its id back once its old heartbeat lapses.
TEST_F(Cluster, ASecondProcessWithALiveNodesIdIsRefused) {
  std::unique_ptr<DaemonProcess> a, b;
  ASSERT_NO_FATAL_FAILURE(StartTwo(&a, &b));
  const std::string address =
      pg_->Exec(db_, "SELECT advertise FROM delayd_nodes WHERE node = 'a'");
  auto twin = Node("a");
  EXPECT_FALSE(twin->WaitForPort(5s));
  EXPECT_EQ(twin->Stop(0, 10s), 2) << twin->output();
  EXPECT_NE(twin->output().find("node id 'a' is held by a live process"),
            std::string::npos)
      << twin->output();
  EXPECT_EQ(
      pg_->Exec(db_, "SELECT advertise FROM delayd_nodes WHERE node = 'a'"),
      address);
  EXPECT_EQ(Owners(), "a:32,b:32");

  a->Stop(SIGKILL, 10s);
  a = Node("a");
  ASSERT_TRUE(a->WaitForPort(30s)) << a->output();
  ASSERT_TRUE(Eventually([&] { return Owners() == "a:32,b:32"; }, 20s))
      << Owners() << "\n"
      << a->output();
}

// A node stopped while a call it forwarded waits for the owner relays the
// owner's answer when it comes within the shutdown grace: the owner may
// have applied the call, and CANCELLED would tell the caller nothing. A
// call that arrives once it stops is not forwarded (UNAVAILABLE: it may be
// sent again anywhere).
TEST_F(Cluster, ANodeThatStopsRelaysTheAnswersToTheCallsItForwarded) {
  std::unique_ptr<DaemonProcess> a, b;
  // (Leases outlast b's freeze: b's answer is the write's.)
  ASSERT_NO_FATAL_FAILURE(
      StartTwo(&a, &b,
               {"--metrics-listen", "127.0.0.1:0", "--shutdown-grace", "10s",
                "--lease-ttl", "5s"}));
  const int metrics = MetricsPortIn(a->output());
  ASSERT_NE(metrics, 0) << a->output();
  auto stub_a = StubOf(*a);
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 2; ++i) {
    const std::string key = "stop-" + std::to_string(i);
    if (OwnerOf(key) == "b") keys.push_back(key);
  }
  // a knows b owns them once a call through a is forwarded.
  ASSERT_TRUE(Eventually(
      [&] {
        v1::GetTimerRequest req;
        req.set_namespace_("jobs");
        req.set_key(keys[0]);
        v1::Timer resp;
        grpc::ClientContext ctx;
        Prepare(&ctx);
        return stub_a->GetTimer(&ctx, req, &resp).error_code() ==
               grpc::StatusCode::NOT_FOUND;
      },
      10s));
  // A call through a to b, frozen: forwarded, and waiting.
  ASSERT_TRUE(b->Freeze());
  struct Async {
    grpc::ClientContext ctx;
    v1::SetTimerRequest req;
    v1::SetTimerResponse resp;
    std::promise<grpc::Status> status;
  };
  auto send = [&](const std::string& key) {
    auto call = std::make_unique<Async>();
    Prepare(&call->ctx);
    call->ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    call->req.set_namespace_("jobs");
    call->req.set_key(key);
    *call->req.mutable_fire_time() = FromNanos(WallNow() + 3'600'000'000'000);
    stub_a->async()->SetTimer(&call->ctx, &call->req, &call->resp,
                              [c = call.get()](grpc::Status s) {
                                c->status.set_value(std::move(s));
                              });
    return call;
  };
  auto first = send(keys[0]);
  auto first_status = first->status.get_future();
  ASSERT_TRUE(Eventually(
      [&] {
        return Metric(metrics, "delayd_forwarded_requests_in_flight") == 1;
      },
      10s));
  // SIGTERM: a waits for b's answer (a node that cut the call off would
  // have exited well within this).
  EXPECT_EQ(a->Stop(SIGTERM, 1500ms), std::nullopt) << a->output();
  // Stopping, a forwards nothing more.
  auto second = send(keys[1]);
  auto second_status = second->status.get_future();
  ASSERT_EQ(second_status.wait_for(10s), std::future_status::ready);
  const grpc::Status s2 = second_status.get();
  EXPECT_EQ(s2.error_code(), grpc::StatusCode::UNAVAILABLE)
      << s2.error_message();
  ASSERT_TRUE(b->Thaw());
  ASSERT_EQ(first_status.wait_for(20s), std::future_status::ready);
  const grpc::Status s1 = first_status.get();
  EXPECT_TRUE(s1.ok()) << s1.error_code() << " " << s1.error_message() << "\n"
                       << a->output();
  EXPECT_EQ(a->Stop(0, 20s), 0) << a->output();
  // b has what a answered.
  auto stub_b = StubOf(*b);
  v1::GetTimerRequest req;
  req.set_namespace_("jobs");
  req.set_key(keys[0]);
  v1::Timer got;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  ASSERT_TRUE(stub_b->GetTimer(&ctx, req, &got).ok());
  EXPECT_EQ(got.version(), first->resp.version());
}

// A node frozen past its lease term whose id another process took meanwhile
// stops when it wakes (exit 2), leaving the id and the leases to that one.
TEST_F(Cluster, AFrozenNodeWhoseIdWasTakenStopsWhenItWakes) {
  std::unique_ptr<DaemonProcess> a, b;
  ASSERT_NO_FATAL_FAILURE(StartTwo(&a, &b));
  ASSERT_TRUE(a->Freeze());
  auto successor = Node("a");
  ASSERT_TRUE(successor->WaitForPort(30s)) << successor->output();
  ASSERT_TRUE(a->Thaw());
  EXPECT_EQ(a->Stop(0, 20s), 2) << a->output();
  EXPECT_NE(a->output().find("is held by another process now"),
            std::string::npos)
      << a->output();
  const std::string address = "127.0.0.1:" + std::to_string(successor->port());
  EXPECT_EQ(
      pg_->Exec(db_, "SELECT advertise FROM delayd_nodes WHERE node = 'a'"),
      address);
  ASSERT_TRUE(Eventually([&] { return Owners() == "a:32,b:32"; }, 20s))
      << Owners();
}

}  // namespace
}  // namespace delayd::testing
