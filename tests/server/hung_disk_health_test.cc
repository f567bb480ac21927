// A disk that hangs instead of failing: while a write, a sync or a payload
// read of the store runs past --store-stall-limit, health is NOT_SERVING
// (the server's and the service's), so that probes take the daemon out of
// rotation; once the disk answers, health is SERVING again and what waited
// completes.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tests/server/hung_disk.h"

namespace delayd::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;

// Long enough that no write or read of these tests runs past it on a busy
// machine unless held; short enough to keep the tests quick.
constexpr std::chrono::milliseconds kStallLimit = 300ms;

void Watched(DelaydServer::Options& o, RocksOptions&) {
  o.store_stall_limit = kStallLimit;
}

TEST(StoreStall, HealthIsNotServingWhileTheLogHangs) {
  HoldingDaemon held(Watched);
  auto& fs = held.fs;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(Set(d.stub(), "", "before", 3'600'000).ok());
  ASSERT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::SERVING));

  fs->HoldLogWrites(true);
  std::vector<std::thread> threads;
  Release release{fs.get(), threads};
  std::atomic<bool> set_done{false};
  threads.emplace_back([&] {
    EXPECT_TRUE(Set(d.stub(), "", "held", 3'600'000).ok());
    set_done = true;
  });
  ASSERT_TRUE(Eventually([&] { return fs->held_log_writes() > 0; }));
  EXPECT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::NOT_SERVING))
      << "a log write held past the limit left health SERVING";
  EXPECT_FALSE(set_done);

  fs->HoldLogWrites(false);
  for (auto& t : threads) t.join();
  EXPECT_TRUE(set_done);
  EXPECT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::SERVING))
      << "health stayed NOT_SERVING after the disk answered";
  EXPECT_EQ(Health(d.channel(), kStoreHealthService),
            HealthCheckResponse::SERVING);
  EXPECT_TRUE(Set(d.stub(), "", "after", 3'600'000).ok());
}

TEST(StoreStall, HealthIsNotServingWhileASyncHangs) {
  HoldingDaemon held(Watched);
  auto& fs = held.fs;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::SERVING));

  fs->HoldSyncs(true);
  std::atomic<bool> set_done{false};
  std::thread setter([&] {
    EXPECT_TRUE(Set(d.stub(), "", "held", 3'600'000).ok());
    set_done = true;
  });
  const bool sync_held = Eventually([&] { return fs->held_syncs() > 0; });
  const bool not_serving =
      sync_held && WaitForHealth(d.channel(), HealthCheckResponse::NOT_SERVING);
  const bool answered_early = set_done;
  fs->HoldSyncs(false);
  setter.join();
  ASSERT_TRUE(sync_held) << "no sync reached the disk";
  EXPECT_TRUE(not_serving) << "a sync held past the limit left health SERVING";
  EXPECT_FALSE(answered_early) << "acknowledged before its sync";
  EXPECT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::SERVING));
}

// A payload read that hangs: the event it reads waits, health says so, and
// both recover when the read is let through.
TEST(StoreStall, HealthIsNotServingWhileAPayloadReadHangs) {
  GatedDaemon gated(/*cached_reads=*/false, Watched);
  ReadGate& gate = gated.gate;
  TestDaemon& d = gated.daemon;
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::SERVING));
  TestStream worker(d.stub(), TestStream::Worker("default", 10));
  ASSERT_TRUE(worker.WaitRegistered());
  gate.Hold();
  ASSERT_TRUE(Set(d.stub(), "", "due", 0, "its payload").ok());
  ASSERT_TRUE(Eventually([&] { return gate.waiting() > 0; }));
  EXPECT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::NOT_SERVING))
      << "a payload read held past the limit left health SERVING";
  EXPECT_TRUE(worker.Events().empty());

  gate.Release();
  const auto got = worker.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload(), "its payload");
  EXPECT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::SERVING));
}

}  // namespace
}  // namespace delayd::testing
