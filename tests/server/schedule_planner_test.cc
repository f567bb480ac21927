#include <gtest/gtest.h>

#include <chrono>

#include "server/schedule/planner.h"

namespace delayd::schedule {
namespace {

using namespace std::chrono_literals;

constexpr WallNanos kSecond = 1'000'000'000;
constexpr WallNanos kMinute = 60 * kSecond;
// 2026-06-01T00:00:00Z, a whole minute.
constexpr WallNanos kT0 = 1'780'272'000 * kSecond;

// Every minute from kT0; created 30 s before it.
class Planner : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Spec::Every(1min, kT0, 1s, &spec_).ok());
    state_.last_instant = kT0 - 30 * kSecond - 1;
  }

  Plan Due(WallNanos now, bool open = false) {
    return PlanDue(spec_, policies_, &state_, now, open);
  }

  Spec spec_;
  Policies policies_;
  State state_;
};

// A preview is what a schedule created at `after` would run: its instants
// after `after`, none before start or after end, at most `n`.
TEST_F(Planner, APreviewKeepsToTheBoundsAndTheCount) {
  EXPECT_EQ(Preview(spec_, policies_, kT0 - kSecond, 3),
            (std::vector<WallNanos>{kT0, kT0 + kMinute, kT0 + 2 * kMinute}));
  policies_.start = kT0 + 90 * kSecond;
  policies_.end = kT0 + 4 * kMinute;
  EXPECT_EQ(Preview(spec_, policies_, kT0 - kSecond, 10),
            (std::vector<WallNanos>{kT0 + 2 * kMinute, kT0 + 3 * kMinute,
                                    kT0 + 4 * kMinute}));
  EXPECT_TRUE(Preview(spec_, policies_, kT0 + 4 * kMinute, 10).empty());
  EXPECT_TRUE(Preview(spec_, policies_, kT0, 0).empty());
}

TEST_F(Planner, AnOnTimeInstantFiresOnceAndWakesForTheNext) {
  Plan plan = Due(kT0 - kSecond);
  EXPECT_TRUE(plan.fire.empty());
  EXPECT_EQ(plan.wake, kT0);

  plan = Due(kT0);
  ASSERT_EQ(plan.fire.size(), 1u);
  EXPECT_EQ(plan.fire[0].instant, kT0);
  EXPECT_EQ(plan.fire[0].fire_at, kT0);
  EXPECT_EQ(plan.fire[0].number, 1u);
  EXPECT_EQ(plan.fire[0].missed, 0u);
  EXPECT_EQ(plan.wake, kT0 + kMinute);

  // Woken again for the same instant (a duplicate alarm): nothing.
  EXPECT_TRUE(Due(kT0 + kSecond).fire.empty());
  plan = Due(kT0 + kMinute);
  ASSERT_EQ(plan.fire.size(), 1u);
  EXPECT_EQ(plan.fire[0].number, 2u);
}

TEST_F(Planner, AClockSteppedBackFiresNothingTwice) {
  ASSERT_EQ(Due(kT0).fire.size(), 1u);
  const State saved = state_;  // as stored with the run's event
  state_ = saved;              // a restart reads it back
  Plan plan = Due(kT0 - 3600 * kSecond);
  EXPECT_TRUE(plan.fire.empty());
  EXPECT_EQ(plan.wake, kT0 + kMinute);
  EXPECT_TRUE(Due(kT0 + 59 * kSecond).fire.empty());
  EXPECT_EQ(Due(kT0 + kMinute).fire.size(), 1u);
}

TEST_F(Planner, CatchUpLatestFiresOneRunForEverythingMissed) {
  ASSERT_EQ(Due(kT0).fire.size(), 1u);
  // Down for ten instants; woken 5 s after the newest: on time.
  Plan plan = Due(kT0 + 10 * kMinute + 5 * kSecond);
  ASSERT_EQ(plan.fire.size(), 1u);
  EXPECT_EQ(plan.fire[0].instant, kT0 + 10 * kMinute);
  EXPECT_EQ(plan.fire[0].missed, 9u);
  EXPECT_EQ(plan.caught_up, 0u);
  EXPECT_EQ(plan.dropped_missed, 0u);
  // Woken 30 s after the newest: that run was missed too.
  plan = Due(kT0 + 20 * kMinute + 30 * kSecond);
  ASSERT_EQ(plan.fire.size(), 1u);
  EXPECT_EQ(plan.fire[0].missed, 9u);
  EXPECT_EQ(plan.caught_up, 1u);
}

TEST_F(Planner, CatchUpNoneDropsWhatWasMissed) {
  policies_.catch_up = CatchUp::kNone;
  ASSERT_EQ(Due(kT0).fire.size(), 1u);
  Plan plan = Due(kT0 + 10 * kMinute + 5 * kSecond);
  ASSERT_EQ(plan.fire.size(), 1u);
  EXPECT_EQ(plan.fire[0].instant, kT0 + 10 * kMinute);
  EXPECT_EQ(plan.fire[0].missed, 0u);
  EXPECT_EQ(plan.dropped_missed, 9u);
  plan = Due(kT0 + 20 * kMinute + 30 * kSecond);
  EXPECT_TRUE(plan.fire.empty());
  EXPECT_EQ(plan.dropped_missed, 10u);
  EXPECT_EQ(plan.wake, kT0 + 21 * kMinute);
}

