// Randomized model test: millions of schedule / cancel / reschedule / advance
// steps on the wheel and on a plain reference (an ordered multimap), checked
// in lock step. Every visit must be the reference's next due timer, at exactly
// its tick, in order; nothing may be lost or visited twice; NextDeadline() must
// equal the reference's earliest deadline after every step.
//
// DELAYD_MODEL_STEPS overrides the number of steps per seed (the default keeps
// the test run short; raise it for a long soak by hand).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "wheel/timing_wheel.h"

namespace delayd::wheel {
namespace {

using Time = TimingWheel::Time;
using Handle = TimingWheel::Handle;

// The reference: effective deadline tick -> handle. std::multimap keeps equal
// keys in insertion order, which is the wheel's tie order.
class Reference {
 public:
  explicit Reference(std::uint64_t tick_ns) : tick_ns_(tick_ns) {}

  std::uint64_t CeilTick(std::int64_t ns) const {
    if (ns <= 0) return 0;
    return (static_cast<std::uint64_t>(ns) + tick_ns_ - 1) / tick_ns_;
  }
  std::uint64_t FloorTick(std::int64_t ns) const {
    return ns <= 0 ? 0 : static_cast<std::uint64_t>(ns) / tick_ns_;
  }

  void Schedule(Handle h, std::int64_t deadline_ns) {
    where_[h] = due_.emplace(std::max(CeilTick(deadline_ns), elapsed_), h);
  }
  bool Cancel(Handle h) {
    auto it = where_.find(h);
    if (it == where_.end()) return false;
    due_.erase(it->second);
    where_.erase(it);
    return true;
  }
  bool Reschedule(Handle h, std::int64_t deadline_ns) {
    if (!Cancel(h)) return false;
    Schedule(h, deadline_ns);
    return true;
  }
  bool Pending(Handle h) const { return where_.contains(h); }
  std::size_t size() const { return due_.size(); }

  // Pops the earliest timer and moves time to its tick, as the wheel does
  // while it visits.
  std::pair<std::uint64_t, Handle> PopFirst() {
    auto it = due_.begin();
    auto result = *it;
    elapsed_ = it->first;
    where_.erase(it->second);
    due_.erase(it);
    return result;
  }
  std::optional<std::uint64_t> FirstTick() const {
    if (due_.empty()) return std::nullopt;
    return due_.begin()->first;
  }
  void FinishAdvance(std::int64_t now_ns) {
    elapsed_ = std::max(elapsed_, FloorTick(now_ns));
  }
  std::uint64_t elapsed() const { return elapsed_; }

 private:
  const std::uint64_t tick_ns_;
  std::uint64_t elapsed_ = 0;
  std::multimap<std::uint64_t, Handle> due_;
  std::unordered_map<Handle, std::multimap<std::uint64_t, Handle>::iterator>
      where_;
};

// Times stay below this, far from the end of the nanosecond range.
constexpr std::int64_t kTimeLimitNs =
    4'000'000'000'000'000'000;  // A whole number of ticks.

struct ModelParam {
  std::uint64_t seed;
  std::int64_t tick_ns;
};

class TimingWheelModel : public testing::TestWithParam<ModelParam> {
 protected:
  TimingWheelModel()
      : tick_(GetParam().tick_ns),
        wheel_(Time(GetParam().tick_ns)),
        ref_(static_cast<std::uint64_t>(GetParam().tick_ns)),
        rng_(GetParam().seed) {}

  std::uint64_t Uniform(std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng_);
  }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  // The wheel's current time in ns (its tick start).
  std::int64_t NowNs() const {
    return static_cast<std::int64_t>(ref_.elapsed()) * tick_;
  }

