// Recurring schedules end to end through the service, on a fake clock and
// over each durable store: runs become events at their instants, carry the
// schedule's key and run number, survive restarts without an instant fired
// twice, and catch up after downtime by their policy.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/fake_clock.h"
#include "tests/server/calls.h"
#include "tests/server/test_client.h"
#include "tests/server/test_stores.h"

namespace delayd::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::int64_t kSecond = 1'000'000'000;

v1::SetScheduleRequest Every(const std::string& key, std::int64_t seconds,
                             std::int64_t start_nanos) {
  v1::SetScheduleRequest req;
  req.set_namespace_("jobs");
  req.set_key(key);
  req.set_payload("p-" + key);
  req.mutable_spec()->mutable_every()->set_seconds(seconds);
  req.mutable_spec()->mutable_start_time()->set_seconds(start_nanos / kSecond);
  return req;
}

class ScheduleRuns : public ::testing::TestWithParam<Backend> {
 protected:
  void Start() {
    auto o = TestDaemon::DefaultOptions();
    o.scheduler.clock = &clock_;
    d_ = std::make_unique<TestDaemon>(store_.On(o));
    ASSERT_TRUE(d_->started());
  }
  void Restart() {
    d_->Shutdown();
    d_.reset();
    Start();
  }
  grpc::Status Set(const v1::SetScheduleRequest& req,
                   v1::Schedule* out = nullptr) {
    v1::Schedule resp;
    const grpc::Status s = d_->stub().SetSchedule(Within().get(), req, &resp);
    if (out != nullptr) *out = resp;
    return s;
  }
  v1::Schedule Get(const std::string& key) {
    v1::GetScheduleRequest req;
    req.set_namespace_("jobs");
    req.set_key(key);
    v1::Schedule resp;
    EXPECT_TRUE(d_->stub().GetSchedule(Within().get(), req, &resp).ok());
    return resp;
  }
  // Waits (bounded) until schedule `key` has fired `runs` runs.
  bool WaitRuns(const std::string& key, std::uint64_t runs) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Get(key).runs() == runs) return true;
      std::this_thread::sleep_for(5ms);  // The pause of a bounded poll.
    }
    return false;
  }
  std::unique_ptr<TestStream> Worker() {
    // (An hour to acknowledge: the fake clock jumps minutes at a time.)
    auto w = std::make_unique<TestStream>(
        d_->stub(), TestStream::Worker("jobs", 100, 3'600'000));
    EXPECT_TRUE(w->WaitRegistered());
    return w;
  }

  FakeClock clock_;
  TestStore store_{GetParam()};
  std::unique_ptr<TestDaemon> d_;
};

TEST_P(ScheduleRuns, RunsFireAtTheirInstantsWithTheScheduleKeyAndRunNumber) {
  Start();
  auto w = Worker();
  const std::int64_t t0 = FakeClock::kStart;
  v1::Schedule set;
  ASSERT_TRUE(Set(Every("tick", 60, t0 + 60 * kSecond), &set).ok());
  EXPECT_GT(set.version(), 0u);
  EXPECT_EQ(set.runs(), 0u);
  EXPECT_EQ(set.next_instant().seconds(), t0 / kSecond + 60);
  EXPECT_FALSE(set.has_last_instant());

  clock_.Advance(60s - 1ms);
  EXPECT_EQ(Get("tick").runs(), 0u);  // never early
  clock_.Advance(1ms);
  ASSERT_TRUE(WaitRuns("tick", 1));
  clock_.Advance(60s);
  ASSERT_TRUE(WaitRuns("tick", 2));
  const auto got = w->WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i].key(), "tick");
    EXPECT_EQ(got[i].payload(), "p-tick");
    EXPECT_EQ(got[i].schedule_run(), i + 1u);
    EXPECT_EQ(ToNanos(got[i].fire_time()), t0 + (i + 1) * 60 * kSecond);
  }
  const v1::Schedule now = Get("tick");
  EXPECT_EQ(now.last_instant().seconds(), t0 / kSecond + 120);
  EXPECT_EQ(now.next_instant().seconds(), t0 / kSecond + 180);
  // The runs are not timers a client set: ListTimers does not show them.
  v1::ListTimersRequest list;
  list.set_namespace_("jobs");
  v1::ListTimersResponse timers;
  ASSERT_TRUE(d_->stub().ListTimers(Within().get(), list, &timers).ok());
  EXPECT_EQ(timers.timers_size(), 0);
}