TEST_F(Planner, CatchUpAllFiresTheNewestUpToItsLimitInOrder) {
  policies_.catch_up = CatchUp::kAll;
  policies_.catch_up_limit = 3;
  ASSERT_EQ(Due(kT0).fire.size(), 1u);
  const Plan plan = Due(kT0 + 10 * kMinute + 5 * kSecond);
  ASSERT_EQ(plan.fire.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.fire[i].instant, kT0 + (8 + i) * kMinute);
    EXPECT_EQ(plan.fire[i].number, 2u + i);
  }
  EXPECT_EQ(plan.dropped_missed, 7u);
  EXPECT_EQ(plan.caught_up, 2u);
}

TEST_F(Planner, OverlapSkipDropsAnInstantWhileTheLastRunIsOpen) {
  policies_.overlap = Overlap::kSkip;
  ASSERT_EQ(Due(kT0).fire.size(), 1u);
  Plan plan = Due(kT0 + kMinute, /*open=*/true);
  EXPECT_TRUE(plan.fire.empty());
  EXPECT_EQ(plan.dropped_overlap, 1u);
  EXPECT_EQ(plan.wake, kT0 + 2 * kMinute);
  EXPECT_TRUE(
      PlanClosed(spec_, policies_, &state_, kT0 + 90 * kSecond).fire.empty());
  plan = Due(kT0 + 2 * kMinute);
  ASSERT_EQ(plan.fire.size(), 1u);
  EXPECT_EQ(plan.fire[0].number, 2u);
}

TEST_F(Planner, OverlapBufferOneFiresTheFirstHeldInstantOnClose) {
  policies_.overlap = Overlap::kBufferOne;
  ASSERT_EQ(Due(kT0).fire.size(), 1u);
  EXPECT_TRUE(Due(kT0 + kMinute, true).fire.empty());
  const Plan second = Due(kT0 + 2 * kMinute, true);
  EXPECT_TRUE(second.fire.empty());
  EXPECT_EQ(second.dropped_overlap, 1u);
  const Plan closed =
      PlanClosed(spec_, policies_, &state_, kT0 + 150 * kSecond);
  ASSERT_EQ(closed.fire.size(), 1u);
  EXPECT_EQ(closed.fire[0].instant, kT0 + kMinute);
  EXPECT_EQ(closed.fire[0].fire_at, kT0 + kMinute);  // due: fires at once
  EXPECT_EQ(closed.fire[0].number, 2u);
  EXPECT_EQ(closed.wake, kT0 + 3 * kMinute);
  EXPECT_FALSE(state_.buffered);
}

TEST_F(Planner, RunsThatFireTogetherOverlapOneAnother) {
  policies_.catch_up = CatchUp::kAll;
  policies_.overlap = Overlap::kSkip;
  ASSERT_EQ(Due(kT0).fire.size(), 1u);
  const Plan plan = Due(kT0 + 3 * kMinute);
  ASSERT_EQ(plan.fire.size(), 1u);
  EXPECT_EQ(plan.fire[0].instant, kT0 + kMinute);
  EXPECT_EQ(plan.dropped_overlap, 2u);
}

TEST_F(Planner, MaxRunsFinishesTheSchedule) {
  policies_.max_runs = 2;
  ASSERT_EQ(Due(kT0).fire.size(), 1u);
  const Plan plan = Due(kT0 + kMinute);
  ASSERT_EQ(plan.fire.size(), 1u);
  EXPECT_FALSE(plan.wake);
  EXPECT_TRUE(state_.finished);
  EXPECT_TRUE(Due(kT0 + 2 * kMinute).fire.empty());
}

TEST_F(Planner, StartAndEndBoundTheInstants) {
  policies_.start = kT0 + 2 * kMinute + 1;
  policies_.end = kT0 + 4 * kMinute;
  EXPECT_EQ(Due(kT0).wake, kT0 + 3 * kMinute);
  EXPECT_TRUE(Due(kT0 + 2 * kMinute).fire.empty());
  ASSERT_EQ(Due(kT0 + 3 * kMinute).fire.size(), 1u);
  const Plan last = Due(kT0 + 4 * kMinute);
  ASSERT_EQ(last.fire.size(), 1u);
  EXPECT_FALSE(last.wake);
  EXPECT_TRUE(state_.finished);
}

TEST_F(Planner, APausedScheduleCatchesUpOnResume) {
  ASSERT_EQ(Due(kT0).fire.size(), 1u);
  state_.paused = true;
  const Plan paused = Due(kT0 + 5 * kMinute);
  EXPECT_TRUE(paused.fire.empty());
  EXPECT_FALSE(paused.wake);
  state_.paused = false;
  const Plan resumed = Due(kT0 + 5 * kMinute + kSecond);
  ASSERT_EQ(resumed.fire.size(), 1u);
  EXPECT_EQ(resumed.fire[0].instant, kT0 + 5 * kMinute);
  EXPECT_EQ(resumed.fire[0].missed, 4u);
}

