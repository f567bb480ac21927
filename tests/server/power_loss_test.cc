// Power loss, simulated: an in-process daemon over a store whose file system
// (tests/common/power_loss_fs.h) drops everything not synced at the moment
// of the "crash"; a second daemon then starts on what is left.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "tests/common/power_loss_fs.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

DelaydServer::Options OnFs(const std::string& dir, const std::string& fsync,
                           rocksdb::Env* env) {
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  RocksOptions store;
  store.dir = dir;
  EXPECT_TRUE(ParseFsyncPolicy(fsync, &store).ok());
  store.env = env;
  o.scheduler.store = RocksStoreOpener(store);
  return o;
}

// Sets `n` timers "<prefix><i>" firing after `delay_ms`; returns the
// versions of those acknowledged.
std::vector<std::uint64_t> SetTimers(v1::Delayd::Stub& stub,
                                     const std::string& prefix, int n,
                                     std::int64_t delay_ms) {
  std::vector<std::uint64_t> versions;
  for (int i = 0; i < n; ++i) {
    v1::SetTimerRequest req;
    req.set_key(prefix + std::to_string(i));
    req.set_payload("p");
    *req.mutable_delay() = Millis(delay_ms);
    v1::SetTimerResponse resp;
    grpc::ClientContext ctx;
    if (stub.SetTimer(&ctx, req, &resp).ok())
      versions.push_back(resp.version());
  }
  return versions;
}

std::uint64_t PendingTimers(v1::Delayd::Stub& stub) {
  v1::StatsResponse stats;
  grpc::ClientContext ctx;
  EXPECT_TRUE(stub.Stats(&ctx, v1::StatsRequest(), &stats).ok());
  return stats.pending_timers();
}

class PowerLoss : public ::testing::TestWithParam<std::string> {};

// The scenario ids must survive: timers fire, a worker processes and acks
// the events, power fails before the firing is synced. After the restart no
// version or event id may come back for something else, or the worker's
// retried Ack would retire a different timer's event, unprocessed.
TEST_P(PowerLoss, VersionsAndEventIdsNeverRepeat) {
  TempDir dir;
  std::unique_ptr<rocksdb::Env> env;
  auto fs = PowerLossFs::Make(&env);
  std::set<std::uint64_t> versions_before;
  // Event id -> the (key, version) it was for.
  std::map<std::uint64_t, std::pair<std::string, std::uint64_t>> ids_before;
  {
    TestDaemon d(OnFs(dir / "data", GetParam(), env.get()));
    TestStream worker(d.stub(), TestStream::Worker("default"));
    ASSERT_TRUE(worker.WaitRegistered());
    for (auto v : SetTimers(d.stub(), "a", 40, 0)) versions_before.insert(v);
    ASSERT_EQ(versions_before.size(), 40u);
    const auto events = worker.WaitFor(40);
    ASSERT_EQ(events.size(), 40u);
    v1::AckRequest ack;
    for (const auto& e : events) {
      ids_before[e.id()] = {e.key(), e.version()};
      ack.add_event_ids(e.id());
    }
    v1::AckResponse acked;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Ack(&ctx, ack, &acked).ok());
    EXPECT_EQ(acked.acked(), 40u);
    fs->Crash();
  }
  fs->Revive();
  TestDaemon d(OnFs(dir / "data", GetParam(), env.get()));
  TestStream worker(d.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(worker.WaitRegistered());
  const auto versions_after = SetTimers(d.stub(), "b", 40, 0);
  EXPECT_EQ(versions_after.size(), 40u);
  for (auto v : versions_after) {
    EXPECT_FALSE(versions_before.count(v)) << "version " << v << " repeated";
  }
  // The 40 new events, and whatever of the first 40 the power loss undid:
  // a timer left pending fires again (a new event), an event whose ack was
  // lost is delivered again (the same event, with its id).
  v1::StatsResponse stats;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  // (A timer between firing and its event is in neither figure for a
  // moment: every "b" event must have come, too.)
  const auto b_events = [&] {
    std::set<std::string> keys;
    for (const auto& e : worker.Events()) {
      if (e.key()[0] == 'b') keys.insert(e.key());
    }
    return keys.size();
  };
  for (;;) {  // Polls until nothing waits for the worker.
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Stats(&ctx, v1::StatsRequest(), &stats).ok());
    if (stats.pending_timers() == 0 && stats.ready_events() == 0 &&
        worker.Events().size() == stats.in_flight_events() &&
        b_events() == 40) {
      break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::sleep_for(10ms);
  }
  std::map<std::uint64_t, std::pair<std::string, std::uint64_t>> ids_after;
  for (const auto& e : worker.Events()) {
    ids_after[e.id()] = {e.key(), e.version()};
    auto it = ids_before.find(e.id());
    if (it != ids_before.end()) {
      EXPECT_EQ(it->second, std::make_pair(e.key(), e.version()))
          << "event id " << e.id() << " came back for another timer";
    }
    EXPECT_FALSE(versions_before.count(e.version()) && e.key()[0] == 'b');
  }
  EXPECT_GE(ids_after.size(), 40u);
  // The worker's retried Ack of the old ids retires only the same events.
  v1::AckRequest ack;
  for (const auto& [id, what] : ids_before) ack.add_event_ids(id);
  v1::AckResponse acked;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d.stub().Ack(&ctx, ack, &acked).ok());
  const std::set<std::uint64_t> unknown(acked.unknown_ids().begin(),
                                        acked.unknown_ids().end());
  for (const auto& [id, what] : ids_before) {
    if (unknown.count(id)) continue;
    EXPECT_EQ(ids_after.count(id), 1u) << "ack " << id << " retired an event "
                                       << "the worker never got";
    if (ids_after.count(id)) {
      EXPECT_EQ(ids_after[id], what);
    }
  }
}

