// Per-timer jitter: the fire time is drawn in [when, when + jitter], never
// earlier, returned to the caller, and the event fires at it; timers set
// for one instant spread over the window; bad jitter is refused.
#include <gtest/gtest.h>

#include "server/api/proto_time.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

WallNanos Nanos(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1'000'000'000 + t.nanos();
}

class JitterTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d_.started()); }
  grpc::Status Set(const std::string& key, std::int64_t delay_ms,
                   std::int64_t jitter_ms, v1::SetTimerResponse* resp) {
    v1::SetTimerRequest req;
    req.set_namespace_("j");
    req.set_key(key);
    *req.mutable_delay() = Millis(delay_ms);
    *req.mutable_jitter() = Millis(jitter_ms);
    grpc::ClientContext ctx;
    return d_.stub().SetTimer(&ctx, req, resp);
  }
  TestDaemon d_{TestDaemon::DefaultOptions()};
};

TEST_F(JitterTest, FireTimesSpreadOverTheWindowNeverBefore) {
  std::set<WallNanos> times;
  for (int i = 0; i < 200; ++i) {
    const WallNanos before = WallNow();
    v1::SetTimerResponse r;
    ASSERT_TRUE(Set("k" + std::to_string(i), 3'600'000, 60'000, &r).ok());
    const WallNanos after = WallNow();
    const WallNanos t = Nanos(r.fire_time());
    EXPECT_GE(t, before + 3'600'000'000'000);
    EXPECT_LE(t, after + 3'660'000'000'000);
    times.insert(t);
  }
  // 200 draws over a minute: all different, and over most of it.
  EXPECT_EQ(times.size(), 200u);
  EXPECT_GT(*times.rbegin() - *times.begin(), 30'000'000'000);
}

TEST_F(JitterTest, EventFiresAtTheDrawnTime) {
  TestStream watcher(d_.stub(), TestStream::Watcher("j"));
  ASSERT_TRUE(watcher.WaitRegistered());
  v1::SetTimerResponse r;
  ASSERT_TRUE(Set("soon", 0, 300, &r).ok());
  auto got = watcher.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(Nanos(got[0].fire_time()), Nanos(r.fire_time()));
  EXPECT_GE(Nanos(got[0].fired_at()), Nanos(r.fire_time()));
}

TEST_F(JitterTest, BatchSetsTakeJitterToo) {
  v1::BatchRequest req;
  for (int i = 0; i < 50; ++i) {
    auto* set = req.add_operations()->mutable_set();
    set->set_namespace_("j");
    set->set_key("b" + std::to_string(i));
    *set->mutable_delay() = Millis(3'600'000);
    *set->mutable_jitter() = Millis(10'000);
  }
  v1::BatchResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d_.stub().Batch(&ctx, req, &resp).ok());
  std::set<WallNanos> times;
  for (int i = 0; i < 50; ++i) {
    v1::GetTimerRequest get;
    get.set_namespace_("j");
    get.set_key("b" + std::to_string(i));
    v1::Timer t;
    grpc::ClientContext c;
    ASSERT_TRUE(d_.stub().GetTimer(&c, get, &t).ok());
    times.insert(Nanos(t.fire_time()));
  }
  EXPECT_EQ(times.size(), 50u);
  EXPECT_LE(*times.rbegin() - *times.begin(), 10'000'000'000);
}

TEST_F(JitterTest, BadJitterIsRefused) {
  v1::SetTimerResponse r;
  grpc::Status s = Set("k", 1000, 25 * 3'600'000, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("jitter"), std::string::npos);
  v1::SetTimerRequest req;
  req.set_namespace_("j");
  req.set_key("k");
  *req.mutable_delay() = Millis(1000);
  req.mutable_jitter()->set_seconds(-1);
  grpc::ClientContext ctx;
  EXPECT_EQ(d_.stub().SetTimer(&ctx, req, &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Past max-delay (10 years) once the jitter is added.
  req.mutable_jitter()->set_seconds(23 * 3600);
  req.mutable_delay()->set_seconds(10LL * 365 * 24 * 3600);
  grpc::ClientContext ctx2;
  EXPECT_EQ(d_.stub().SetTimer(&ctx2, req, &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace delayd::testing
