// A data directory whose payloads' table is damaged while the timers are
// intact: delayd starts, and never hands out a timer, an event or a dead
// letter without its payload; reads of those payloads fail by name.
#include <gtest/gtest.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/e2e/damaged_store.h"

namespace delayd::testing {
namespace {

class UnreadablePayload : public DataDirs {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    Populate(*dir_ / "clean", SIGTERM, "always", false);
  }
};

// One byte flipped inside the payloads' table: delayd starts (the timers are
// intact) but never hands out a timer or an event without its payload: reads
// of those payloads fail by name, the events wait, and the errors count.
TEST_F(UnreadablePayload, TimersAndEventsAreNeverServedWithoutIt) {
  const std::string dir = Copy("clean", "flipped-payload");
  ASSERT_TRUE(FlipPayloadByte(dir)) << "no table holds the payloads";
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir});
  ASSERT_TRUE(d.ok()) << d.output();
  auto stub = v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
  {
    v1::GetTimerRequest req;
    req.set_key("k1");
    v1::Timer t;
    grpc::ClientContext ctx;
    const grpc::Status s = stub->GetTimer(&ctx, req, &t);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL) << t.payload();
    EXPECT_NE(s.error_message().find("'k1'"), std::string::npos)
        << s.error_message();
  }
  {
    v1::ListTimersRequest req;
    v1::ListTimersResponse resp;
    grpc::ClientContext ctx;
    EXPECT_EQ(stub->ListTimers(&ctx, req, &resp).error_code(),
              grpc::StatusCode::INTERNAL);
    req.set_without_payloads(true);
    grpc::ClientContext ctx2;
    ASSERT_TRUE(stub->ListTimers(&ctx2, req, &resp).ok());
    EXPECT_EQ(resp.timers_size(), kTimers);
  }
  // Everything fires now; a worker gets no event without its payload.
  TestStream worker(*stub, TestStream::Worker("default", 1000));
  ASSERT_TRUE(worker.WaitRegistered());
  {
    v1::DrainRequest req;
    v1::DrainResponse resp;
    grpc::ClientContext ctx;
    const grpc::Status s = stub->Drain(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.drained(), static_cast<std::uint64_t>(kTimers));
  }
  v1::StatsResponse stats;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {  // Polls until every event is either delivered or held.
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Stats(&ctx, v1::StatsRequest(), &stats).ok());
    if (stats.store_errors() > 0 &&
        worker.Events().size() + stats.ready_events() == kTimers) {
      break;
    }
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GT(stats.ready_events(), 0u) << "no payload was damaged";
  // Health says so, the server's too (a probe takes the instance out of
  // rotation), and the log says why.
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
  const auto status_of = [&](const std::string& service) {
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(health->Check(&ctx, req, &resp).ok()) << service;
    return resp.status();
  };
  EXPECT_EQ(status_of("delayd.store"),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(status_of(""), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  for (const auto& e : worker.Events()) {
    EXPECT_EQ(e.payload(), "payload-" + e.key().substr(1)) << e.key();
  }
  EXPECT_EQ(d.Stop(SIGTERM, std::chrono::seconds(10)), 0);
  EXPECT_NE(d.output().find("unreadable-payload"), std::string::npos)
      << d.output();
  EXPECT_NE(d.output().find("key 'k"), std::string::npos) << d.output();
  EXPECT_NE(d.output().find("health NOT_SERVING"), std::string::npos)
      << d.output();
  EXPECT_NE(d.output().find("delayd check"), std::string::npos) << d.output();
}

// A dead letter whose payload cannot be read is never listed without it:
// the page fails by name (INTERNAL) and the dead letters stay.
TEST_F(UnreadablePayload, DeadLetterListingFailsByName) {
  const std::string dir = *dir_ / "dead";
  const auto dead_letters = [](v1::Delayd::Stub& stub) {
    v1::StatsRequest req;
    v1::StatsResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub.Stats(&ctx, req, &resp).ok());
    return resp.namespaces_size() == 1 ? resp.namespaces(0).dead_letters() : 0;
  };
  {
    DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir});
    ASSERT_TRUE(d.ok()) << d.output();
    auto stub = v1::Delayd::NewStub(
        grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
    v1::SetPolicyRequest policy;
    policy.mutable_policy()->set_max_attempts(1);
    v1::Policy set_policy;
    grpc::ClientContext policy_ctx;
    ASSERT_TRUE(stub->SetPolicy(&policy_ctx, policy, &set_policy).ok());
    TestStream worker(*stub, TestStream::Worker("default", kTimers));
    ASSERT_TRUE(worker.WaitRegistered());
    for (int i = 0; i < kTimers; ++i) {
      v1::SetTimerRequest req;
      req.set_key("k" + std::to_string(i));
      req.set_payload("payload-" + std::to_string(i));
      *req.mutable_delay() = Millis(0);
      v1::SetTimerResponse resp;
      grpc::ClientContext ctx;
      ASSERT_TRUE(stub->SetTimer(&ctx, req, &resp).ok());
    }
    const auto got = worker.WaitFor(kTimers, 10'000ms);
    ASSERT_EQ(got.size(), static_cast<std::size_t>(kTimers));
    v1::NackRequest nack;
    for (const auto& e : got) nack.add_event_ids(e.id());
    v1::NackResponse nacked;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Nack(&ctx, nack, &nacked).ok());
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (dead_letters(*stub) != kTimers) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(10ms);
    }
    ASSERT_EQ(d.Stop(SIGTERM, std::chrono::seconds(10)), 0) << d.output();
  }
  ASSERT_TRUE(FlipPayloadByte(dir)) << "no table holds the payloads";
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir});
  ASSERT_TRUE(d.ok()) << d.output();
  auto stub = v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(dead_letters(*stub), static_cast<std::uint64_t>(kTimers));
  v1::ListDeadLettersRequest req;
  req.set_page_size(1000);
  v1::ListDeadLettersResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status s = stub->ListDeadLetters(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_NE(s.error_message().find("key 'k"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(resp.dead_letters_size(), 0);
  EXPECT_EQ(dead_letters(*stub), static_cast<std::uint64_t>(kTimers));
  EXPECT_EQ(d.Stop(SIGTERM, std::chrono::seconds(10)), 0) << d.output();
}

}  // namespace
}  // namespace delayd::testing
