// The daemon on one loop (--threading loop, loop_server.h): every method is
// served, health follows the server's status, and what other threads post
// or timers make due runs at once, not after the loop's longest wait (a
// minute here). The service tests also run whole on the loop
// (tests/server/CMakeLists.txt: the "loop." tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/thread_names.h"
#include "tests/server/calls.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;

DelaydServer::Options OnLoop() {
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  o.loop = true;
  o.loop_queues = LoopQueuesFromEnv();
  o.loop_max_wait = std::chrono::minutes(1);
  return o;
}

TEST(LoopServer, ServesEveryMethodOfTheService) {
  EXPECT_EQ(LoopServer::Unserved(), std::vector<std::string>());
}

TEST(LoopServer, WorkPostedFromOtherThreadsRunsAtOnce) {
  TestDaemon d(OnLoop());
  ASSERT_TRUE(d.started());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    std::promise<void> ran;
    std::thread([&] {
      asio::post(d.server().scheduler().executor(),
                 [&ran] { ran.set_value(); });
    }).join();
    ASSERT_EQ(ran.get_future().wait_for(10s), std::future_status::ready)
        << "post " << i;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST(LoopServer, TimersFireAndLeasesRunOutOnTime) {
  TestDaemon d(OnLoop());
  ASSERT_TRUE(d.started());
  TestStream worker(d.stub(), TestStream::Worker("", 10, 300));
  ASSERT_TRUE(worker.WaitRegistered());
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(Set(d.stub(), "", "k", 100).ok());
  // Fired, then (never acked) its lease runs out and it comes again.
  const auto events = worker.WaitFor(2, 10s);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].key(), "k");
  EXPECT_EQ(events[1].attempt(), events[0].attempt() + 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

// A handler that holds the loop (a write the disk holds up, say) does not
// hold the daemon: its relief serves calls, fires timers and writes events
// to streams meanwhile.
TEST(LoopServer, ALoopHeldUpIsRelieved) {
  TestDaemon d(OnLoop());
  ASSERT_TRUE(d.started());
  // (From its doze: the loop's next turn wakes it.)
  ASSERT_GE(WaitUntilAsleep("delayd-relief", 400ms, 10s), 0);
  std::promise<void> held, release;
  std::shared_future<void> released = release.get_future().share();
  asio::post(d.server().scheduler().executor(), [&held, released] {
    held.set_value();
    released.wait();
  });
  ASSERT_EQ(held.get_future().wait_for(10s), std::future_status::ready);
  struct Release {
    std::promise<void>& p;
    ~Release() { p.set_value(); }
  } release_at_end{release};
  TestStream worker(d.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(worker.WaitRegistered());
  ASSERT_TRUE(Set(d.stub(), "", "k", 100).ok());
  const auto events = worker.WaitFor(1, 10s);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].key(), "k");
}

// An idle loop wakes nothing: its relief dozes, once it has looked and
// found no turn since its last look, until the loop's next turn.
TEST(LoopServer, AnIdleLoopsReliefDozes) {
  TestDaemon d(OnLoop());
  ASSERT_TRUE(d.started());
  EXPECT_GE(WaitUntilAsleep("delayd-relief", 400ms, 10s), 0)
      << "the relief kept waking (every " << LoopServer::kReliefTick.count()
      << " ms)";
  // Woken by traffic, it dozes again after it.
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(Health(d.channel(), ""), HealthCheckResponse::SERVING);
  }
  EXPECT_GE(WaitUntilAsleep("delayd-relief", 400ms, 10s), 0);
}

// With the daemon's own bound on its wait (not the tests' minute), an idle
// loop sleeps: it wakes once a kMaxWait for it and for nothing else (each
// wake-up is an idle daemon's CPU: tests/bench/README.md, "Idle").
TEST(LoopServer, AnIdleLoopSleeps) {
  if (LoopFromEnv()) {
    GTEST_SKIP() << "this copy's daemons wait a minute on the queue; the "
                    "plain copy tests the daemon's own bound";
  }
  DelaydServer::Options o = OnLoop();
  o.loop_queues = 1;  // (Several would wake in turns.)
  o.loop_max_wait = LoopServer::kMaxWait;
  TestDaemon d(o);
  ASSERT_TRUE(d.started());
  EXPECT_GE(WaitUntilAsleep("delayd-loop", LoopServer::kMaxWait * 6 / 10, 20s),
            0)
      << "the loop kept waking";
}

