// End-to-end: the real delayd binary, driven over gRPC on loopback.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "delayd/v1/delayd.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/common/daemon_process.h"
#include "tests/common/postgres_server.h"
#include "tests/common/temp_dir.h"
#include "tests/common/thread_names.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

std::unique_ptr<v1::Delayd::Stub> Connect(const DaemonProcess& d) {
  return v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
}

// The store a daemon of these tests runs on: a RocksDB directory, or a
// database of a PostgreSQL server the test starts.
class DelaydOnStore : public ::testing::TestWithParam<bool> {
 protected:
  std::vector<std::string> StoreArgs() {
    if (!GetParam()) return {"--data-dir", dir_ / "data"};
    if (!pg_) {
      std::string error;
      pg_ = PostgresServer::Start(&error);
      EXPECT_NE(pg_, nullptr) << error;
      if (!pg_) return {};
      url_ = pg_->Url(pg_->NewDatabase());
    }
    return {"--store", url_, "--node-id", "e2e"};
  }

 private:
  TempDir dir_;
  std::unique_ptr<PostgresServer> pg_;
  std::string url_;
};

TEST_P(DelaydOnStore, ServesAndStopsCleanlyOnSigtermAndKeepsItsTimers) {
  DaemonProcess d(DELAYD_BINARY, StoreArgs());
  ASSERT_TRUE(d.ok()) << d.output();
  auto channel =
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckResponse h;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    ASSERT_TRUE(
        health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &h).ok());
  }
  EXPECT_EQ(h.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  auto stub = v1::Delayd::NewStub(channel);
  TestStream watcher(*stub, TestStream::Watcher("default"));
  ASSERT_TRUE(watcher.WaitRegistered());
  v1::SetTimerRequest req;
  req.set_key("k");
  *req.mutable_delay() = Millis(0);
  v1::SetTimerResponse resp;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->SetTimer(&ctx, req, &resp).ok());
  }
  ASSERT_EQ(watcher.WaitFor(1).size(), 1u);
  req.set_key("later");
  *req.mutable_delay() = Millis(3'600'000);
  v1::SetTimerResponse later;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->SetTimer(&ctx, req, &later).ok());
  }

  const auto start = std::chrono::steady_clock::now();
  const auto code = d.Stop(SIGTERM, 10s);
  ASSERT_TRUE(code.has_value()) << "did not exit within 10 s";
  EXPECT_EQ(*code, 0) << d.output();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 7s);
  EXPECT_EQ(watcher.WaitDone().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(d.output().find("delayd stopped"), std::string::npos);

  // Started again on the same store: the pending timer is there.
  DaemonProcess again(DELAYD_BINARY, StoreArgs());
  ASSERT_TRUE(again.ok()) << again.output();
  auto again_stub = Connect(again);
  v1::GetTimerRequest get;
  get.set_key("later");
  v1::Timer t;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  ASSERT_TRUE(again_stub->GetTimer(&ctx, get, &t).ok());
  EXPECT_EQ(t.version(), later.version());
}

INSTANTIATE_TEST_SUITE_P(Stores, DelaydOnStore, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "PostgreSQL" : "RocksDB";
                         });

