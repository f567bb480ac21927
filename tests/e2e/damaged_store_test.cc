// A damaged data directory: the real delayd refuses to start on it with a
// message naming the directory and the problem, except for a write cut off
// at the very end of the log (a crash mid-write, never made durable), where
// it recovers everything before it. Damage that leaves a valid but older
// store (a MANIFEST or a log cut short) is caught by the store's mark
// (server/store/store_mark.h).
#include "tests/e2e/damaged_store.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "delayd/v1/delayd.grpc.pb.h"
#include "tests/common/daemon_process.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

// Starts delayd on `dir` and expects it to refuse, naming `dir` and the
// damage (`what`).
void ExpectRefusal(const std::string& dir,
                   const std::string& what = "Corruption") {
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir}, std::chrono::seconds(10));
  EXPECT_FALSE(d.ok()) << "started on a damaged store:\n" << d.output();
  const auto code = d.Stop(0, std::chrono::seconds(10));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 2) << d.output();
  EXPECT_NE(d.output().find("cannot open the store in " + dir),
            std::string::npos)
      << d.output();
  EXPECT_NE(d.output().find(what), std::string::npos) << d.output();
  EXPECT_NE(d.output().find("will not start"), std::string::npos) << d.output();
}

// Runs `delayd check` on `dir`; returns its exit code (-1 if it did not
// exit) and its output in `out`.
int Check(const std::string& dir, std::string* out,
          const std::string& format = "text") {
  DaemonProcess d(DELAYD_BINARY, {"check", "--data-dir", dir, "-o", format},
                  std::chrono::seconds(10));
  const auto code = d.Stop(0, std::chrono::seconds(30));
  *out = d.output();
  return code ? *code : -1;
}

class DamagedStore : public DataDirs {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    Populate(*dir_ / "clean", SIGTERM, "always", false);
    // Killed once the mark covers the timers: what a log cut short loses
    // had been made durable.
    Populate(*dir_ / "log", SIGKILL, "always", true);
    // The same, over several 32 KiB blocks of the log: what follows damage
    // in one block can still be read in the next.
    Populate(*dir_ / "log-large", SIGKILL, "always", true, 2048);
    // Nothing but the start is synced: the last write may be torn.
    Populate(*dir_ / "unsynced", SIGKILL, "never", false);
  }
};

TEST_F(DamagedStore, TruncatedTableFileIsRefused) {
  const std::string dir = Copy("clean", "truncated-table");
  const auto tables = Files(dir, ".sst");
  ASSERT_FALSE(tables.empty());
  for (const auto& t : tables) fs::resize_file(t, fs::file_size(t) / 2);
  ExpectRefusal(dir);
}

TEST_F(DamagedStore, CorruptedTableFileIsRefused) {
  const std::string dir = Copy("clean", "corrupted-table");
  const auto tables = Files(dir, ".sst");
  ASSERT_FALSE(tables.empty());
  for (const auto& t : tables) Overwrite(t, fs::file_size(t) / 4);
  ExpectRefusal(dir);
}

TEST_F(DamagedStore, CorruptedManifestIsRefused) {
  const std::string dir = Copy("clean", "corrupted-manifest");
  const auto manifests = Files(dir, "MANIFEST");
  ASSERT_EQ(manifests.size(), 1u);
  Overwrite(manifests[0], fs::file_size(manifests[0]) / 2);
  ExpectRefusal(dir);
}

TEST_F(DamagedStore, CorruptionInsideTheLogIsRefused) {
  const std::string dir = Copy("log", "corrupted-log");
  const auto logs = Files(dir, ".log");
  ASSERT_FALSE(logs.empty());
  const auto& log = logs.back();
  ASSERT_GT(fs::file_size(log), 1000u);
  Overwrite(log, fs::file_size(log) / 2);
  ExpectRefusal(dir);
}