// With --fsync always, an OK answer means synced: a power loss right after
// loses none of them. Under never, the same loss takes what was not synced
// (which shows the simulation bites).
TEST_P(PowerLoss, AcknowledgedTimersSurviveUnderAlways) {
  TempDir dir;
  std::unique_ptr<rocksdb::Env> env;
  auto fs = PowerLossFs::Make(&env);
  std::size_t acknowledged = 0;
  {
    TestDaemon d(OnFs(dir / "data", GetParam(), env.get()));
    acknowledged = SetTimers(d.stub(), "k", 200, 3600'000).size();
    ASSERT_EQ(acknowledged, 200u);
    fs->Crash();
  }
  fs->Revive();
  TestDaemon d(OnFs(dir / "data", GetParam(), env.get()));
  const std::uint64_t pending = PendingTimers(d.stub());
  if (GetParam() == "always") {
    EXPECT_EQ(pending, acknowledged);
  } else if (GetParam() == "never") {
    EXPECT_LT(pending, acknowledged) << "the power loss lost nothing";
  }
}

// Keeps setting timers "<prefix><i>" (an hour away) from its own thread
// until stopped, recording each acknowledged one with what `at_ack` says at
// that moment, unless `crashing` was already set.
class Writer {
 public:
  Writer(
      v1::Delayd::Stub& stub, std::string prefix,
      std::function<std::uint64_t()> at_ack = [] { return 0; })
      : thread_([this, &stub, prefix = std::move(prefix),
                 at_ack = std::move(at_ack)] {
          for (int i = 0; !stop_; ++i) {
            v1::SetTimerRequest req;
            req.set_key(prefix + std::to_string(i));
            req.set_payload("p");
            *req.mutable_delay() = Millis(3600'000);
            v1::SetTimerResponse resp;
            grpc::ClientContext ctx;
            const bool ok = stub.SetTimer(&ctx, req, &resp).ok();
            const std::uint64_t seen = at_ack();
            if (ok && !crashing) {
              std::lock_guard lock(mu_);
              acked_[req.key()] = seen;
            }
          }
        }) {}
  ~Writer() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Acknowledged before the crash: key -> what at_ack said.
  std::map<std::string, std::uint64_t> acked() {
    std::lock_guard lock(mu_);
    return acked_;
  }
  std::atomic<bool> crashing{false};

 private:
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, std::uint64_t> acked_;
  std::thread thread_;
};

bool Pending(v1::Delayd::Stub& stub, const std::string& key) {
  v1::GetTimerRequest req;
  req.set_key(key);
  v1::Timer t;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  return stub.GetTimer(&ctx, req, &t).ok();
}

// Power fails in the middle of writes, and tears them: the last record of
// the log is left half written. delayd starts again (its mark never claims
// more than was synced), and under always has every acknowledged timer.
TEST_P(PowerLoss, TornWritesLoseNothingDurable) {
  TempDir dir;
  std::unique_ptr<rocksdb::Env> env;
  auto fs = PowerLossFs::Make(&env);
  std::map<std::string, std::uint64_t> acked;
  PowerLossFs::Loss loss;
  {
    TestDaemon d(OnFs(dir / "data", GetParam(), env.get()));
    Writer writer(d.stub(), "k");
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (writer.acked().size() < 300) {  // Polls the writer's progress.
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(5ms);
    }
    writer.crashing = true;
    loss = fs->Crash(/*tear=*/true);
    writer.Stop();
    acked = writer.acked();
  }
  fs->Revive();
  if (GetParam() == "never") {
    EXPECT_GT(loss.torn, 0) << "nothing was torn";
  }
  TestDaemon d(OnFs(dir / "data", GetParam(), env.get()));
  ASSERT_TRUE(d.started()) << "refused after a power loss";
  std::size_t present = 0;
  for (const auto& [key, unused] : acked) {
    const bool found = Pending(d.stub(), key);
    if (GetParam() == "always") {
      EXPECT_TRUE(found) << key;
    }
    present += found ? 1 : 0;
  }
  if (GetParam() == "never") {
    EXPECT_LT(present, acked.size());
  }
}

// Under an interval, a power loss takes at most the writes the last
// interval's sync had not reached: every timer acknowledged before the
// second-to-last sync is back.
TEST(PowerLossInterval, LosesAtMostTheLastWindow) {
  TempDir dir;
  std::unique_ptr<rocksdb::Env> env;
  auto fs = PowerLossFs::Make(&env);
  std::map<std::string, std::uint64_t> acked;  // Key -> syncs at its ack.
  std::uint64_t syncs_at_crash = 0;
  {
    TestDaemon d(OnFs(dir / "data", "20ms", env.get()));
    // (Syncs of the write-ahead log only: the mark's and other files'
    // syncs come between them, so a count of all syncs says nothing of
    // which log sync a write came before.)
    const std::uint64_t syncs_at_start = fs->log_syncs();
    Writer writer(d.stub(), "k", [&] { return fs->log_syncs(); });
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    // Polls until several intervals have passed under writes.
    while (fs->log_syncs() < syncs_at_start + 8 ||
           writer.acked().size() < 100) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline)
          << "the interval policy does not sync";
      std::this_thread::sleep_for(5ms);
    }
    // The disk stops answering syncs, and a few more writes are
    // acknowledged (the interval does not wait for them): the crash must
    // then take something, or the simulation does not bite.
    fs->HoldSyncs(true);
    // Released however this scope ends (the daemon's close syncs).
    const std::unique_ptr<PowerLossFs, void (*)(PowerLossFs*)> release(
        fs.get(), [](PowerLossFs* f) { f->HoldSyncs(false); });
    while (fs->held_syncs() == 0) {  // Polls until the syncer waits.
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(5ms);
    }
    const std::size_t acked_when_held = writer.acked().size();
    while (writer.acked().size() < acked_when_held + 5) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(5ms);
    }
    writer.crashing = true;
    syncs_at_crash = fs->log_syncs();
    EXPECT_GT(fs->Crash().bytes, 0u);
    writer.Stop();
    acked = writer.acked();
  }
  fs->Revive();
  TestDaemon d(OnFs(dir / "data", "20ms", env.get()));
  ASSERT_TRUE(d.started());
  // A write acknowledged at log sync count k may have just missed log sync
  // k + 1, which started before it; log sync k + 2 started after (the
  // syncer's syncs follow one another), and covers it.
  std::size_t covered = 0;
  for (const auto& [key, syncs] : acked) {
    if (syncs + 2 > syncs_at_crash) continue;
    ++covered;
    EXPECT_TRUE(Pending(d.stub(), key))
        << key << " acked at sync " << syncs << ", crash at " << syncs_at_crash;
  }
  EXPECT_GT(covered, 0u);
}

