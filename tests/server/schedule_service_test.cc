// PreviewSchedule through the service, on a fake clock: the spec's fields,
// their errors, and its instants across a daylight-saving change.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/common/fake_clock.h"
#include "tests/server/calls.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

constexpr std::int64_t kSecond = 1'000'000'000;

class PreviewTest : public ::testing::Test {
 protected:
  static DelaydServer::Options Options(FakeClock* clock) {
    auto o = TestDaemon::DefaultOptions();
    o.scheduler.clock = clock;
    return o;
  }
  void SetUp() override { ASSERT_TRUE(d_.started()); }

  grpc::Status Preview(const v1::PreviewScheduleRequest& req,
                       std::vector<std::int64_t>* seconds = nullptr) {
    v1::PreviewScheduleResponse resp;
    const grpc::Status s =
        d_.stub().PreviewSchedule(Within().get(), req, &resp);
    if (seconds != nullptr) {
      seconds->clear();
      for (const auto& t : resp.instants()) {
        EXPECT_EQ(t.nanos(), 0);
        seconds->push_back(t.seconds());
      }
    }
    return s;
  }
  static v1::PreviewScheduleRequest Cron(const std::string& expr,
                                         const std::string& zone = "") {
    v1::PreviewScheduleRequest req;
    req.set_namespace_("jobs");
    req.mutable_spec()->set_cron(expr);
    req.mutable_spec()->set_time_zone(zone);
    return req;
  }
  // The error message of `req`, which must be INVALID_ARGUMENT.
  std::string Refusal(const v1::PreviewScheduleRequest& req) {
    const grpc::Status s = Preview(req);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();
    return s.error_message();
  }

  FakeClock clock_;
  TestDaemon d_{Options(&clock_)};
};

TEST_F(PreviewTest, CronInAZoneAcrossSpringForward) {
  auto req = Cron("30 2 * * *", "Europe/Berlin");
  req.mutable_after()->set_seconds(1'774'656'000);  // 2026-03-28T00:00:00Z
  req.set_count(3);
  std::vector<std::int64_t> got;
  ASSERT_TRUE(Preview(req, &got).ok());
  // 02:30 CET; 03:00 CEST (02:30 does not exist); 02:30 CEST.
  EXPECT_EQ(got, (std::vector<std::int64_t>{1'774'661'400, 1'774'746'000,
                                            1'774'830'600}));
}

TEST_F(PreviewTest, DefaultsToTenInstantsAfterNow) {
  std::vector<std::int64_t> got;
  ASSERT_TRUE(Preview(Cron("@hourly"), &got).ok());
  ASSERT_EQ(got.size(), 10u);
  const std::int64_t now = FakeClock::kStart / kSecond;  // a whole hour
  EXPECT_EQ(got.front(), now + 3600);
  EXPECT_EQ(got.back(), now + 36000);
  clock_.Advance(std::chrono::minutes(30));
  ASSERT_TRUE(Preview(Cron("@hourly"), &got).ok());
  EXPECT_EQ(got.front(), now + 3600);
}

TEST_F(PreviewTest, EveryCountsFromItsStartAndStopsAtTheBounds) {
  v1::PreviewScheduleRequest req;
  req.set_namespace_("jobs");
  auto* spec = req.mutable_spec();
  spec->mutable_every()->set_seconds(90);
  const std::int64_t now = FakeClock::kStart / kSecond;
  spec->mutable_start_time()->set_seconds(now - 100);
  spec->mutable_end_time()->set_seconds(now + 300);
  req.set_count(50);
  std::vector<std::int64_t> got;
  ASSERT_TRUE(Preview(req, &got).ok());
  EXPECT_EQ(got, (std::vector<std::int64_t>{now + 80, now + 170, now + 260}));
  spec->clear_end_time();
  spec->set_max_runs(2);
  ASSERT_TRUE(Preview(req, &got).ok());
  EXPECT_EQ(got, (std::vector<std::int64_t>{now + 80, now + 170}));
  // Without a start, from the preview's `after` (now).
  spec->clear_start_time();
  ASSERT_TRUE(Preview(req, &got).ok());
  EXPECT_EQ(got, (std::vector<std::int64_t>{now + 90, now + 180}));
}

TEST_F(PreviewTest, BadSpecsNameTheirFieldAndChangeNothing) {
  EXPECT_NE(Refusal(Cron("0 25 * * *"))
                .find("spec.cron: hour field at character 3: value 25 out of "
                      "range 0-23"),
            std::string::npos);
  EXPECT_NE(Refusal(Cron("0 9 * * *", "Europe/Atlantis"))
                .find("spec.time_zone: unknown time zone 'Europe/Atlantis'"),
            std::string::npos);
  EXPECT_NE(Refusal(Cron(std::string(300, '*'))).find("spec.cron: longer than"),
            std::string::npos);
  v1::PreviewScheduleRequest none;
  none.set_namespace_("jobs");
  EXPECT_NE(Refusal(none).find("spec: one of cron or every is required"),
            std::string::npos);
  v1::PreviewScheduleRequest fast;
  fast.mutable_spec()->mutable_every()->set_nanos(500'000'000);
  EXPECT_NE(Refusal(fast).find("spec.every: must be at least "
                               "--min-schedule-interval"),
            std::string::npos);
  v1::PreviewScheduleRequest zoned;
  zoned.mutable_spec()->mutable_every()->set_seconds(60);
  zoned.mutable_spec()->set_time_zone("UTC");
  EXPECT_NE(Refusal(zoned).find("spec.time_zone: only with cron"),
            std::string::npos);
  auto backwards = Cron("@daily");
  backwards.mutable_spec()->mutable_start_time()->set_seconds(2'000'000'000);
  backwards.mutable_spec()->mutable_end_time()->set_seconds(1'900'000'000);
  EXPECT_NE(Refusal(backwards).find("spec.end_time: must be after start_time"),
            std::string::npos);
  auto many = Cron("@daily");
  many.set_count(1001);
  EXPECT_NE(Refusal(many).find("count: at most 1000"), std::string::npos);
  auto before = Cron("@daily");
  before.mutable_after()->set_seconds(-1);
  EXPECT_NE(Refusal(before).find("after: must be between 1970 and 2262"),
            std::string::npos);
  // A preview creates nothing: not even the namespace.
  EXPECT_EQ(testing::Stats(d_.stub()).namespaces_size(), 0);
}

}  // namespace
}  // namespace delayd::testing