TEST_P(ScheduleRuns, ARestartFiresNoInstantTwiceAndMissesNone) {
  Start();
  const std::int64_t t0 = FakeClock::kStart;
  ASSERT_TRUE(Set(Every("tick", 60, t0 + 60 * kSecond)).ok());
  clock_.Advance(60s);
  ASSERT_TRUE(WaitRuns("tick", 1));
  {
    auto w = Worker();
    const auto got = w->WaitFor(1);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_TRUE(testing::Ack(d_->stub(), "jobs", {got[0].id()}).ok());
  }
  Restart();
  auto w = Worker();
  EXPECT_EQ(Get("tick").runs(), 1u);
  clock_.Advance(60s);
  ASSERT_TRUE(WaitRuns("tick", 2));
  const auto got = w->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].schedule_run(), 2u);
  EXPECT_EQ(ToNanos(got[0].fire_time()), t0 + 120 * kSecond);
}

TEST_P(ScheduleRuns, AWallClockStepFiresNoInstantTwiceAndCatchesUpOnce) {
  Start();
  auto w = Worker();
  const std::int64_t t0 = FakeClock::kStart;
  ASSERT_TRUE(Set(Every("tick", 60, t0 + 60 * kSecond)).ok());
  clock_.Advance(60s);
  ASSERT_TRUE(WaitRuns("tick", 1));
  // Back an hour: the instants already acted on do not come again.
  clock_.StepWall(-1h);
  clock_.Advance(30min);
  EXPECT_EQ(Get("tick").runs(), 1u);
  // Forward past the next ones: one run, for the newest (catch-up latest).
  clock_.StepWall(1h + 5min);
  ASSERT_TRUE(WaitRuns("tick", 2));
  const auto got = w->WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  // Now t0 + 60 s - 1 h + 30 min + 1 h 5 min = t0 + 36 min: its newest
  // instant is t0 + 36 min.
  EXPECT_EQ(ToNanos(got[1].fire_time()), t0 + 36 * 60 * kSecond);
  EXPECT_EQ(got[1].schedule_run(), 2u);
  EXPECT_EQ(Get("tick").next_instant().seconds(), t0 / kSecond + 37 * 60);
}

TEST_P(ScheduleRuns, PauseHoldsRunsResumeCatchesUpTriggerRunsNow) {
  Start();
  auto w = Worker();
  const std::int64_t t0 = FakeClock::kStart;
  ASSERT_TRUE(Set(Every("tick", 60, t0 + 60 * kSecond)).ok());
  auto act = [&](const char* what, v1::Schedule* out) {
    v1::ScheduleActionRequest req;
    req.set_namespace_("jobs");
    req.set_key("tick");
    auto ctx = Within();
    const std::string w = what;
    return w == "pause"    ? d_->stub().PauseSchedule(ctx.get(), req, out)
           : w == "resume" ? d_->stub().ResumeSchedule(ctx.get(), req, out)
                           : d_->stub().TriggerSchedule(ctx.get(), req, out);
  };
  v1::Schedule s;
  // Triggered: a run now, the next number; the spec's instants go on.
  ASSERT_TRUE(act("trigger", &s).ok());
  EXPECT_EQ(s.runs(), 1u);
  EXPECT_EQ(s.next_instant().seconds(), t0 / kSecond + 60);
  auto got = w->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].schedule_run(), 1u);
  EXPECT_EQ(ToNanos(got[0].fire_time()), t0);
  ASSERT_TRUE(testing::Ack(d_->stub(), "jobs", {got[0].id()}).ok());
  // Paused: its instants pass without runs, across a restart too.
  ASSERT_TRUE(act("pause", &s).ok());
  EXPECT_TRUE(s.paused());
  EXPECT_FALSE(s.has_next_instant());
  clock_.Advance(5min);
  EXPECT_EQ(Get("tick").runs(), 1u);
  Restart();
  w = Worker();
  EXPECT_TRUE(Get("tick").paused());
  clock_.Advance(5min);
  EXPECT_EQ(Get("tick").runs(), 1u);
  // Resumed: the ten missed instants, caught up as one run (latest).
  ASSERT_TRUE(act("resume", &s).ok());
  EXPECT_FALSE(s.paused());
  ASSERT_TRUE(WaitRuns("tick", 2));
  got = w->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].schedule_run(), 2u);
  EXPECT_EQ(ToNanos(got[0].fire_time()), t0 + 600 * kSecond);
  // None of these for a schedule that is not there.
  v1::ScheduleActionRequest none;
  none.set_namespace_("jobs");
  none.set_key("nothing");
  EXPECT_EQ(d_->stub().PauseSchedule(Within().get(), none, &s).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_P(ScheduleRuns, OverlapSkipDropsInstantsWhileTheLastRunIsOpen) {
  Start();
  auto w = Worker();
  const std::int64_t t0 = FakeClock::kStart;
  auto req = Every("tick", 60, t0 + 60 * kSecond);
  req.set_overlap(v1::OVERLAP_SKIP);
  v1::Schedule set;
  ASSERT_TRUE(Set(req, &set).ok());
  EXPECT_EQ(set.overlap(), v1::OVERLAP_SKIP);
  clock_.Advance(60s);
  auto got = w->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  clock_.Advance(60s);  // run 1 unacknowledged: t0 + 120 s is skipped
  EXPECT_EQ(Get("tick").runs(), 1u);
  ASSERT_TRUE(testing::Ack(d_->stub(), "jobs", {got[0].id()}).ok());
  clock_.Advance(60s);
  ASSERT_TRUE(WaitRuns("tick", 2));
  got = w->WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(ToNanos(got[1].fire_time()), t0 + 180 * kSecond);
  // Replaced (a new version), it still waits for the open run 2.
  req.set_payload("p-tick-2");
  ASSERT_TRUE(Set(req).ok());
  clock_.Advance(60s);  // t0 + 240 s: skipped
  EXPECT_EQ(Get("tick").runs(), 2u);
  // Run 2 still open across a restart: t0 + 300 s is skipped too.
  w.reset();
  Restart();
  clock_.Advance(60s);
  EXPECT_EQ(Get("tick").runs(), 2u);
  w = Worker();
  got = w->WaitFor(1);  // run 2, redelivered
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].schedule_run(), 2u);
  ASSERT_TRUE(testing::Ack(d_->stub(), "jobs", {got[0].id()}).ok());
  clock_.Advance(60s);
  ASSERT_TRUE(WaitRuns("tick", 3));
}

