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
  AlarmWheel wheel_{io_.get_executor(), clock_, milliseconds(1),
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

}  // namespace
}  // namespace delayd
