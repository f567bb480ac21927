#include "wheel/timing_wheel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

namespace delayd::wheel {
namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using Time = TimingWheel::Time;

constexpr Time kTick = milliseconds(1);

// Records every visit: which cookie fired, at which `now`.
struct Recorder {
  struct Fire {
    std::uint32_t cookie;
    Time now;
    Time due;
  };
  std::vector<Fire> fires;

  std::size_t AdvanceTo(TimingWheel& wheel, Time now) {
    return wheel.Advance(now, [&](const TimingWheel::Expired& e) {
      fires.push_back({e.cookie, now, e.due});
    });
  }
  std::vector<std::uint32_t> Cookies() const {
    std::vector<std::uint32_t> out;
    for (const auto& f : fires) out.push_back(f.cookie);
    return out;
  }
};

TEST(TimingWheel, EmptyHasNoDeadline) {
  TimingWheel wheel(kTick);
  EXPECT_EQ(wheel.NextDeadline(), std::nullopt);
  EXPECT_EQ(wheel.size(), 0u);
  Recorder r;
  EXPECT_EQ(r.AdvanceTo(wheel, hours(1)), 0u);
  EXPECT_EQ(wheel.NextDeadline(), std::nullopt);
}

TEST(TimingWheel, FiresAtDeadlineNeverBefore) {
  TimingWheel wheel(kTick);
  wheel.Schedule(milliseconds(5), 7);
  Recorder r;
  r.AdvanceTo(wheel, milliseconds(5) - nanoseconds(1));
  EXPECT_TRUE(r.fires.empty());
  r.AdvanceTo(wheel, milliseconds(5));
  ASSERT_EQ(r.fires.size(), 1u);
  EXPECT_EQ(r.fires[0].cookie, 7u);
  EXPECT_EQ(r.fires[0].due, milliseconds(5));
  EXPECT_TRUE(wheel.empty());
}

TEST(TimingWheel, DeadlineIsRoundedUpToTheTick) {
  TimingWheel wheel(kTick);
  wheel.Schedule(microseconds(5300), 1);
  EXPECT_EQ(wheel.NextDeadline(), milliseconds(6));
  Recorder r;
  r.AdvanceTo(wheel, microseconds(5999));
  EXPECT_TRUE(r.fires.empty());
  r.AdvanceTo(wheel, milliseconds(6));
  EXPECT_EQ(r.Cookies(), std::vector<std::uint32_t>{1});
}

// The last tick a wheel of tick length `t` ns may use: kMaxTick, or the last
// one whose time fits in a Time.
std::uint64_t LastTick(std::int64_t t) {
  return std::min<std::uint64_t>(TimingWheel::kMaxTick,
                                 static_cast<std::uint64_t>(INT64_MAX / t));
}

// Schedules a timer at `d` ns (d > 0) and checks that it is due at d rounded
// up to the tick `t`, or at the last tick if that is sooner.
void ExpectDueRoundedUp(TimingWheel& wheel, std::int64_t t, std::int64_t d) {
  const std::uint64_t want =
      std::min((static_cast<std::uint64_t>(d) - 1) / t + 1, LastTick(t));
  const auto h = wheel.Schedule(nanoseconds(d), 0);
  ASSERT_EQ(wheel.Due(h), nanoseconds(t) * want)
      << "tick " << t << " ns, deadline " << d << " ns";
  wheel.Cancel(h);
}

// Rounding is exact for every tick length and magnitude (the division by the
// tick is a multiply by a precomputed constant and a shift), and a deadline
// too far for its tick's time to fit in a Time is clamped, never overflows.
TEST(TimingWheel, RoundingIsExactAtEveryMagnitude) {
  const std::int64_t ticks[] = {
      1, 3, 7, 1000, 999'983, 1'000'000, 86'400'000'000'000};
  for (const std::int64_t t : ticks) {
    TimingWheel wheel{nanoseconds(t)};
    std::vector<std::int64_t> deadlines = {1, t - 1, t, t + 1, 2 * t - 1};
    for (std::int64_t d = 1; d > 0 && d < INT64_MAX / 3; d *= 3) {
      deadlines.push_back(d);
      deadlines.push_back(d + 1);
      deadlines.push_back(d * 2 - 1);
    }
    deadlines.push_back(INT64_MAX - 1);
    deadlines.push_back(INT64_MAX);
    for (const std::int64_t d : deadlines) {
      if (d > 0) ExpectDueRoundedUp(wheel, t, d);
    }
  }
}

// The division by the tick is a multiply by a precomputed constant: check it
// against exact 128-bit arithmetic for tick lengths of every size (powers of
// two and their neighbours, where the constant is an edge case, and random
// ones) and deadlines at and around multiples of the tick, both in Schedule
// (rounded up) and in Advance (rounded down).
TEST(TimingWheel, RoundingIsExactForRandomTicksAndTimes) {
  std::mt19937_64 rng(20261122);
  std::vector<std::int64_t> ticks;
  for (int bits = 0; bits < 63; ++bits) {
    const std::int64_t p = std::int64_t{1} << bits;
    ticks.push_back(p);
    if (p > 1) ticks.push_back(p - 1);
    if (bits < 62) ticks.push_back(p + 1);
  }
  for (int k = 0; k < 100; ++k) {
    ticks.push_back(static_cast<std::int64_t>(rng() >> (1 + rng() % 63)) | 1);
  }
  for (const std::int64_t t : ticks) {
    std::vector<std::int64_t> times;
    for (int k = 0; k < 200; ++k) {
      const std::uint64_t r = rng();
      switch (k % 4) {
        case 0:  // Anywhere.
          times.push_back(static_cast<std::int64_t>(r >> 1));
          break;
        case 1: {  // A multiple of the tick, or one either side of it.
          const std::uint64_t m =
              r % (static_cast<std::uint64_t>(INT64_MAX / t) + 1);
          // v <= INT64_MAX + 2: unsigned, so nothing overflows.
          const std::uint64_t v = m * static_cast<std::uint64_t>(t) + rng() % 3;
          times.push_back(static_cast<std::int64_t>(
              std::min<std::uint64_t>(v == 0 ? 0 : v - 1, INT64_MAX)));
          break;
        }
        case 2:  // Within a few ticks of 0.
          times.push_back(static_cast<std::int64_t>(
              r % (static_cast<std::uint64_t>(t) * 4 + 1)));
          break;
        default:  // Near the end of time.
          times.push_back(INT64_MAX - static_cast<std::int64_t>(r % 1000));
      }
    }
    TimingWheel wheel{nanoseconds(t)};
    for (const std::int64_t d : times) {
      if (d > 0) ExpectDueRoundedUp(wheel, t, d);
    }
    std::sort(times.begin(), times.end());
    for (const std::int64_t now : times) {
      if (now < 0) continue;
      wheel.Advance(nanoseconds(now), [](const TimingWheel::Expired&) {});
      const std::uint64_t want =
          std::min(static_cast<std::uint64_t>(now) / t, LastTick(t));
      ASSERT_EQ(wheel.now(), nanoseconds(t) * want)
          << "tick " << t << " ns, now " << now << " ns";
    }
  }
}

TEST(TimingWheel, PastDeadlineIsDueAtOnce) {
  TimingWheel wheel(kTick);
  Recorder r;
  r.AdvanceTo(wheel, milliseconds(100));
  wheel.Schedule(milliseconds(40), 1);
  wheel.Schedule(milliseconds(100), 2);
  EXPECT_EQ(wheel.NextDeadline(), milliseconds(100));
  r.AdvanceTo(wheel, milliseconds(100));
  EXPECT_EQ(r.Cookies(), (std::vector<std::uint32_t>{1, 2}));
}

TEST(TimingWheel, FarTimersFireExactlyAtTheirTick) {
  // An hour, a year and ten years away, reached by stepping from one
  // NextDeadline() to the next, as an owner does.
  TimingWheel wheel(kTick);
  const Time year = hours(24 * 365);
  const std::vector<Time> deadlines = {hours(1) + milliseconds(17),
                                       year + milliseconds(3),
                                       10 * year + milliseconds(1)};
  for (std::uint32_t i = 0; i < deadlines.size(); ++i) {
    wheel.Schedule(deadlines[i], i);
  }
  Recorder r;
  for (std::uint32_t i = 0; i < deadlines.size(); ++i) {
    ASSERT_EQ(wheel.NextDeadline(), deadlines[i]);
    EXPECT_EQ(r.AdvanceTo(wheel, deadlines[i] - kTick), 0u)
        << "timer " << i << " fired a tick early";
    EXPECT_EQ(wheel.NextDeadline(), deadlines[i]);
    EXPECT_EQ(r.AdvanceTo(wheel, deadlines[i]), 1u);
    EXPECT_EQ(r.fires.back().cookie, i);
  }
  EXPECT_EQ(wheel.NextDeadline(), std::nullopt);
}

TEST(TimingWheel, NextDeadlineIsExactAfterEveryChange) {
  TimingWheel wheel(kTick);
  const auto a = wheel.Schedule(milliseconds(70000), 1);
  const auto b = wheel.Schedule(milliseconds(65000), 2);
  EXPECT_EQ(wheel.NextDeadline(), milliseconds(65000));
  wheel.Schedule(milliseconds(90000), 3);
  EXPECT_EQ(wheel.NextDeadline(), milliseconds(65000));
  ASSERT_TRUE(wheel.Cancel(b));
  EXPECT_EQ(wheel.NextDeadline(), milliseconds(70000));
  ASSERT_TRUE(wheel.Reschedule(a, milliseconds(80000)));
  EXPECT_EQ(wheel.NextDeadline(), milliseconds(80000));
  // An owner sleeping until NextDeadline() finds a timer due every time.
  Recorder r;
  while (auto next = wheel.NextDeadline()) {
    EXPECT_EQ(r.AdvanceTo(wheel, *next), 1u);
  }
  EXPECT_EQ(r.Cookies(), (std::vector<std::uint32_t>{1, 3}));
}

TEST(TimingWheel, LargeJumpVisitsInDeadlineOrderTiesInScheduleOrder) {
  TimingWheel wheel(kTick);
  // Scheduled out of order, across several levels, with ties.
  wheel.Schedule(hours(2), 1);
  wheel.Schedule(milliseconds(3), 2);
  wheel.Schedule(hours(2), 3);
  wheel.Schedule(milliseconds(70), 4);
  wheel.Schedule(milliseconds(3), 5);
  wheel.Schedule(milliseconds(4100), 6);
  wheel.Schedule(milliseconds(70), 7);
  Recorder r;
  EXPECT_EQ(r.AdvanceTo(wheel, hours(3)), 7u);
  EXPECT_EQ(r.Cookies(), (std::vector<std::uint32_t>{2, 5, 4, 7, 6, 1, 3}));
  for (const auto& f : r.fires) EXPECT_LE(f.due, f.now);
}

TEST(TimingWheel, CancelReportsWhetherPending) {
  TimingWheel wheel(kTick);
  const auto h = wheel.Schedule(milliseconds(10), 1);
  EXPECT_TRUE(wheel.IsPending(h));
  EXPECT_TRUE(wheel.Cancel(h));
  EXPECT_FALSE(wheel.IsPending(h));
  EXPECT_FALSE(wheel.Cancel(h));
  EXPECT_FALSE(wheel.Cancel(TimingWheel::kNoHandle));
  EXPECT_FALSE(wheel.Cancel(0xFFFFFFFF00001234ull));
  // The node is reused by the next timer; the stale handle stays stale.
  const auto h2 = wheel.Schedule(milliseconds(10), 2);
  EXPECT_NE(h, h2);
  EXPECT_FALSE(wheel.Cancel(h));
  EXPECT_FALSE(wheel.Reschedule(h, milliseconds(1)));
  Recorder r;
  r.AdvanceTo(wheel, milliseconds(10));
  EXPECT_EQ(r.Cookies(), std::vector<std::uint32_t>{2});
  EXPECT_FALSE(wheel.Cancel(h2)) << "a fired timer is not pending";
}

// Reschedules a timer set at `first` to `second` after advancing to `now`, and
// checks it fires exactly once, at max(second rounded up to the tick, now).
void ExpectMovedFiresOnceAt(Time first, Time now, Time second) {
  SCOPED_TRACE(testing::Message()
               << "first=" << first.count() << " now=" << now.count()
               << " second=" << second.count());
  TimingWheel wheel(kTick);
  Recorder r;
  const auto h = wheel.Schedule(first, 1);
  r.AdvanceTo(wheel, now);
  ASSERT_TRUE(r.fires.empty());
  ASSERT_TRUE(wheel.Reschedule(h, second));
  const Time expected =
      std::max((second + kTick - nanoseconds(1)) / kTick * kTick, now);
  EXPECT_EQ(wheel.NextDeadline(), expected);
  if (expected > now) {
    EXPECT_EQ(r.AdvanceTo(wheel, expected - kTick), 0u);
  }
  EXPECT_EQ(r.AdvanceTo(wheel, expected), 1u);
  EXPECT_EQ(r.AdvanceTo(wheel, expected + hours(24 * 365)), 0u);
  EXPECT_TRUE(wheel.empty());
}

TEST(TimingWheel, RescheduledTimerFiresOnceAtItsNewDeadline) {
  const Time ms = milliseconds(1);
  // Earlier, later, same slot.
  ExpectMovedFiresOnceAt(100 * ms, 0 * ms, 30 * ms);
  ExpectMovedFiresOnceAt(30 * ms, 0 * ms, 100 * ms);
  ExpectMovedFiresOnceAt(30 * ms, 0 * ms, 31 * ms);
  ExpectMovedFiresOnceAt(hours(5), 0 * ms, hours(5) + ms);
  // Across the wrap point of each level: the wheel's time sits just below a
  // boundary of 64^L ticks and the timer moves across it, both ways.
  for (int level = 1; level <= 7; ++level) {
    const std::int64_t span = std::int64_t{1} << (6 * level);
    const Time boundary = span * ms;
    ExpectMovedFiresOnceAt(boundary + 5 * ms, boundary - 3 * ms, boundary - ms);
    ExpectMovedFiresOnceAt(boundary - ms, boundary - 3 * ms, boundary + 5 * ms);
    ExpectMovedFiresOnceAt(boundary + span * ms, boundary - 3 * ms,
                           boundary + 2 * ms);
  }
  // Into the past, and to under one tick from now.
  ExpectMovedFiresOnceAt(100 * ms, 50 * ms, 10 * ms);
  ExpectMovedFiresOnceAt(100 * ms, 50 * ms, 50 * ms + microseconds(300));
}

TEST(TimingWheel, CancelAfterRescheduleNeverFires) {
  TimingWheel wheel(kTick);
  const auto h = wheel.Schedule(milliseconds(100), 1);
  ASSERT_TRUE(wheel.Reschedule(h, milliseconds(5)));
  ASSERT_TRUE(wheel.Cancel(h));
  Recorder r;
  EXPECT_EQ(r.AdvanceTo(wheel, hours(1)), 0u);
  EXPECT_EQ(wheel.NextDeadline(), std::nullopt);
}

TEST(TimingWheel, VisitorMayChangeTimersDueInTheSameAdvance) {
  TimingWheel wheel(kTick);
  const auto a = wheel.Schedule(milliseconds(10), 1);
  const auto b = wheel.Schedule(milliseconds(20), 2);
  const auto c = wheel.Schedule(milliseconds(30), 3);
  std::vector<std::uint32_t> seen;
  TimingWheel::Handle late = TimingWheel::kNoHandle;
  wheel.Advance(milliseconds(40), [&](const TimingWheel::Expired& e) {
    seen.push_back(e.cookie);
    if (e.cookie == 1) {
      EXPECT_EQ(e.handle, a);
      EXPECT_FALSE(wheel.Cancel(a)) << "already removed before its visit";
      EXPECT_TRUE(wheel.Cancel(b));                        // Due, not visited.
      EXPECT_TRUE(wheel.Reschedule(c, milliseconds(50)));  // Out of range.
      wheel.Schedule(milliseconds(0), 4);          // Past: due at this tick.
      wheel.Schedule(milliseconds(35), 5);         // Due later in this Advance.
      late = wheel.Schedule(milliseconds(45), 6);  // Due after it.
    }
  });
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{1, 4, 5}));
  EXPECT_EQ(wheel.size(), 2u);
  EXPECT_TRUE(wheel.IsPending(late));
  EXPECT_EQ(wheel.NextDeadline(), milliseconds(45));
}