// Several loops (--loop-queues), each on a queue of its own: calls on many
// connections (gRPC gives each connection's calls to one queue while it has
// calls requested, picking a connection's queue at random) are all served,
// by more than one queue, and their timers reach a worker on a connection
// of its own, whichever loop fires them.
TEST(LoopServer, SeveralQueuesServeEveryConnection) {
  DelaydServer::Options o = OnLoop();
  o.loop_queues = 3;
  TestDaemon d(o);
  ASSERT_TRUE(d.started());
  EXPECT_EQ(ThreadsNamed("delayd-loop"), 3);
  TestStream worker(d.stub(), TestStream::Worker(""));
  ASSERT_TRUE(worker.WaitRegistered());
  constexpr int kConnections = 12;
  std::vector<std::thread> callers;
  std::atomic<int> failed{0};
  for (int c = 0; c < kConnections; ++c) {
    callers.emplace_back([&, c] {
      // (A channel argument of its own: a connection of its own.)
      grpc::ChannelArguments args;
      args.SetInt("delayd.test.connection", c);
      auto stub = v1::Delayd::NewStub(
          grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(d.port()),
                                    grpc::InsecureChannelCredentials(), args));
      for (int i = 0; i < 5; ++i) {
        const std::string key = std::to_string(c) + "-" + std::to_string(i);
        if (!Set(*stub, "", key, 10).ok()) ++failed;
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(failed.load(), 0);
  const auto events = worker.WaitFor(kConnections * 5, 20s);
  std::set<std::string> keys;
  for (const auto& e : events) keys.insert(e.key());
  EXPECT_EQ(keys.size(), static_cast<std::size_t>(kConnections * 5));
  // (gRPC picks each connection's queue at random: the twelve on one of
  // three queues is one chance in 177,147.)
  ASSERT_NE(d.server().loop(), nullptr);
  const auto taken = d.server().loop()->CallsTaken();
  ASSERT_EQ(taken.size(), 3u);
  EXPECT_GE(std::count_if(taken.begin(), taken.end(),
                          [](std::uint64_t n) { return n > 0; }),
            2)
      << taken[0] << " " << taken[1] << " " << taken[2];
}

TEST(LoopServer, HealthFollowsTheServer) {
  TestDaemon d(OnLoop());
  ASSERT_TRUE(d.started());
  EXPECT_EQ(Health(d.channel(), ""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(d.channel(), "delayd.v1.Delayd"),
            HealthCheckResponse::SERVING);
  auto stub = grpc::health::v1::Health::NewStub(d.channel());
  {
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("no.such.Service");
    grpc::health::v1::HealthCheckResponse resp;
    grpc::ClientContext ctx;
    EXPECT_EQ(stub->Check(&ctx, req, &resp).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  // A watcher hears SERVING at once, then NOT_SERVING when the daemon
  // begins to stop.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 20s);
  auto watch = stub->Watch(&ctx, grpc::health::v1::HealthCheckRequest());
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(watch->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::SERVING);
  std::thread stop([&] { d.Shutdown(2000ms); });
  ASSERT_TRUE(watch->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::NOT_SERVING);
  ctx.TryCancel();
  stop.join();
}

TEST(LoopServer, UnknownMethodsAreUnimplemented) {
  TestDaemon d(OnLoop());
  ASSERT_TRUE(d.started());
  grpc::GenericStub generic(d.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  grpc::Slice empty("", 0);
  grpc::ByteBuffer in(&empty, 1), out;
  std::promise<grpc::Status> answered;
  generic.UnaryCall(&ctx, "/delayd.v1.Delayd/NoSuchMethod", {}, &in, &out,
                    [&](grpc::Status s) { answered.set_value(s); });
  EXPECT_EQ(answered.get_future().get().error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace delayd::testing