TEST_F(DamagedStore, SalvageKeepsWhatPrecedesDamageInsideTheLog) {
  const std::string dir = Copy("log-large", "salvaged-log");
  const auto logs = Files(dir, ".log");
  ASSERT_FALSE(logs.empty());
  Overwrite(logs.back(), fs::file_size(logs.back()) / 2);
  std::string damaged_log;
  {
    std::ifstream in(logs.back(), std::ios::binary);
    damaged_log.assign(std::istreambuf_iterator<char>(in), {});
  }
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir, "--salvage"});
  ASSERT_TRUE(d.ok()) << d.output();
  auto stub = v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
  // A prefix of the timers survives: k0 .. k(n-1), none after a missing one.
  int present = 0;
  bool gap = false;
  for (int i = 0; i < kTimers; ++i) {
    v1::GetTimerRequest req;
    req.set_key("k" + std::to_string(i));
    v1::Timer t;
    grpc::ClientContext ctx;
    const bool found = stub->GetTimer(&ctx, req, &t).ok();
    if (found && gap) ADD_FAILURE() << "k" << i << " survived after a gap";
    if (!found) gap = true;
    present += found ? 1 : 0;
  }
  EXPECT_GT(present, 0);
  EXPECT_LT(present, kTimers);
  EXPECT_EQ(d.Stop(SIGTERM, std::chrono::seconds(10)), 0) << d.output();
  // The log names what was dropped: the count of durable writes, and the
  // timers the log still holds past the damage, by key.
  EXPECT_NE(d.output().find("durable writes are missing"), std::string::npos)
      << d.output();
  EXPECT_NE(d.output().find("timer 'default'/'k"), std::string::npos)
      << d.output();
  EXPECT_EQ(d.output().find("holds 0 timers"), std::string::npos) << d.output();
  // The damaged directory was first copied aside, untouched, and the log
  // says where.
  std::vector<fs::path> copies;
  for (const auto& f : fs::directory_iterator(fs::path(dir).parent_path())) {
    if (f.path().string().starts_with(dir + ".before-salvage-")) {
      copies.push_back(f.path());
    }
  }
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_NE(d.output().find(copies[0].string()), std::string::npos)
      << d.output();
  const auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  EXPECT_EQ(read(copies[0] / logs.back().filename()), damaged_log);
}

// What --fsync never leaves to the OS may be lost to a power loss, and the
// last write torn: delayd starts with everything before it.
TEST_F(DamagedStore, UnsyncedWriteCutOffAtTheEndOfTheLogRecoversTheRest) {
  const std::string dir = Copy("unsynced", "torn-log");
  const auto logs = Files(dir, ".log");
  ASSERT_FALSE(logs.empty());
  const auto& log = logs.back();
  fs::resize_file(log, fs::file_size(log) - 5);
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir});
  ASSERT_TRUE(d.ok()) << d.output();
  auto stub = v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
  // Every timer but the last write's is back, with its payload.
  for (int i = 0; i < kTimers - 1; ++i) {
    v1::GetTimerRequest req;
    req.set_key("k" + std::to_string(i));
    v1::Timer t;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->GetTimer(&ctx, req, &t).ok()) << i;
    EXPECT_EQ(t.payload(), "payload-" + std::to_string(i));
  }
  EXPECT_EQ(d.Stop(SIGTERM, std::chrono::seconds(10)), 0) << d.output();
}

// RocksDB reads a MANIFEST cut at a record boundary as an older, valid
// store, and would start with none of the timers (deleting, as obsolete, the
// table files the lost records listed): the mark refuses it first.
TEST_F(DamagedStore, ManifestCutShortIsRefused) {
  const std::string dir = Copy("clean", "short-manifest");
  const auto manifests = Files(dir, "MANIFEST");
  ASSERT_EQ(manifests.size(), 1u);
  const auto size = fs::file_size(manifests[0]);
  fs::resize_file(manifests[0], size / 2);
  ExpectRefusal(dir, manifests[0].filename().string() + " is " +
                         std::to_string(size / 2) + " bytes long");
  // The table files are still there for a restore or --salvage.
  EXPECT_FALSE(Files(dir, ".sst").empty());
}

// A log cut short of writes it had synced: RocksDB cannot tell this from a
// crash mid-write; the mark can.
TEST_F(DamagedStore, LogCutShortOfDurableWritesIsRefused) {
  const std::string dir = Copy("log", "short-log");
  const auto logs = Files(dir, ".log");
  ASSERT_FALSE(logs.empty());
  fs::resize_file(logs.back(), fs::file_size(logs.back()) / 2);
  ExpectRefusal(dir, "durable writes are missing");
}

TEST_F(DamagedStore, DamagedMarkIsRefused) {
  const std::string dir = Copy("clean", "damaged-mark");
  std::ofstream(dir + "/DELAYD-MARK") << "delayd store mark 1\nsequence x\n";
  ExpectRefusal(dir, dir + "/DELAYD-MARK is damaged");
}

// Salvage after a log cut short: starts on what is left and says, in
// delayd's own log, how many durable writes it dropped.
TEST_F(DamagedStore, SalvageLogsWhatItDropped) {
  const std::string dir = Copy("log", "salvaged-short-log");
  const auto logs = Files(dir, ".log");
  ASSERT_FALSE(logs.empty());
  fs::resize_file(logs.back(), fs::file_size(logs.back()) / 2);
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir, "--salvage"});
  ASSERT_TRUE(d.ok()) << d.output();
  EXPECT_EQ(d.Stop(SIGTERM, std::chrono::seconds(10)), 0) << d.output();
  EXPECT_NE(d.output().find("--salvage: dropped: it recovers its writes up to"),
            std::string::npos)
      << d.output();
  EXPECT_NE(d.output().find("durable writes are missing"), std::string::npos)
      << d.output();
  // Recovered is the new normal: the next start needs no --salvage.
  DaemonProcess again(DELAYD_BINARY, {"--data-dir", dir});
  ASSERT_TRUE(again.ok()) << again.output();
  EXPECT_EQ(again.Stop(SIGTERM, std::chrono::seconds(10)), 0);
}