  // A deadline drawn from tick-scale, past, year-scale and wrap-point
  // distributions, and sometimes exactly another timer's (ties).
  std::int64_t RandomDeadline() {
    const std::int64_t now = NowNs();
    const std::uint64_t pick = Uniform(0, 99);
    std::int64_t ticks;  // Relative to now, in ticks.
    if (pick < 35) {
      ticks = static_cast<std::int64_t>(Uniform(0, 130));
    } else if (pick < 45) {
      ticks = -static_cast<std::int64_t>(Uniform(0, 50));
    } else if (pick < 65) {
      ticks = static_cast<std::int64_t>(Uniform(0, 1 << 20));
    } else if (pick < 75) {
      // Year-scale: up to 2^38 ticks (8.7 years at 1 ms), kept within about
      // a year of nanoseconds so that time does not run out.
      const std::uint64_t far = std::min<std::uint64_t>(
          std::uint64_t{1} << 38,
          (std::uint64_t{1} << 55) / static_cast<std::uint64_t>(tick_));
      ticks = static_cast<std::int64_t>(Uniform(0, far));
    } else if (pick < 90) {
      // Near the next boundary of a random level (as high as fits in the
      // nanosecond range at this tick length).
      const int max_level = std::min(
          8, (49 - static_cast<int>(
                       std::bit_width(static_cast<std::uint64_t>(tick_)))) /
                 6);
      const int shift = 6 * static_cast<int>(Uniform(1, max_level));
      const std::uint64_t e = ref_.elapsed();
      const std::uint64_t boundary = ((e >> shift) + 1) << shift;
      ticks = static_cast<std::int64_t>(boundary - e) +
              static_cast<std::int64_t>(Uniform(0, 6)) - 3;
    } else {
      if (!handles_.empty()) {
        // A tie with a remembered deadline.
        return deadlines_[Uniform(0, deadlines_.size() - 1)];
      }
      ticks = 1;
    }
    // Sub-tick offsets exercise rounding up when ticks are coarser than 1 ns.
    const std::int64_t sub = static_cast<std::int64_t>(
        Uniform(0, static_cast<std::uint64_t>(tick_ - 1)));
    return std::min(now + ticks * tick_ - sub, kTimeLimitNs);
  }

  Handle RandomHandle() {
    const std::size_t k = Uniform(0, handles_.size() - 1);
    return handles_[k];
  }

  void Schedule() {
    const std::int64_t d = RandomDeadline();
    const Handle h = wheel_.Schedule(Time(d), next_cookie_++);
    ASSERT_FALSE(ref_.Pending(h)) << "handle reused while pending";
    ref_.Schedule(h, d);
    handles_.push_back(h);
    deadlines_.push_back(d);
    if (deadlines_.size() > 256) deadlines_.erase(deadlines_.begin());
  }

  void Cancel() {
    if (handles_.empty()) return;
    const Handle h = RandomHandle();
    ASSERT_EQ(wheel_.Cancel(h), ref_.Cancel(h));
    ForgetStale();
  }

  void Reschedule() {
    if (handles_.empty()) return;
    const Handle h = RandomHandle();
    const std::int64_t d = RandomDeadline();
    ASSERT_EQ(wheel_.Reschedule(h, Time(d)), ref_.Reschedule(h, d));
  }

  // Drops handles that are no longer pending (after checking the wheel
  // agrees), so the handle list stays small. Amortized: runs when at least
  // half the list is stale.
  void ForgetStale() {
    if (handles_.size() < 2 * ref_.size() + 64) return;
    for (std::size_t k = 0; k < handles_.size();) {
      if (!ref_.Pending(handles_[k])) {
        ASSERT_FALSE(wheel_.IsPending(handles_[k]));
        handles_[k] = handles_.back();
        handles_.pop_back();
      } else {
        ++k;
      }
    }
  }