TEST_P(ScheduleRuns, OverlapBufferOneRunsTheHeldInstantWhenTheOpenRunCloses) {
  Start();
  auto w = Worker();
  const std::int64_t t0 = FakeClock::kStart;
  auto req = Every("tick", 60, t0 + 60 * kSecond);
  req.set_overlap(v1::OVERLAP_BUFFER_ONE);
  ASSERT_TRUE(Set(req).ok());
  clock_.Advance(60s);
  auto got = w->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  clock_.Advance(60s);  // held: t0 + 120 s
  clock_.Advance(60s);  // dropped: t0 + 180 s
  EXPECT_EQ(Get("tick").runs(), 1u);
  ASSERT_TRUE(testing::Ack(d_->stub(), "jobs", {got[0].id()}).ok());
  ASSERT_TRUE(WaitRuns("tick", 2));
  got = w->WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].schedule_run(), 2u);
  EXPECT_EQ(ToNanos(got[1].fire_time()), t0 + 120 * kSecond);
  EXPECT_EQ(Get("tick").next_instant().seconds(), t0 / kSecond + 240);
}

TEST_P(ScheduleRuns, ARestartInsideADaylightSavingGapRunsItsInstantOnce) {
  // 2026-03-29T00:00:00Z: an hour before Berlin's clocks spring forward.
  constexpr std::int64_t kGapDay = 1'774'742'400 * kSecond;
  clock_.Advance(std::chrono::nanoseconds(kGapDay - FakeClock::kStart));
  Start();
  auto w = Worker();
  v1::SetScheduleRequest req;
  req.set_namespace_("jobs");
  req.set_key("night");
  req.mutable_spec()->set_cron("30 2 * * *");
  req.mutable_spec()->set_time_zone("Europe/Berlin");
  v1::Schedule set;
  ASSERT_TRUE(Set(req, &set).ok());
  // 02:30 does not exist that night: 03:00 CEST, 01:00 UTC.
  EXPECT_EQ(set.next_instant().seconds(), kGapDay / kSecond + 3600);
  clock_.Advance(59min);
  w.reset();
  Restart();
  w = Worker();
  clock_.Advance(1min);
  ASSERT_TRUE(WaitRuns("night", 1));
  auto got = w->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(ToNanos(got[0].fire_time()), kGapDay + 3600 * kSecond);
  ASSERT_TRUE(testing::Ack(d_->stub(), "jobs", {got[0].id()}).ok());
  Restart();
  w = Worker();
  clock_.Advance(std::chrono::hours(23) + 30min);  // 02:30 CEST the next day
  ASSERT_TRUE(WaitRuns("night", 2));
  got = w->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].schedule_run(), 2u);
  EXPECT_EQ(ToNanos(got[0].fire_time()),
            kGapDay + (24 * 3600 + 1800) * kSecond);
}

