// End-to-end: the real delayd binary, driven over gRPC on loopback.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include "delayd/v1/delayd.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/common/daemon_process.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

std::unique_ptr<v1::Delayd::Stub> Connect(const DaemonProcess& d) {
  return v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
}

TEST(DelaydBinary, ServesAndStopsCleanlyOnSigterm) {
  TempDir dir;
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir / "data"});
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
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->SetTimer(&ctx, req, &resp).ok());
  ASSERT_EQ(watcher.WaitFor(1).size(), 1u);

  const auto start = std::chrono::steady_clock::now();
  const auto code = d.Stop(SIGTERM, 10s);
  ASSERT_TRUE(code.has_value()) << "did not exit within 10 s";
  EXPECT_EQ(*code, 0) << d.output();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 7s);
  EXPECT_EQ(watcher.WaitDone().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(d.output().find("delayd stopped"), std::string::npos);
}

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

TEST(DelaydBinary, BadFlagIsAUsageError) {
  DaemonProcess d(DELAYD_BINARY, {"--tick", "soon"}, 5s);
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(d.Stop(0, 5s), 1);
  EXPECT_NE(d.output().find("--tick"), std::string::npos) << d.output();
}

}  // namespace
}  // namespace delayd::testing