  // Advances by a random amount, or (with `to_next`) to NextDeadline().
  static constexpr std::uint64_t kToNext = 9500;
  void Advance(bool to_next = false) {
    const std::uint64_t pick = to_next ? kToNext : Uniform(0, 9999);
    std::int64_t now = NowNs();
    if (pick < 7000) {
      now += static_cast<std::int64_t>(Uniform(0, 64)) * tick_;
    } else if (pick < 9000) {
      now += static_cast<std::int64_t>(Uniform(0, 4096)) * tick_;
    } else if (pick < 9900 || pick == kToNext) {
      if (auto next = wheel_.NextDeadline()) now = std::max(now, next->count());
    } else if (pick < 9998) {
      now += static_cast<std::int64_t>(Uniform(0, 1 << 20)) * tick_;
    } else {
      // A stalled process: a jump across many levels.
      now += static_cast<std::int64_t>(Uniform(0, 1 << 30)) * tick_;
    }
    now += static_cast<std::int64_t>(
        Uniform(0, static_cast<std::uint64_t>(tick_ - 1)));
    now = std::min(now, kTimeLimitNs);
    const std::uint64_t now_tick = ref_.FloorTick(now);

    bool ok = true;
    wheel_.Advance(Time(now), [&](const TimingWheel::Expired& e) {
      if (!ok) return;
      auto first = ref_.FirstTick();
      if (!first || *first > now_tick) {
        ADD_FAILURE() << "visited handle " << e.handle << " due "
                      << e.due.count() << " at now tick " << now_tick
                      << "; reference's first is "
                      << (first ? std::to_string(*first) : "none");
        ok = false;
        return;
      }
      const auto [tick, handle] = ref_.PopFirst();
      if (handle != e.handle ||
          e.due.count() != static_cast<std::int64_t>(tick) * tick_) {
        ADD_FAILURE() << "visited " << e.handle << " due " << e.due.count()
                      << ", expected " << handle << " due " << tick * tick_;
        ok = false;
        return;
      }
      ++visits_;
      // The visitor changes timers too, sometimes ones due in this Advance
      // (but schedules nothing new once the test is draining).
      if (!draining_ && Chance(0.05)) Schedule();
      if (Chance(0.03)) Cancel();
      if (Chance(0.03)) Reschedule();
    });
    ASSERT_TRUE(ok);
    ref_.FinishAdvance(now);
    auto first = ref_.FirstTick();
    ASSERT_TRUE(!first || *first > now_tick)
        << "timer due at " << *first << " not visited by now " << now_tick;
    ForgetStale();
  }

  void CheckState() {
    ASSERT_EQ(wheel_.size(), ref_.size());
    auto first = ref_.FirstTick();
    auto next = wheel_.NextDeadline();
    ASSERT_EQ(next.has_value(), first.has_value());
    if (first) {
      ASSERT_EQ(next->count(), static_cast<std::int64_t>(*first) * tick_);
    }
  }

  const std::int64_t tick_;
  TimingWheel wheel_;
  Reference ref_;
  std::mt19937_64 rng_;
  std::vector<Handle> handles_;
  std::vector<std::int64_t> deadlines_;
  std::uint32_t next_cookie_ = 0;
  std::uint64_t visits_ = 0;
  bool draining_ = false;
};

std::uint64_t StepsPerSeed() {
  if (const char* s = std::getenv("DELAYD_MODEL_STEPS")) {
    return std::stoull(s);
  }
  return 2'000'000;
}

TEST_P(TimingWheelModel, MatchesReference) {
  const std::uint64_t steps = StepsPerSeed();
  for (std::uint64_t step = 0; step < steps; ++step) {
    const std::uint64_t pick = Uniform(0, 99);
    // Keep the pending set bounded: above 20k timers, mostly advance.
    const bool crowded = wheel_.size() > 20000;
    if (pick < (crowded ? 5 : 50)) {
      Schedule();
    } else if (pick < 55) {
      Cancel();
    } else if (pick < 70) {
      Reschedule();
    } else {
      Advance();
    }
    if (HasFatalFailure()) FAIL() << "at step " << step;
    CheckState();
    if (HasFatalFailure()) FAIL() << "at step " << step;
  }
  // Drain: every remaining timer fires, in order, exactly once.
  draining_ = true;
  while (wheel_.NextDeadline()) {
    Advance(/*to_next=*/true);
    ASSERT_FALSE(HasFatalFailure());
  }
  EXPECT_EQ(ref_.size(), 0u);
  RecordProperty("visits", std::to_string(visits_));
  EXPECT_LT(NowNs(), kTimeLimitNs / 2) << "time ran to the limit";
  EXPECT_GT(visits_, steps / 10) << "the model barely fired anything";
}

INSTANTIATE_TEST_SUITE_P(Seeds, TimingWheelModel,
                         testing::Values(ModelParam{1, 1}, ModelParam{2, 1},
                                         ModelParam{3, 1000},
                                         ModelParam{4, 1'000'000}),
                         [](const testing::TestParamInfo<ModelParam>& info) {
                           return "seed" + std::to_string(info.param.seed) +
                                  "_tick" + std::to_string(info.param.tick_ns) +
                                  "ns";
                         });

}  // namespace
}  // namespace delayd::wheel