TEST_F(Planner, JitterIsNeverEarlyAndTheSameAfterARestart) {
  policies_.jitter = 10s;
  policies_.seed = 42;
  const State start = state_;
  std::vector<WallNanos> first;
  for (int i = 0; i < 20; ++i) {
    const Plan plan = Due(kT0 + i * kMinute);
    ASSERT_EQ(plan.fire.size(), 1u);
    const schedule::Run& r = plan.fire[0];
    EXPECT_GE(r.fire_at, r.instant);
    EXPECT_LT(r.fire_at, r.instant + 10 * kSecond);
    first.push_back(r.fire_at);
  }
  EXPECT_NE(first[0] - kT0, first[1] - kT0 - kMinute);  // spread
  state_ = start;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(Due(kT0 + i * kMinute).fire[0].fire_at, first[i]);
  }
}

TEST_F(Planner, ATriggerTakesARunNumberAndLeavesTheInstantsAlone) {
  ASSERT_EQ(Due(kT0).fire.size(), 1u);
  const schedule::Run r = Trigger(&state_, kT0 + 10 * kSecond);
  EXPECT_EQ(r.number, 2u);
  EXPECT_EQ(r.instant, kT0 + 10 * kSecond);
  const Plan plan = Due(kT0 + kMinute);
  ASSERT_EQ(plan.fire.size(), 1u);
  EXPECT_EQ(plan.fire[0].instant, kT0 + kMinute);
  EXPECT_EQ(plan.fire[0].number, 3u);
}

TEST_F(Planner, AMissedCountStopsAtItsCap) {
  ASSERT_TRUE(Spec::Every(1s, kT0, 1s, &spec_).ok());
  state_.last_instant = kT0;
  const Plan plan = Due(kT0 + 2 * 86400 * kSecond);
  ASSERT_EQ(plan.fire.size(), 1u);
  EXPECT_EQ(plan.fire[0].instant, kT0 + 2 * 86400 * kSecond);
  EXPECT_EQ(plan.fire[0].missed, 99'999u);
}

TEST(PlannerCron, OneRunThroughASpringForwardGap) {
  Spec spec;
  ASSERT_TRUE(Spec::Cron("*/30 * * * *", "Europe/Berlin", &spec).ok());
  Policies p;
  State s;
  // 2026-03-29T00:00:00Z, an hour before Berlin's clocks spring forward.
  constexpr WallNanos kStart = 1'774'742'400 * kSecond;
  s.last_instant = kStart;
  std::vector<WallNanos> fired;
  std::optional<WallNanos> wake = NextInstant(spec, p, s, kStart);
  for (int i = 0; i < 4 && wake; ++i) {
    const Plan plan = PlanDue(spec, p, &s, *wake, false);
    for (const schedule::Run& r : plan.fire) fired.push_back(r.instant);
    wake = plan.wake;
  }
  // 00:30, 01:00 (02:00, 02:30 and 03:00 local), 01:30, 02:00 UTC.
  EXPECT_EQ(fired, (std::vector<WallNanos>{
                       kStart + 30 * kMinute, kStart + 60 * kMinute,
                       kStart + 90 * kMinute, kStart + 120 * kMinute}));
}

// A spec's memo answers what the spec would: the same question from another
// schedule (its bounds and state moved `from` alike) gets the memo's answer,
// and a new question is computed.
TEST(PlannerCron, AMemoAnswersAsTheSpecWould) {
  Spec spec;
  ASSERT_TRUE(Spec::Cron("0 9 * * 1-5", "Europe/Berlin", &spec).ok());
  NextMemo memo;
  for (int i = 0; i < 200; ++i) {
    Policies p;
    State s;
    // Ten schedules created together, then some with their own starts.
    s.last_instant = kT0 + (i % 10 == 9 ? i * 7 * kMinute : 0);
    if (i % 3 == 0) p.start = kT0 + (i % 4) * 86400 * kSecond;
    if (i % 5 == 0) s.paused = true;
    EXPECT_EQ(NextInstant(spec, p, s, s.last_instant, &memo),
              NextInstant(spec, p, s, s.last_instant))
        << i;
  }
  // A memo of another question is not taken for this one.
  memo = NextMemo{kT0, kT0 + 1};
  State s;
  s.last_instant = kT0 + kSecond;
  EXPECT_EQ(NextInstant(spec, Policies{}, s, s.last_instant, &memo),
            NextInstant(spec, Policies{}, s, s.last_instant));
  // One asked before is: the memo is what answers it.
  memo = NextMemo{kT0 + kSecond, kT0 + 5};
  EXPECT_EQ(NextInstant(spec, Policies{}, s, s.last_instant, &memo), kT0 + 5);
}

}  // namespace
}  // namespace delayd::schedule