TEST(TimingWheel, VisitorSchedulingForNowIsVisitedAfterTheTicksOthers) {
  TimingWheel wheel(kTick);
  wheel.Schedule(milliseconds(10), 1);
  wheel.Schedule(milliseconds(10), 2);
  std::vector<std::uint32_t> seen;
  wheel.Advance(milliseconds(10), [&](const TimingWheel::Expired& e) {
    seen.push_back(e.cookie);
    if (e.cookie == 1) wheel.Schedule(milliseconds(10), 3);
  });
  EXPECT_EQ(seen, (std::vector<std::uint32_t>{1, 2, 3}));
}

TEST(TimingWheel, TimeNeverGoesBackwards) {
  TimingWheel wheel(kTick);
  Recorder r;
  r.AdvanceTo(wheel, milliseconds(500));
  wheel.Schedule(milliseconds(600), 1);
  EXPECT_EQ(r.AdvanceTo(wheel, milliseconds(100)), 0u);
  EXPECT_EQ(wheel.now(), milliseconds(500));
  EXPECT_EQ(r.AdvanceTo(wheel, milliseconds(600)), 1u);
}

TEST(TimingWheel, DeadlinesBeyondTheRangeAreClamped) {
  TimingWheel wheel(nanoseconds(1));
  wheel.Schedule(Time::max(), 1);
  EXPECT_EQ(wheel.NextDeadline(), nanoseconds(TimingWheel::kMaxTick));
}

