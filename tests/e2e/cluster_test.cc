// Two delayd nodes on one PostgreSQL (--advertise), as real processes:
// they split the partitions (calls on any node reach a key's owner:
// forward_test.cc); when a node is killed (kill -9) the other takes its
// partitions once their leases expire and fires their timers, none early, none
// lost; a node stopped with SIGTERM gives its leases back and the other takes
// them at once.
#include <signal.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/common/metrics_scrape.h"
#include "tests/e2e/cluster_harness.h"

namespace delayd::testing {
namespace {

TEST_F(Cluster, AKilledNodesTimersFireOnTheOtherNoneEarlyNoneLost) {
  std::unique_ptr<DaemonProcess> a, b;
  ASSERT_NO_FATAL_FAILURE(StartTwo(&a, &b));
  ASSERT_TRUE(a->WaitForOutput("loaded in", 10s)) << a->output();
  ASSERT_TRUE(b->WaitForOutput("loaded in", 10s)) << b->output();
  Worker at_b(*b);
  auto stub_a = StubOf(*a), stub_b = StubOf(*b);
  // Due before a's leases can have expired: b fires them as overdue.
  const WallNanos due = WallNow() + 1'500'000'000;
  SetAll(100, due, {stub_a.get(), stub_b.get()});
  int on_a = 0;
  for (int i = 0; i < 100; ++i)
    on_a += OwnerOf("job-" + std::to_string(i)) == "a";
  EXPECT_GT(on_a, 20);
  EXPECT_LT(on_a, 80);

  a->Stop(SIGKILL, 10s);
  ASSERT_TRUE(Eventually([&] { return Owners() == "b:64"; }, 10s)) << Owners();
  ASSERT_TRUE(Eventually([&] { return at_b.got().size() == 100; }, 30s))
      << at_b.got().size() << " of 100\n"
      << b->output();
  for (const auto& [key, times] : at_b.got()) {
    EXPECT_GE(times.first, due) << key << " fired early";
    EXPECT_EQ(times.second, due) << key;
  }
  // b takes calls for every key now (once it knows a is gone).
  v1::SetTimerResponse resp;
  for (int i = 0; i < 100; ++i) {
    const std::string key = "job-" + std::to_string(i);
    ASSERT_TRUE(Eventually(
        [&] {
          return Set(*stub_b, key, WallNow() + 60'000'000'000, &resp).ok();
        },
        5s))
        << key;
  }
}

TEST_F(Cluster, ANodeStoppedWithSigtermHandsItsPartitionsOverAtOnce) {
  std::unique_ptr<DaemonProcess> a, b;
  ASSERT_NO_FATAL_FAILURE(StartTwo(&a, &b));
  auto stub_a = StubOf(*a), stub_b = StubOf(*b);
  SetAll(40, WallNow() + 3'600'000'000'000, {stub_a.get(), stub_b.get()});
  EXPECT_EQ(a->Stop(SIGTERM, 30s), 0) << a->output();
  const auto stopped = std::chrono::steady_clock::now();
  // Given back and told, not expired: b takes and loads them at once (the
  // bound leaves room for a loaded machine).
  ASSERT_TRUE(Eventually(
      [&] {
        v1::GetTimerRequest req;
        req.set_namespace_("jobs");
        for (int i = 0; i < 40; ++i) {
          req.set_key("job-" + std::to_string(i));
          grpc::ClientContext ctx;
          v1::Timer t;
          if (!stub_b->GetTimer(&ctx, req, &t).ok()) return false;
        }
        return true;
      },
      10s))
      << b->output();
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 2s);
}

// Policies live in the database for the whole cluster: one set on node a
// applies on node b at once (a notification; b also reads them every
// 30 s, longer than this test waits).
TEST_F(Cluster, APolicySetOnOneNodeAppliesOnTheOther) {
  auto a = Node("a");
  ASSERT_TRUE(a->WaitForPort(30s)) << a->output();
  auto b = Node("b");
  ASSERT_TRUE(b->WaitForPort(30s)) << b->output();
  auto stub_a = StubOf(*a), stub_b = StubOf(*b);
  v1::SetPolicyRequest set;
  set.set_namespace_("jobs");
  set.mutable_policy()->set_max_attempts(3);
  set.mutable_policy()->set_paused(true);
  v1::Policy stored;
  // (Retried: while b joins, partitions move, and a write may answer
  // UNAVAILABLE.)
  auto set_at_a = [&] {
    return Retried([&] {
      grpc::ClientContext ctx;
      Prepare(&ctx);
      return stub_a->SetPolicy(&ctx, set, &stored);
    });
  };
  ASSERT_TRUE(set_at_a().ok());
  auto policy_at_b = [&] {
    v1::GetPolicyRequest get;
    get.set_namespace_("jobs");
    grpc::ClientContext c;
    v1::Policy p;
    EXPECT_TRUE(stub_b->GetPolicy(&c, get, &p).ok());
    return p;
  };
  ASSERT_TRUE(Eventually(
      [&] {
        const v1::Policy p = policy_at_b();
        return p.max_attempts() == 3 && p.paused();
      },
      5s))
      << b->output();
  // And back to the default.
  set.clear_policy();
  ASSERT_TRUE(set_at_a().ok());
  ASSERT_TRUE(Eventually(
      [&] {
        const v1::Policy p = policy_at_b();
        return p.max_attempts() == 0 && !p.paused();
      },
      5s))
      << b->output();
}

// A node that cannot reach the database lets its leases go on its own
// clock and, owning nothing, says so in its health (a probe takes it out of
// rotation: its calls could only fail); once it reaches the database again
// it takes partitions and serves. (The store alone would not notice: an
// idle node writes nothing.)
TEST_F(Cluster, ANodeCutOffFromTheDatabaseIsNotServingUntilItReachesItAgain) {
  auto a = Node("a", {"--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(a->WaitForPort(30s)) << a->output();
  ASSERT_TRUE(a->WaitForOutput("/metrics (port ", 5s));
  const int metrics = MetricsPortIn(a->output());
  ASSERT_TRUE(Eventually([&] { return Owners() == "a:64"; }, 20s)) << Owners();
  auto loaded = [&] {
    const std::string out = a->output();
    int n = 0;
    for (std::size_t at = 0;
         (at = out.find("taken (epoch", at)) != std::string::npos; ++at) {
      ++n;
    }
    return n;
  };
  ASSERT_TRUE(Eventually([&] { return loaded() == 64; }, 20s)) << loaded();
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(a->address(), grpc::InsecureChannelCredentials()));
  auto status = [&] {
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse resp;
    grpc::ClientContext ctx;
    Prepare(&ctx);
    EXPECT_TRUE(health->Check(&ctx, req, &resp).ok());
    return resp.status();
  };
  EXPECT_EQ(status(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(Metric(metrics, "delayd_cluster_partitions_owned"), 64);
  EXPECT_EQ(
      Metric(metrics,
             "delayd_cluster_partitions_moved_total{direction=\"gained\"}"),
      64);
  EXPECT_GT(Metric(metrics, "delayd_cluster_lease_round_seconds_count"), 0);
  pg_->Stop();
  // Its leases end within the term (1 s), its rounds fail for a term more.
  ASSERT_TRUE(Eventually(
      [&] {
        return status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING;
      },
      10s))
      << a->output();
  EXPECT_TRUE(a->WaitForOutput("owns no partition and cannot reach", 8s))
      << a->output();
  EXPECT_EQ(Metric(metrics, "delayd_cluster_partitions_owned"), 0);
  EXPECT_EQ(Metric(metrics,
                   "delayd_cluster_partitions_moved_total{direction=\"lost\"}"),
            64);
  EXPECT_GT(Metric(metrics, "delayd_cluster_lease_rounds_failed_total"), 0);
  std::string error;
  ASSERT_TRUE(pg_->Restart(&error)) << error;
  ASSERT_TRUE(Eventually(
      [&] {
        return status() == grpc::health::v1::HealthCheckResponse::SERVING;
      },
      20s))
      << a->output();
}

// ClusterStatus (and delayctl cluster, which prints it): the nodes, their
// addresses, and the partitions each owns under its epochs, as the database
// says, from any node; refused by a daemon that is not a cluster node.
TEST_F(Cluster, ClusterStatusShowsTheNodesAndWhatEachOwns) {
  std::unique_ptr<DaemonProcess> a, b;
  ASSERT_NO_FATAL_FAILURE(StartTwo(&a, &b));
  ASSERT_TRUE(Eventually(
      [&] { return a->output().find("cluster node 'a'") != std::string::npos; },
      10s));
  v1::ClusterStatusResponse status;
  grpc::ClientContext ctx;
  Prepare(&ctx);
  ASSERT_TRUE(StubOf(*a)
                  ->ClusterStatus(&ctx, v1::ClusterStatusRequest(), &status)
                  .ok());
  EXPECT_EQ(status.node(), "a");
  EXPECT_EQ(status.lease_ttl().seconds(), 1);
  ASSERT_EQ(status.nodes_size(), 2);
  for (const auto& n : status.nodes()) {
    EXPECT_TRUE(n.live()) << n.node();
    EXPECT_EQ(n.partitions_size(), 32) << n.node();
    EXPECT_EQ(n.advertise(), (n.node() == "a" ? a : b)->address());
  }
  ASSERT_EQ(status.partitions_size(), 64);
  for (const auto& p : status.partitions()) {
    EXPECT_FALSE(p.owner().empty()) << p.partition();
    EXPECT_GE(p.epoch(), 1u) << p.partition();
  }
  // The same through delayctl, as an operator reads it.
  const std::string command = std::string(DELAYCTL_BINARY) + " --endpoint " +
                              b->address() + " cluster 2>&1";
  std::string printed;
  if (FILE* f = popen(command.c_str(), "r")) {
    char buf[4096];
    while (std::size_t n = fread(buf, 1, sizeof buf, f)) printed.append(buf, n);
    EXPECT_EQ(pclose(f), 0) << printed;
  }
  EXPECT_NE(printed.find("NODE"), std::string::npos) << printed;
  EXPECT_NE(printed.find(b->address()), std::string::npos) << printed;
  EXPECT_NE(printed.find("(answered)"), std::string::npos) << printed;
  EXPECT_NE(printed.find("64 partitions, 0 without an owner"),
            std::string::npos)
      << printed;
  // A daemon that is not a cluster node has no cluster to show.
  DaemonProcess alone(DELAYD_BINARY, {"--in-memory"});
  ASSERT_TRUE(alone.ok()) << alone.output();
  grpc::ClientContext c2;
  Prepare(&c2);
  EXPECT_EQ(StubOf(alone)
                ->ClusterStatus(&c2, v1::ClusterStatusRequest(), &status)
                .error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace delayd::testing