TEST(DelaydBinary, FlagsComeFromEnvironment) {
  setenv("DELAYD_MAX_KEY_BYTES", "4", 1);
  setenv("DELAYD_IN_MEMORY", "true", 1);
  DaemonProcess d(DELAYD_BINARY, {});
  unsetenv("DELAYD_IN_MEMORY");
  unsetenv("DELAYD_MAX_KEY_BYTES");
  ASSERT_TRUE(d.ok()) << d.output();
  auto stub = Connect(d);
  auto set = [&](const std::string& key) {
    v1::SetTimerRequest req;
    req.set_key(key);
    *req.mutable_delay() = Millis(60000);
    v1::SetTimerResponse resp;
    grpc::ClientContext ctx;
    return stub->SetTimer(&ctx, req, &resp);
  };
  EXPECT_TRUE(set("abcd").ok());
  EXPECT_EQ(set("abcde").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(d.Stop(SIGINT, 10s), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s)
      << "an idle client connection held up the stop";
}

// Starts the daemon with `args`, which it must refuse saying `says`; its
// exit code (none if it did not exit).
std::optional<int> Refused(const std::vector<std::string>& args,
                           const std::string& says) {
  DaemonProcess d(DELAYD_BINARY, args, 5s);
  EXPECT_FALSE(d.ok());
  const std::optional<int> code = d.Stop(0, 5s);
  EXPECT_NE(d.output().find(says), std::string::npos) << d.output();
  return code;
}

TEST(DelaydBinary, BadFlagIsAUsageError) {
  EXPECT_EQ(Refused({"--tick", "soon"}, "--tick"), 1);
}

// A backlog that piles up while a worker's stream is stalled reaches it in
// messages a client with gRPC's default receive limit (4 MiB) accepts.
TEST(DelaydBinary, BacklogReachesADefaultClientInMessagesItAccepts) {
  DaemonProcess d(DELAYD_BINARY, {"--in-memory"});
  ASSERT_TRUE(d.ok()) << d.output();
  auto stub = Connect(d);
  v1::SubscribeRequest sub;
  sub.set_mode(v1::SubscribeRequest::WORKER);
  sub.set_max_in_flight(1000);
  *sub.mutable_ack_timeout() = Millis(60000);
  grpc::ClientContext sub_ctx;
  sub_ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  auto reader = stub->Subscribe(&sub_ctx, sub);
  v1::SubscribeResponse msg;
  ASSERT_TRUE(reader->Read(&msg));  // Registered.
  // 200 events of 64 KiB (13 MB), all handed to the stream before the
  // worker reads any: the first write waits on flow control, the rest queue.
  constexpr int kEvents = 200;
  const std::string payload(64 * 1024, 'p');
  for (int i = 0; i < kEvents; ++i) {
    v1::SetTimerRequest req;
    req.set_key("k" + std::to_string(i));
    req.set_payload(payload);
    *req.mutable_delay() = Millis(0);
    v1::SetTimerResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->SetTimer(&ctx, req, &resp).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {  // Polls Stats until every event is delivered, or the deadline.
    v1::StatsResponse stats;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Stats(&ctx, v1::StatsRequest(), &stats).ok());
    if (stats.in_flight_events() == kEvents) break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << stats.in_flight_events() << " of " << kEvents << " delivered";
    std::this_thread::sleep_for(10ms);
  }
  int received = 0;
  while (received < kEvents && reader->Read(&msg)) {
    EXPECT_LE(msg.ByteSizeLong(), 4u << 20);
    received += msg.events_size();
  }
  EXPECT_EQ(received, kEvents);
  sub_ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// A backup taken under write load holds every timer acknowledged before it
// began, and a daemon started on the copy serves them.
TEST(DelaydBinary, BackupUnderWriteLoadHoldsEverythingAcknowledgedBefore) {
  TempDir dir;
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir / "data", "--backup-dir",
                                  dir / "backups"});
  ASSERT_TRUE(d.ok()) << d.output();
  std::mutex mu;
  std::vector<std::string> acknowledged;  // In the order answered.
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      auto stub = Connect(d);
      for (int i = 0; !stop; ++i) {
        v1::SetTimerRequest req;
        req.set_key("w" + std::to_string(t) + "-" + std::to_string(i));
        req.set_payload("payload");
        *req.mutable_delay() = Millis(3'600'000);
        v1::SetTimerResponse resp;
        grpc::ClientContext ctx;
        if (!stub->SetTimer(&ctx, req, &resp).ok()) return;
        std::lock_guard lock(mu);
        acknowledged.push_back(req.key());
      }
    });
  }
  auto count = [&] {
    std::lock_guard lock(mu);
    return acknowledged.size();
  };
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (count() < 500 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);  // Polls the count above.
  }
  std::vector<std::string> before;
  {
    std::lock_guard lock(mu);
    before = acknowledged;
  }
  auto stub = Connect(d);
  auto backup = [&](const std::string& to, v1::BackupResponse* resp) {
    v1::BackupRequest req;
    req.set_dir(to);
    grpc::ClientContext ctx;
    return stub->Backup(&ctx, req, resp);
  };
  v1::BackupResponse copy;
  const grpc::Status s = backup("nightly/1", &copy);
  stop = true;
  for (auto& w : writers) w.join();
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_GE(before.size(), 500u);
  EXPECT_EQ(copy.dir(),
            std::filesystem::weakly_canonical(dir / "backups/nightly/1"));
  v1::BackupResponse unused;
  EXPECT_EQ(backup("nightly/1", &unused).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(backup("../outside", &unused).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(backup(dir / "elsewhere", &unused).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(d.Stop(SIGTERM, 10s), 0) << d.output();

  DaemonProcess restored(DELAYD_BINARY, {"--data-dir", copy.dir()});
  ASSERT_TRUE(restored.ok()) << restored.output();
  auto restored_stub = Connect(restored);
  int missing = 0;
  for (const auto& key : before) {
    v1::GetTimerRequest req;
    req.set_key(key);
    v1::Timer t;
    grpc::ClientContext ctx;
    if (!restored_stub->GetTimer(&ctx, req, &t).ok() ||
        t.payload() != "payload") {
      ++missing;
    }
  }
  EXPECT_EQ(missing, 0) << "of " << before.size();
}

// Without --backup-dir, or without a store, Backup is refused.
TEST(DelaydBinary, BackupNeedsABackupDirAndAStore) {
  DaemonProcess d(DELAYD_BINARY, {"--in-memory"});
  ASSERT_TRUE(d.ok()) << d.output();
  v1::BackupRequest req;
  req.set_dir("x");
  v1::BackupResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status s = Connect(d)->Backup(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("--backup-dir"), std::string::npos);
}

// --fixed-event-ids: each event's id is its timer's version, in a store
// that keeps that from its first start; the flag needs the RocksDB store.
TEST(DelaydBinary, FixedEventIdsGiveEachEventItsTimersVersion) {
  TempDir dir;
  const std::vector<std::string> args = {"--data-dir", dir.path() + "/data",
                                         "--fixed-event-ids"};
  DaemonProcess d(DELAYD_BINARY, args);
  ASSERT_TRUE(d.ok()) << d.output();
  auto stub = Connect(d);
  TestStream watcher(*stub, TestStream::Watcher("default"));
  ASSERT_TRUE(watcher.WaitRegistered());
  std::map<std::string, std::uint64_t> versions;
  // Each key set twice, due the second time: its version is then ahead of
  // any counter an event id could come from.
  for (const std::string key : {"a", "b", "c", "a", "b", "c"}) {
    v1::SetTimerRequest req;
    req.set_key(key);
    *req.mutable_delay() = Millis(versions.count(key) ? 0 : 3'600'000);
    v1::SetTimerResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->SetTimer(&ctx, req, &resp).ok());
    versions[key] = resp.version();
  }
  const auto events = watcher.WaitFor(3);
  ASSERT_EQ(events.size(), 3u);
  for (const auto& e : events) {
    EXPECT_EQ(e.id(), versions[e.key()]) << e.key();
    EXPECT_EQ(e.version(), versions[e.key()]) << e.key();
  }
  EXPECT_EQ(d.Stop(SIGTERM, 10s), 0);

  EXPECT_NE(Refused({"--in-memory", "--fixed-event-ids"},
                    "--fixed-event-ids: only the RocksDB store"),
            0);
}

// --fsync-gather is a setting of the RocksDB store's syncs under --fsync
// always: refused elsewhere, and out of its range.
TEST(Daemon, FsyncGatherOnlyWhereSyncsAreGathered) {
  TempDir dir;
  const std::vector<std::vector<std::string>> refused = {
      {"--in-memory", "--fsync-gather", "300us"},
      {"--data-dir", dir / "a", "--fsync", "1s", "--fsync-gather", "1ms"}};
  for (const auto& args : refused) {
    EXPECT_NE(Refused(args, "--fsync-gather: only the RocksDB store"), 0);
  }
  EXPECT_EQ(Refused({"--data-dir", dir / "b", "--fsync-gather", "20ms"},
                    "--fsync-gather: not 0s or a duration from"),
            1);
  DaemonProcess d(DELAYD_BINARY,
                  {"--data-dir", dir / "c", "--fsync-gather", "300us"});
  ASSERT_TRUE(d.ok()) << d.output();
  auto stub = Connect(d);
  v1::SetTimerRequest req;
  req.set_key("k");
  *req.mutable_delay() = Millis(60'000);
  v1::SetTimerResponse resp;
  grpc::ClientContext ctx;
  EXPECT_TRUE(stub->SetTimer(&ctx, req, &resp).ok());
  EXPECT_EQ(d.Stop(SIGTERM, 10s), 0);
}

// --loop-queues is a setting of the loop: refused without it.
TEST(Daemon, LoopQueuesNeedTheLoop) {
  EXPECT_NE(Refused({"--in-memory", "--loop-queues", "2"},
                    "--loop-queues: needs --threading loop"),
            0);
}

// An idle durable daemon's periodic checks (the store watch, the clock's
// net, the redelivery report) wake its clock thread every 2.5 s at the
// default settings: the kernel reports the clock's steps and resumes, so
// the clock is not polled each second, nor is an idle store watched so.
TEST(DelaydBinary, AnIdleDaemonsChecksWakeItsClockThreadEveryFewSeconds) {
  TempDir dir;
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir / "data"});
  ASSERT_TRUE(d.ok()) << d.output();
  v1::SetTimerRequest req;
  req.set_key("later");
  *req.mutable_delay() = Millis(3'600'000);
  v1::SetTimerResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(Connect(d)->SetTimer(&ctx, req, &resp).ok());
  const std::string pid = std::to_string(d.pid());
  // (Between two ticks: 0.7 s without one comes within 2.5 s.)
  const long before = WaitUntilAsleep("delayd-clock", 700ms, 20s, pid);
  ASSERT_GE(before, 0) << "no delayd-clock thread, or it kept waking";
  // What is measured is time passing with nothing to do.
  std::this_thread::sleep_for(5s);
  const long checks = WakeUpsOf("delayd-clock", pid) - before;
  // Two ticks of 2.5 s, and a spare; once a second would be five.
  EXPECT_LE(checks, 3) << "the checks woke " << checks << " times in 5 s";
  EXPECT_GE(checks, 1) << "the store watch stopped";
  EXPECT_EQ(d.Stop(SIGTERM, 10s), 0) << d.output();
}

// An idle loop waits on its queue a minute at a time (a net: whatever
// needs it wakes it), not once a second.
TEST(DelaydBinary, AnIdleLoopSleeps) {
  DaemonProcess d(DELAYD_BINARY, {"--in-memory", "--threading", "loop"});
  ASSERT_TRUE(d.ok()) << d.output();
  const std::string pid = std::to_string(d.pid());
  const long before = WaitUntilAsleep("delayd-loop", 700ms, 20s, pid);
  ASSERT_GE(before, 0) << "no delayd-loop thread, or it kept waking";
  std::this_thread::sleep_for(3s);  // (Time passing is what is measured.)
  EXPECT_LE(WakeUpsOf("delayd-loop", pid) - before, 1)
      << "the loop woke with nothing to do";
  EXPECT_EQ(d.Stop(SIGTERM, 10s), 0) << d.output();
}

}  // namespace
}  // namespace delayd::testing