// A disk that stops answering syncs holds back only the acknowledgements of
// writes waiting for one: reads still answer meanwhile, and the writes
// complete once it answers again.
TEST(StalledDisk, ReadsAnswerWhileASyncHangs) {
  TempDir dir;
  std::unique_ptr<rocksdb::Env> env;
  auto fs = PowerLossFs::Make(&env);
  TestDaemon d(OnFs(dir / "data", "always", env.get()));
  ASSERT_EQ(SetTimers(d.stub(), "a", 1, 3600'000).size(), 1u);
  fs->HoldSyncs(true);
  std::atomic<bool> set_done{false};
  std::thread setter([&] {
    EXPECT_EQ(SetTimers(d.stub(), "b", 1, 3600'000).size(), 1u);
    set_done = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (fs->held_syncs() == 0) {  // Polls until the write waits on it.
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "no sync reached the disk";
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(Pending(d.stub(), "a0"));
  EXPECT_FALSE(set_done) << "acknowledged before its sync";
  fs->HoldSyncs(false);
  setter.join();
  EXPECT_TRUE(set_done);
}

// A full disk: a write fails with a clear error, health goes NOT_SERVING,
// and later writes are refused (UNAVAILABLE) without touching the disk. The
// daemon (its main) stops; started again once the disk can write, it has
// every timer acknowledged before, and takes writes.
TEST(FailingDisk, FullDiskFailsWritesClearlyAndLosesNothing) {
  using grpc::health::v1::HealthCheckResponse;
  TempDir dir;
  std::unique_ptr<rocksdb::Env> env;
  auto fs = PowerLossFs::Make(&env);
  {
    DelaydServer::Options options = OnFs(dir / "data", "always", env.get());
    std::atomic<int> reported{0};
    options.scheduler.on_store_write_failure = [&](const Status&) {
      ++reported;
    };
    TestDaemon d(options);
    ASSERT_EQ(SetTimers(d.stub(), "before", 20, 3600'000).size(), 20u);
    ASSERT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::SERVING));

    fs->FailWrites(rocksdb::IOStatus::NoSpace("disk full (injected)"));
    auto set = [&](const std::string& key) {
      v1::SetTimerRequest req;
      req.set_key(key);
      *req.mutable_delay() = Millis(3600'000);
      v1::SetTimerResponse resp;
      grpc::ClientContext ctx;
      return d.stub().SetTimer(&ctx, req, &resp);
    };
    const grpc::Status first = set("during-1");
    EXPECT_EQ(first.error_code(), grpc::StatusCode::INTERNAL);
    EXPECT_NE(first.error_message().find("disk full"), std::string::npos)
        << first.error_message();
    EXPECT_EQ(reported.load(), 1);
    EXPECT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::NOT_SERVING));
    EXPECT_EQ(Health(d.channel(), kStoreHealthService),
              HealthCheckResponse::NOT_SERVING);
    EXPECT_GT(d.server().scheduler().counters().store_errors.load(), 0u);
    // Refused at once, even with the disk back: RocksDB must be reopened.
    fs->FailWrites(std::nullopt);
    const grpc::Status later = set("during-2");
    EXPECT_EQ(later.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(later.error_message().find("until delayd restarts"),
              std::string::npos)
        << later.error_message();
    EXPECT_EQ(reported.load(), 1);
  }
  TestDaemon d(OnFs(dir / "data", "always", env.get()));
  EXPECT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::SERVING));
  EXPECT_EQ(Health(d.channel(), kStoreHealthService),
            HealthCheckResponse::SERVING);
  for (int i = 0; i < 20; ++i) {
    v1::GetTimerRequest req;
    req.set_key("before" + std::to_string(i));
    v1::Timer t;
    grpc::ClientContext ctx;
    EXPECT_TRUE(d.stub().GetTimer(&ctx, req, &t).ok()) << req.key();
  }
  EXPECT_EQ(SetTimers(d.stub(), "after", 20, 3600'000).size(), 20u);
}

INSTANTIATE_TEST_SUITE_P(Fsync, PowerLoss,
                         ::testing::Values("always", "100ms", "never"));

}  // namespace
}  // namespace delayd::testing