TEST_F(DamagedStore, CheckFindsAWholeStoreWhole) {
  std::string out;
  EXPECT_EQ(Check(Copy("clean", "check-clean"), &out), 0) << out;
  EXPECT_NE(out.find(": whole"), std::string::npos) << out;
  EXPECT_NE(out.find("timers 50,"), std::string::npos) << out;
  // The log is read too (a store left by kill -9).
  EXPECT_EQ(Check(Copy("log", "check-log"), &out, "json"), 0) << out;
  EXPECT_NE(out.find("\"whole\":true"), std::string::npos) << out;
  EXPECT_NE(out.find("\"timers\":50,"), std::string::npos) << out;
  EXPECT_NE(out.find("\"problems\":[]"), std::string::npos) << out;
}

TEST_F(DamagedStore, CheckNamesDamagedPayloadsAndRefusesBrokenFiles) {
  const std::string dir = Copy("clean", "check-flipped");
  ASSERT_TRUE(FlipPayloadByte(dir));
  std::string out;
  EXPECT_EQ(Check(dir, &out), 1) << out;
  EXPECT_NE(out.find("DAMAGED"), std::string::npos) << out;
  EXPECT_NE(out.find("checksum"), std::string::npos) << out;
  EXPECT_NE(out.find("namespace 'default', timer 'k1': payload"),
            std::string::npos)
      << out;
  const std::string manifest = Copy("clean", "check-manifest");
  const auto manifests = Files(manifest, "MANIFEST");
  ASSERT_EQ(manifests.size(), 1u);
  Overwrite(manifests[0], fs::file_size(manifests[0]) / 2);
  EXPECT_EQ(Check(manifest, &out), 2) << out;
  EXPECT_NE(out.find("Corruption"), std::string::npos) << out;
  // A store that holds less than its mark says.
  const std::string cut = Copy("log", "check-short-log");
  const auto logs = Files(cut, ".log");
  ASSERT_FALSE(logs.empty());
  fs::resize_file(logs.back(), fs::file_size(logs.back()) / 2);
  EXPECT_EQ(Check(cut, &out), 1) << out;
  EXPECT_NE(out.find("durable writes are missing"), std::string::npos) << out;
}

// A disk that fills up under the real daemon (every file it writes is
// capped): the write that fails answers INTERNAL with the disk's error,
// delayd stops with exit code 3 for its supervisor, and started again on a
// disk with room it has every timer acknowledged before, and takes writes.
TEST(FullDisk, DelaydStopsWithCode3AndComesBackWithEverythingAcknowledged) {
  TempDir dir;
  const std::string data = dir / "data";
  std::vector<std::string> acknowledged;
  {
    DaemonProcess d(DELAYD_BINARY, {"--data-dir", data},
                    std::chrono::seconds(10), /*max_file_bytes=*/512 << 10);
    ASSERT_TRUE(d.ok()) << d.output();
    auto stub = v1::Delayd::NewStub(
        grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
    grpc::Status failed;
    for (int i = 0; i < 1000 && failed.ok(); ++i) {
      v1::SetTimerRequest req;
      req.set_key("k" + std::to_string(i));
      req.set_payload(std::string(8 << 10, 'x'));
      *req.mutable_delay() = Millis(3'600'000);
      v1::SetTimerResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 10s);
      failed = stub->SetTimer(&ctx, req, &resp);
      if (failed.ok()) acknowledged.push_back(req.key());
    }
    ASSERT_FALSE(failed.ok()) << "the disk never filled";
    EXPECT_EQ(failed.error_code(), grpc::StatusCode::INTERNAL)
        << failed.error_message();
    EXPECT_NE(failed.error_message().find("File too large"), std::string::npos)
        << failed.error_message();
    const auto code = d.Stop(0, std::chrono::seconds(20));  // Waits.
    ASSERT_TRUE(code.has_value()) << "delayd did not stop\n" << d.output();
    EXPECT_EQ(*code, 3) << d.output();
    EXPECT_NE(d.output().find("health NOT_SERVING"), std::string::npos)
        << d.output();
  }
  ASSERT_GT(acknowledged.size(), 10u);
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", data});
  ASSERT_TRUE(d.ok()) << d.output();
  auto stub = v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
  for (const auto& key : acknowledged) {
    v1::GetTimerRequest req;
    req.set_key(key);
    v1::Timer t;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub->GetTimer(&ctx, req, &t).ok()) << key;
  }
  v1::SetTimerRequest req;
  req.set_key("after");
  *req.mutable_delay() = Millis(3'600'000);
  v1::SetTimerResponse resp;
  grpc::ClientContext ctx;
  EXPECT_TRUE(stub->SetTimer(&ctx, req, &resp).ok());
  EXPECT_EQ(d.Stop(SIGTERM, std::chrono::seconds(10)), 0) << d.output();
}

}  // namespace
}  // namespace delayd::testing