TEST(TimingWheel, NoGrowthOnceWarm) {
  TimingWheel wheel(kTick);
  wheel.Reserve(10000);
  const std::size_t warm = wheel.MemoryUsage();
  std::vector<TimingWheel::Handle> handles;
  Recorder r;
  for (int round = 0; round < 5; ++round) {
    for (std::uint32_t i = 0; i < 10000; ++i) {
      handles.push_back(
          wheel.Schedule(milliseconds(round * 1000 + i % 997), i));
    }
    for (std::size_t i = 0; i < handles.size(); i += 3) {
      wheel.Reschedule(handles[i], milliseconds(round * 1000 + 999));
    }
    for (std::size_t i = 1; i < handles.size(); i += 3)
      wheel.Cancel(handles[i]);
    r.AdvanceTo(wheel, milliseconds(round * 1000 + 1000));
    EXPECT_TRUE(wheel.empty());
    handles.clear();
  }
  EXPECT_EQ(wheel.MemoryUsage(), warm);
}

TEST(TimingWheel, AtMost32BytesPerPendingTimer) {
  constexpr std::uint32_t kTimers = 1'000'000;
  TimingWheel wheel(kTick);
  std::uint64_t x = 88172645463325252ull;  // xorshift: deadlines in [1 s, 1 h].
  for (std::uint32_t i = 0; i < kTimers; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    wheel.Schedule(milliseconds(1000 + x % 3'599'000), i);
  }
  const double per_timer =
      static_cast<double>(wheel.MemoryUsage()) / static_cast<double>(kTimers);
  RecordProperty("bytes_per_timer", std::to_string(per_timer));
  EXPECT_LE(per_timer, 32.0);
}

}  // namespace
}  // namespace delayd::wheel