TEST_P(ScheduleRuns, DowntimeIsCaughtUpByOneRunForTheNewestInstant) {
  Start();
  const std::int64_t t0 = FakeClock::kStart;
  ASSERT_TRUE(Set(Every("tick", 60, t0 + 60 * kSecond)).ok());
  d_->Shutdown();
  d_.reset();
  clock_.Advance(10min + 5s);  // ten instants pass while delayd is down
  Start();
  auto w = Worker();
  ASSERT_TRUE(WaitRuns("tick", 1));
  const auto got = w->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(ToNanos(got[0].fire_time()), t0 + 600 * kSecond);
  const v1::Schedule now = Get("tick");
  EXPECT_EQ(now.runs(), 1u);
  EXPECT_EQ(now.last_instant().seconds(), t0 / kSecond + 600);
  EXPECT_EQ(now.next_instant().seconds(), t0 / kSecond + 660);
}

TEST_P(ScheduleRuns, CreateOnlyVersionsListingAndDelete) {
  Start();
  const std::int64_t t0 = FakeClock::kStart;
  v1::Schedule first;
  ASSERT_TRUE(Set(Every("a", 60, t0 + 60 * kSecond), &first).ok());
  auto again = Every("a", 60, t0 + 60 * kSecond);
  again.set_if_absent(true);
  EXPECT_EQ(Set(again).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  auto stale = Every("a", 30, t0);
  stale.set_expected_version(first.version() + 1);
  EXPECT_EQ(Set(stale).error_code(), grpc::StatusCode::ABORTED);
  stale.set_expected_version(first.version());
  v1::Schedule second;
  ASSERT_TRUE(Set(stale, &second).ok());
  EXPECT_GT(second.version(), first.version());
  EXPECT_EQ(second.spec().every().seconds(), 30);
  for (const char* k : {"b", "c", "d", "e"}) {
    ASSERT_TRUE(Set(Every(k, 3600, t0 + 3600 * kSecond)).ok());
  }
  // Pages of two, by key.
  std::vector<std::string> keys;
  std::string token;
  for (int page = 0; page < 5; ++page) {
    v1::ListSchedulesRequest req;
    req.set_namespace_("jobs");
    req.set_page_size(2);
    req.set_page_token(token);
    v1::ListSchedulesResponse resp;
    ASSERT_TRUE(d_->stub().ListSchedules(Within().get(), req, &resp).ok());
    for (const auto& s : resp.schedules()) keys.push_back(s.key());
    token = resp.next_page_token();
    if (token.empty()) break;
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  // Deleted: no more runs, and gone after a restart too.
  v1::DeleteScheduleRequest del;
  del.set_namespace_("jobs");
  del.set_key("a");
  v1::DeleteScheduleResponse gone;
  ASSERT_TRUE(d_->stub().DeleteSchedule(Within().get(), del, &gone).ok());
  EXPECT_EQ(gone.version(), second.version());
  EXPECT_EQ(d_->stub().DeleteSchedule(Within().get(), del, &gone).error_code(),
            grpc::StatusCode::NOT_FOUND);
  Restart();
  v1::GetScheduleRequest get;
  get.set_namespace_("jobs");
  get.set_key("a");
  v1::Schedule s;
  EXPECT_EQ(d_->stub().GetSchedule(Within().get(), get, &s).error_code(),
            grpc::StatusCode::NOT_FOUND);
  get.set_key("e");
  ASSERT_TRUE(d_->stub().GetSchedule(Within().get(), get, &s).ok());
  EXPECT_EQ(s.payload(), "p-e");
  clock_.Advance(3600s);
  EXPECT_TRUE(WaitRuns("e", 1));
  // The four runs, set as timers due now, fire (on the partitions' alarms).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (NamespaceStats(d_->stub(), "jobs").pending_timers() != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);  // The pause of a bounded poll.
  }
  EXPECT_EQ(NamespaceStats(d_->stub(), "jobs").pending_timers(), 0u);
  EXPECT_EQ(NamespaceStats(d_->stub(), "jobs").timers_expired(), 4u);
}

// Recovery restores schedules on one thread per partition, in chunks, and
// indexes them at the end: every schedule comes back, found by key, listed
// in order, with its version; new versions continue past them.
TEST_P(ScheduleRuns, ManySchedulesComeBackWholeAfterARestart) {
  Start();
  const std::int64_t t0 = FakeClock::kStart;
  constexpr int kCount = 700;  // more than one recovery chunk
  std::vector<std::string> keys;
  std::map<std::string, std::uint64_t> versions;
  std::uint64_t highest = 0;
  for (int i = 0; i < kCount; ++i) {
    char key[16];
    std::snprintf(key, sizeof key, "k%04d", i);
    auto req = Every(key, 60 + i, t0 + (60 + i) * kSecond);
    req.set_payload(std::string(100, static_cast<char>('a' + i % 26)));
    v1::Schedule s;
    ASSERT_TRUE(Set(req, &s).ok()) << key;
    keys.push_back(key);
    versions[key] = s.version();
    highest = std::max(highest, s.version());
  }
  Restart();
  std::vector<std::string> listed;
  std::string token;
  for (int page = 0; page < 10; ++page) {
    v1::ListSchedulesRequest req;
    req.set_namespace_("jobs");
    req.set_page_size(100);
    req.set_page_token(token);
    v1::ListSchedulesResponse resp;
    ASSERT_TRUE(d_->stub().ListSchedules(Within().get(), req, &resp).ok());
    for (const auto& s : resp.schedules()) {
      listed.push_back(s.key());
      EXPECT_EQ(s.version(), versions[s.key()]) << s.key();
    }
    token = resp.next_page_token();
    if (token.empty()) break;
  }
  EXPECT_EQ(listed, keys);
  for (const std::string& key : {keys.front(), keys[kCount / 2], keys.back()}) {
    const v1::Schedule s = Get(key);
    EXPECT_EQ(s.version(), versions[key]);
    EXPECT_EQ(s.payload().size(), 100u);
  }
  v1::Schedule fresh;
  ASSERT_TRUE(Set(Every("fresh", 60, t0 + 60 * kSecond), &fresh).ok());
  EXPECT_GT(fresh.version(), highest);
  // Each one still runs at its first instant.
  clock_.Advance(std::chrono::seconds(60 + kCount));
  EXPECT_TRUE(WaitRuns(keys.back(), 1));
  EXPECT_TRUE(WaitRuns(keys.front(), 1));
}

TEST_P(ScheduleRuns, BadRequestsAreRefusedAndChangeNothing) {
  Start();
  auto bad_key = Every("a", 60, FakeClock::kStart);
  bad_key.set_key(std::string("a\0b", 3));
  EXPECT_EQ(Set(bad_key).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto bad_limit = Every("a", 60, FakeClock::kStart);
  bad_limit.set_catch_up_limit(10'001);
  EXPECT_EQ(Set(bad_limit).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto bad_jitter = Every("a", 60, FakeClock::kStart);
  bad_jitter.mutable_jitter()->set_seconds(3601);
  EXPECT_EQ(Set(bad_jitter).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto fast = Every("a", 60, FakeClock::kStart);
  fast.mutable_spec()->mutable_every()->set_seconds(0);
  fast.mutable_spec()->mutable_every()->set_nanos(1000);
  EXPECT_EQ(Set(fast).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ListSchedulesRequest list;
  list.set_namespace_("jobs");
  v1::ListSchedulesResponse resp;
  ASSERT_TRUE(d_->stub().ListSchedules(Within().get(), list, &resp).ok());
  EXPECT_EQ(resp.schedules_size(), 0);
}

TEST_P(ScheduleRuns, AMalformedStoredScheduleIsRefusedByNameAtStart) {
  {
    std::unique_ptr<Store> store;
    ASSERT_TRUE(store_.Opener()(StoreHooks(), &store).ok());
    Batch b;
    b.PutNamespace(0, "jobs");
    b.PutSchedule(0, "broken", "not a schedule");
    ASSERT_TRUE(store->WriteNow(b).ok());
    store->Close();
  }
  auto o = TestDaemon::DefaultOptions();
  o.scheduler.clock = &clock_;
  o = store_.On(o);
  o.listen = "127.0.0.1:0";
  DelaydServer server(o);
  const Status s = server.Start();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the schedule 'broken' is stored malformed"),
            std::string::npos)
      << s.message();
}

INSTANTIATE_TEST_SUITE_P(Stores, ScheduleRuns, AllBackends(), BackendName);

}  // namespace
}  // namespace delayd::testing
