// Durability through restarts: an in-process daemon over a store (RocksDB
// in a temporary directory, or a PostgreSQL database), stopped and started
// again on the same store.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "server/store/rocksdb/rocks_store.h"
#include "tests/common/fake_clock.h"
#include "tests/common/temp_dir.h"
#include "tests/common/thread_names.h"
#include "tests/server/calls.h"
#include "tests/server/test_stores.h"

namespace delayd::testing {
namespace {

RocksOptions At(const std::string& dir) {
  RocksOptions o;
  o.dir = dir;
  return o;
}

DelaydServer::Options DurableOptions(const TestStore& store,
                                     std::uint32_t partitions = 2) {
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  o.scheduler.partitions = partitions;
  return store.On(o);
}

// A store and (for RocksDB) its fsync policy.
struct StoreKind {
  Backend backend;
  std::string fsync;
};

class Restart : public ::testing::TestWithParam<StoreKind> {};

TEST_P(Restart, KeepsPendingTimersAndUnacknowledgedEvents) {
  TestStore store(GetParam().backend, GetParam().fsync);
  const std::string big(4096, 'x');
  std::map<std::string, v1::Timer> before;
  v1::Event unacked;
  std::uint64_t max_version = 0;
  std::uint64_t max_event_id = 0;
  {
    TestDaemon d(DurableOptions(store));
    auto& stub = d.stub();
    ASSERT_TRUE(Set(stub, "a", "near", 60'000, "p-near").ok());
    ASSERT_TRUE(Set(stub, "a", "big", 3'600'000, big).ok());
    ASSERT_TRUE(Set(stub, "b", "far", 365LL * 24 * 3'600'000, "p-far").ok());
    // Moved and replaced timers keep their latest version and payload.
    v1::MoveTimerRequest move;
    move.set_namespace_("b");
    move.set_key("far");
    *move.mutable_delay() = Millis(2 * 3'600'000);
    v1::MoveTimerResponse moved;
    grpc::ClientContext move_ctx;
    ASSERT_TRUE(stub.MoveTimer(&move_ctx, move, &moved).ok());
    ASSERT_TRUE(Set(stub, "a", "near", 90'000, "p-near-2").ok());
    ASSERT_TRUE(Set(stub, "a", "gone", 60'000, "p-gone").ok());
    v1::RemoveTimerRequest rm;
    rm.set_namespace_("a");
    rm.set_key("gone");
    v1::RemoveTimerResponse removed;
    grpc::ClientContext rm_ctx;
    ASSERT_TRUE(stub.RemoveTimer(&rm_ctx, rm, &removed).ok());

    // One event acknowledged, one not.
    TestStream wa(stub, TestStream::Worker("a"));
    TestStream wb(stub, TestStream::Worker("b"));
    ASSERT_TRUE(wa.WaitRegistered());
    ASSERT_TRUE(wb.WaitRegistered());
    ASSERT_TRUE(Set(stub, "a", "acked", 0, "p-acked").ok());
    ASSERT_TRUE(Set(stub, "b", "unacked", 0, "p-unacked").ok());
    auto got_a = wa.WaitFor(1);
    auto got_b = wb.WaitFor(1);
    ASSERT_EQ(got_a.size(), 1u);
    ASSERT_EQ(got_b.size(), 1u);
    ASSERT_TRUE(AckEvents(stub, "a", got_a).ok());
    unacked = got_b[0];
    EXPECT_EQ(unacked.payload(), "p-unacked");
    max_event_id = std::max(got_a[0].id(), got_b[0].id());

    for (auto [ns, key] :
         {std::pair{"a", "near"}, {"a", "big"}, {"b", "far"}}) {
      v1::Timer t;
      ASSERT_TRUE(Get(stub, ns, key, &t).ok()) << key;
      before[key] = t;
      max_version = std::max(max_version, t.version());
    }
    max_version = std::max({max_version, got_a[0].version(), got_b[0].version(),
                            removed.version()});
    d.Shutdown();
  }

  TestDaemon d(DurableOptions(store));
  auto& stub = d.stub();
  for (const auto& [key, t] : before) {
    v1::Timer now;
    ASSERT_TRUE(Get(stub, t.namespace_(), key, &now).ok()) << key;
    EXPECT_EQ(now.version(), t.version()) << key;
    EXPECT_EQ(ToNanos(now.fire_time()), ToNanos(t.fire_time())) << key;
    EXPECT_EQ(now.payload(), t.payload()) << key;
  }
  EXPECT_EQ(before["big"].payload(), big);
  EXPECT_EQ(before["near"].payload(), "p-near-2");
  v1::Timer none;
  EXPECT_EQ(Get(stub, "a", "gone", &none).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // Only the unacknowledged event is outstanding, and it comes again.
  auto stats = Stats(stub);
  EXPECT_TRUE(stats.durable());
  EXPECT_EQ(stats.pending_timers(), 3u);
  EXPECT_EQ(stats.ready_events(), 1u);
  TestStream wb(stub, TestStream::Worker("b"));
  auto again = wb.WaitFor(1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id(), unacked.id());
  EXPECT_EQ(again[0].key(), "unacked");
  EXPECT_EQ(again[0].payload(), "p-unacked");
  EXPECT_EQ(again[0].version(), unacked.version());
  EXPECT_EQ(ToNanos(again[0].fire_time()), ToNanos(unacked.fire_time()));
  EXPECT_EQ(ToNanos(again[0].fired_at()), ToNanos(unacked.fired_at()));
  ASSERT_TRUE(AckEvents(stub, "b", again).ok());
  // Versions and event ids continue past everything seen before.
  v1::SetTimerResponse set;
  TestStream wa(stub, TestStream::Worker("a"));
  ASSERT_TRUE(wa.WaitRegistered());
  ASSERT_TRUE(Set(stub, "a", "after", 0, "", &set).ok());
  EXPECT_GT(set.version(), max_version);
  auto fresh = wa.WaitFor(1);
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_GT(fresh[0].id(), max_event_id);
  EXPECT_EQ(fresh[0].key(), "after") << "the acked event came back";
}

INSTANTIATE_TEST_SUITE_P(
    Stores, Restart,
    ::testing::Values(StoreKind{Backend::kRocksDb, "always"},
                      StoreKind{Backend::kRocksDb, "20ms"},
                      StoreKind{Backend::kRocksDb, "never"},
                      StoreKind{Backend::kPostgres, ""}),
    [](const auto& info) {
      if (info.param.backend == Backend::kPostgres)
        return std::string("PostgreSQL");
      return "RocksDB_" + (info.param.fsync == "20ms" ? std::string("interval")
                                                      : info.param.fsync);
    });

class Recovery : public ::testing::TestWithParam<Backend> {};

TEST_P(Recovery, TimersThatCameDueWhileDownFireAtOnceInFireTimeOrder) {
  TestStore test_store(GetParam());
  const WallNanos now = WallNow();
  const WallNanos second = 1'000'000'000;
  {
    // What a daemon stopped a while ago left behind: three timers whose
    // fire times have passed, stored out of order, and one in the future.
    std::unique_ptr<Store> store;
    ASSERT_TRUE(test_store.Opener()(StoreHooks(), &store).ok());
    Batch b;
    b.PutNamespace(0, "default");
    const std::vector<std::pair<std::string, WallNanos>> timers = {
        {"k2", now - 2 * second},
        {"k3", now - 1 * second},
        {"k1", now - 3 * second},
        {"later", now + 3600 * second}};
    std::uint64_t version = 1;
    for (const auto& [key, at] : timers) {
      const std::uint64_t payload_id = version << 10;
      b.AddTimer(StoredTimer{0, key, at, version, payload_id},
                 "payload-" + key);
      ++version;
    }
    b.ReserveIds(0, version, 1);
    ASSERT_TRUE(store->WriteNow(b).ok());
    store->Close();
  }
  TestDaemon d(DurableOptions(test_store));
  EXPECT_EQ(d.server().recovery().timers, 4u);
  EXPECT_EQ(d.server().recovery().overdue, 3u);
  TestStream w(d.stub(), TestStream::Worker("default"));
  auto got = w.WaitFor(3);
  ASSERT_EQ(got.size(), 3u);
  const WallNanos expected[] = {now - 3 * second, now - 2 * second,
                                now - 1 * second};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got[i].key(), "k" + std::to_string(i + 1));
    EXPECT_EQ(got[i].payload(), "payload-k" + std::to_string(i + 1));
    // The true fire time, so consumers see how late they are.
    EXPECT_EQ(ToNanos(got[i].fire_time()), expected[i]);
    EXPECT_GE(ToNanos(got[i].fired_at()), now);
  }
  v1::Timer later;
  EXPECT_TRUE(Get(d.stub(), "default", "later", &later).ok());
}

TEST_P(Recovery, VersionsAndEventIdsGrowWhenThePartitionCountChanges) {
  TestStore store(GetParam());
  std::uint64_t max_version = 0;
  std::uint64_t max_event_id = 0;
  {
    TestDaemon d(DurableOptions(store, 8));
    TestStream w(d.stub(), TestStream::Worker("default"));
    ASSERT_TRUE(w.WaitRegistered());
    for (int i = 0; i < 64; ++i) {
      v1::SetTimerResponse r;
      ASSERT_TRUE(Set(d.stub(), "default", "k" + std::to_string(i),
                      i % 2 ? 0 : 60'000, "", &r)
                      .ok());
      max_version = std::max(max_version, r.version());
    }
    auto got = w.WaitFor(32);
    ASSERT_EQ(got.size(), 32u);
    for (const auto& e : got) max_event_id = std::max(max_event_id, e.id());
    ASSERT_TRUE(AckEvents(d.stub(), "default", got).ok());
    d.Shutdown();
  }
  TestDaemon d(DurableOptions(store, 3));
  EXPECT_EQ(Stats(d.stub()).pending_timers(), 32u);
  TestStream w(d.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(w.WaitRegistered());
  for (int i = 0; i < 64; ++i) {
    v1::SetTimerResponse r;
    ASSERT_TRUE(
        Set(d.stub(), "default", "k" + std::to_string(i), 0, "", &r).ok());
    EXPECT_GT(r.version(), max_version) << "k" << i;
  }
  auto got = w.WaitFor(64);
  ASSERT_EQ(got.size(), 64u);
  for (const auto& e : got) EXPECT_GT(e.id(), max_event_id);
}

TEST_P(Recovery, DrainedEventsWaitDurablyForAWorker) {
  TestStore store(GetParam());
  {
    TestDaemon d(DurableOptions(store));
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(Set(d.stub(), "q", "k" + std::to_string(i), 3'600'000,
                      "p" + std::to_string(i))
                      .ok());
    }
    v1::DrainRequest req;
    req.set_namespace_("q");
    v1::DrainResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Drain(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.drained(), 5u);
    d.Shutdown();
  }
  TestDaemon d(DurableOptions(store));
  EXPECT_EQ(d.server().recovery().events, 5u);
  EXPECT_EQ(d.server().recovery().timers, 0u);
  TestStream w(d.stub(), TestStream::Worker("q"));
  auto got = w.WaitFor(5);
  ASSERT_EQ(got.size(), 5u);
  for (const auto& e : got) {
    EXPECT_EQ(e.reason(), v1::REASON_DRAINED);
    EXPECT_EQ(e.payload(), "p" + e.key().substr(1));
  }
}

// A Nack's retry_after is a "not before" that a restart keeps: the event
// waits out what is left of it, then comes back as its next attempt (on a
// fake clock, so "not before" is checked at the instant, not by waiting).
TEST_P(Recovery, RetryWaitOfANackedEventHoldsAcrossARestart) {
  TestStore store(GetParam());
  FakeClock clock;
  auto options = [&] {
    DelaydServer::Options o = DurableOptions(store);
    o.scheduler.clock = &clock;
    o.scheduler.clock_poll = 0ms;
    return o;
  };
  std::uint64_t id = 0;
  {
    TestDaemon d(options());
    TestStream worker(d.stub(), TestStream::Worker("jobs"));
    ASSERT_TRUE(worker.WaitRegistered());
    ASSERT_TRUE(Set(d.stub(), "jobs", "job", 1, "p").ok());
    clock.Advance(1ms);
    const auto got = worker.WaitFor(1);
    ASSERT_EQ(got.size(), 1u);
    id = got[0].id();
    EXPECT_EQ(got[0].attempt(), 1u);
    v1::NackRequest req;
    req.set_namespace_("jobs");
    req.add_event_ids(id);
    *req.mutable_retry_after() = Millis(4000);
    v1::NackResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Nack(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.nacked(), 1u);
    d.Shutdown();
  }
  clock.Advance(800ms);  // The restart.
  TestDaemon d(options());
  TestStream worker(d.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(worker.WaitRegistered());
  clock.Advance(3199ms);  // 1 ms before the retry time.
  auto stats = Stats(d.stub());
  EXPECT_EQ(stats.retrying_events(), 1u);
  EXPECT_EQ(stats.in_flight_events(), 0u);
  clock.Advance(1ms);
  const auto got = worker.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id(), id);
  EXPECT_EQ(got[0].attempt(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Stores, Recovery, AllBackends(), BackendName);

TEST(Store, ASecondDaemonOnTheSameDirectoryIsRefused) {
  TempDir dir;
  std::unique_ptr<RocksStore> first;
  ASSERT_TRUE(RocksStore::Open(At(dir / "data"), StoreHooks(), &first).ok());
  std::unique_ptr<RocksStore> second;
  Status s = RocksStore::Open(At(dir / "data"), StoreHooks(), &second);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(dir / "data"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("another delayd"), std::string::npos)
      << s.message();
}

TEST(Store, ItsThreadsAreNamed) {
  TempDir dir;
  std::unique_ptr<RocksStore> store;
  ASSERT_TRUE(RocksStore::Open(At(dir / "data"), StoreHooks(), &store).ok());
  EXPECT_EQ(testing::ThreadsNamed("store-writer"), 1);
  EXPECT_EQ(testing::ThreadsNamed("store-syncer"), 1);
}

TEST(Store, FsyncPolicyParsing) {
  RocksOptions o;
  EXPECT_TRUE(ParseFsyncPolicy("always", &o).ok());
  EXPECT_EQ(o.fsync, FsyncPolicy::kAlways);
  EXPECT_TRUE(ParseFsyncPolicy("never", &o).ok());
  EXPECT_EQ(o.fsync, FsyncPolicy::kNever);
  EXPECT_TRUE(ParseFsyncPolicy("250ms", &o).ok());
  EXPECT_EQ(o.fsync, FsyncPolicy::kInterval);
  EXPECT_EQ(o.fsync_interval, std::chrono::milliseconds(250));
  EXPECT_FALSE(ParseFsyncPolicy("sometimes", &o).ok());
  EXPECT_FALSE(ParseFsyncPolicy("0s", &o).ok());
  EXPECT_FALSE(ParseFsyncPolicy("-1s", &o).ok());
}

}  // namespace
}  // namespace delayd::testing
