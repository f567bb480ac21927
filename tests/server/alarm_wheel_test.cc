// AlarmWheel: one timer armed for the earliest deadline, and a pass that
// arms it once for whatever it scheduled.
#include "server/core/alarm_wheel.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/common/fake_clock.h"

namespace delayd {
namespace {

using std::chrono::milliseconds;

class AlarmWheelTest : public ::testing::Test {
 protected:
  AlarmWheel::Time Now() const { return wheel_.Now(); }
  wheel::TimingWheel::Handle At(AlarmWheel::Time t, std::uint64_t cookie) {
    const auto h = wheel_.wheel().Schedule(t, cookie);
    wheel_.Scheduled(h);
    return h;
  }

  testing::FakeClock clock_;
  asio::io_context io_;
  std::vector<AlarmWheel::Time> alarms_;
  AlarmWheel wheel_{io_.get_executor(),
                    io_.get_executor(),
                    clock_,
                    milliseconds(1),
                    clock_.Steady(),
                    [this](AlarmWheel::Time at) { alarms_.push_back(at); }};
  std::vector<AlarmWheel::Expired> due_;
};

TEST_F(AlarmWheelTest, ArmsOnlyForAnEarlierDeadline) {
  At(Now() + milliseconds(50), 1);
  EXPECT_EQ(wheel_.arms(), 1u);
  At(Now() + milliseconds(80), 2);  // later: the armed wake-up stands
  EXPECT_EQ(wheel_.arms(), 1u);
  At(Now() + milliseconds(20), 3);  // earlier: armed again
  EXPECT_EQ(wheel_.arms(), 2u);
}

TEST_F(AlarmWheelTest, APassArmsOnceForWhatItScheduled) {
  At(Now() + milliseconds(10), 1);
  ASSERT_EQ(wheel_.arms(), 1u);
  clock_.Advance(milliseconds(10));
  wheel_.TakeDue(&due_);
  ASSERT_EQ(due_.size(), 1u);
  // In the pass: timers due now and later arm nothing...
  At(Now(), 2);
  At(Now() + milliseconds(30), 3);
  EXPECT_EQ(wheel_.arms(), 1u);
  // ...a second take finds the one due now...
  wheel_.TakeDue(&due_);
  ASSERT_EQ(due_.size(), 1u);
  EXPECT_EQ(due_[0].cookie, 2u);
  // ...and the end of the pass arms once, for the earliest left.
  wheel_.Rearm();
  EXPECT_EQ(wheel_.arms(), 2u);
  // Out of the pass, an earlier deadline arms again.
  At(Now() + milliseconds(5), 4);
  EXPECT_EQ(wheel_.arms(), 3u);
}

TEST_F(AlarmWheelTest, AnEmptyPassStillEndsAndArmsForTheNext) {
  wheel_.TakeDue(&due_);
  EXPECT_TRUE(due_.empty());
  wheel_.Rearm();
  At(Now() + milliseconds(5), 1);
  EXPECT_EQ(wheel_.arms(), 1u);
}

// Timers a few microseconds apart, as in a burst: the end of a pass arms
// for kCoalesce after it, not for the next one's microsecond, and the pass
// then takes every timer due by then, none before its time.
TEST(AlarmWheelCoalesce, APassArmsNoSoonerThanTheCoalescingWindow) {
  using std::chrono::microseconds;
  testing::FakeClock clock;
  asio::io_context io;
  AlarmWheel wheel(io.get_executor(), io.get_executor(), clock, microseconds(1),
                   clock.Steady(), [](AlarmWheel::Time) {});
  const AlarmWheel::Time t0 = wheel.Now();
  for (std::uint64_t i = 1; i <= 30; ++i) {
    wheel.Scheduled(wheel.wheel().Schedule(t0 + microseconds(10 * i), i));
  }
  // Outside a pass: armed for the first timer's exact time.
  ASSERT_EQ(wheel.armed(), t0 + microseconds(10));
  std::vector<AlarmWheel::Expired> due;
  std::uint64_t taken = 0;
  AlarmWheel::Time last_pass{};
  for (int pass = 0; taken < 30; ++pass) {
    ASSERT_LT(pass, 10);
    ASSERT_TRUE(wheel.armed());
    // The wake-up comes when armed: the pass takes what is due by then.
    clock.Advance(*wheel.armed() - wheel.Now());
    if (pass > 0) {
      EXPECT_GE(wheel.Now() - last_pass, AlarmWheel::kCoalesce);
    }
    last_pass = wheel.Now();
    ASSERT_TRUE(wheel.Alarmed(*wheel.armed()));
    wheel.TakeDue(&due);
    for (const auto& e : due) {
      EXPECT_LE(t0 + microseconds(10 * e.cookie), wheel.Now()) << "early";
      EXPECT_EQ(e.cookie, ++taken) << "out of order";
    }
    wheel.Rearm();
  }
  // 300 µs of timers in passes kCoalesce apart: 1 + 300 µs / kCoalesce
  // wake-ups, not 30.
  EXPECT_LE(wheel.arms(), static_cast<std::uint64_t>(
                              1 + microseconds(300) / AlarmWheel::kCoalesce));
  // A timer further out than the window is armed for its exact time.
  wheel.Scheduled(wheel.wheel().Schedule(wheel.Now() + microseconds(500), 99));
  wheel.TakeDue(&due);
  wheel.Rearm();
  EXPECT_EQ(wheel.armed(), wheel.Now() + microseconds(500));
}

}  // namespace
}  // namespace delayd
