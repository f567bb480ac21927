// Every rule about time, on a fake clock (tests/common/fake_clock.h),
// against a daemon on loopback: ack timeouts and redelivery, the backoff
// schedule with and without jitter, max attempts, ExtendLease, pause and
// resume, the dispatch rate over a window, policy changes reaching waiting
// events, and steps of the wall clock either way and pauses of the
// monotonic one.
//
// Each clock change is acted on before FakeClock returns (in memory: timers
// fired, retries due made ready, deliveries queued), so "not yet" is read
// from Stats at once; what was delivered is then read off the worker's
// stream, with a deadline.
#include "tests/common/fake_clock.h"

#include <gtest/gtest.h>

#include <set>

#include "tests/server/calls.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

class FakeClockTest : public ::testing::Test {
 protected:
  static DelaydServer::Options Options(FakeClock* clock,
                                       std::chrono::milliseconds poll = 0ms) {
    auto o = TestDaemon::DefaultOptions();
    o.scheduler.clock = clock;
    o.scheduler.clock_poll = poll;
    return o;
  }

  void SetUp() override { ASSERT_TRUE(d_.started()); }

  void Set(const std::string& key, std::chrono::milliseconds delay) {
    ASSERT_TRUE(testing::Set(d_.stub(), "jobs", key, delay.count()).ok());
  }
  v1::NamespaceStats Stats() { return NamespaceStats(d_.stub(), "jobs"); }
  void Policy(const v1::Policy& p) {
    v1::SetPolicyRequest req;
    req.set_namespace_("jobs");
    *req.mutable_policy() = p;
    v1::Policy resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d_.stub().SetPolicy(&ctx, req, &resp).ok());
  }
  // Backoff of `initial` × `multiplier` up to `max`.
  static v1::Policy Backoff(std::int64_t initial_ms, double multiplier,
                            std::int64_t max_ms) {
    v1::Policy p;
    *p.mutable_initial_backoff() = Millis(initial_ms);
    p.set_backoff_multiplier(multiplier);
    *p.mutable_max_backoff() = Millis(max_ms);
    return p;
  }
  void Nack(const std::vector<std::uint64_t>& ids) {
    v1::NackRequest req;
    req.set_namespace_("jobs");
    for (auto id : ids) req.add_event_ids(id);
    v1::NackResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d_.stub().Nack(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.nacked(), ids.size());
  }
  void Extend(std::uint64_t id, std::chrono::milliseconds by) {
    v1::ExtendLeaseRequest req;
    req.set_namespace_("jobs");
    req.add_event_ids(id);
    *req.mutable_extension() = Millis(by.count());
    v1::ExtendLeaseResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d_.stub().ExtendLease(&ctx, req, &resp).ok());
  }
  void Ack(const std::vector<std::uint64_t>& ids) {
    ASSERT_TRUE(testing::Ack(d_.stub(), "jobs", ids).ok());
  }
  std::unique_ptr<TestStream> Worker(std::int64_t ack_timeout_ms = 3'600'000,
                                     std::uint32_t max_in_flight = 100) {
    auto w = std::make_unique<TestStream>(
        d_.stub(), TestStream::Worker("jobs", max_in_flight, ack_timeout_ms));
    EXPECT_TRUE(w->WaitRegistered());
    return w;
  }

  FakeClock clock_;
  TestDaemon d_{Options(&clock_)};
};

TEST_F(FakeClockTest, TimerFiresAtItsTimeNeverBefore) {
  auto w = Worker();
  Set("a", 10s);
  clock_.Advance(10s - 1ms);
  EXPECT_EQ(Stats().pending_timers(), 1u);
  clock_.Advance(1ms);
  EXPECT_EQ(Stats().events_delivered(), 1u);
  const auto got = w->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(ToNanos(got[0].fire_time()), FakeClock::kStart + 10'000'000'000);
}

TEST_F(FakeClockTest, AckTimeoutIsAFailureRedeliveredAfterItsBackoff) {
  Policy(Backoff(1000, 2, 600'000));
  auto w = Worker(/*ack_timeout_ms=*/5000);
  Set("a", 1s);
  clock_.Advance(1s);
  ASSERT_EQ(w->WaitFor(1).size(), 1u);
  clock_.Advance(5s - 1ms);
  EXPECT_EQ(Stats().in_flight_events(), 1u);
  clock_.Advance(1ms);  // The ack deadline: attempt 1 failed.
  EXPECT_EQ(Stats().in_flight_events(), 0u);
  EXPECT_EQ(Stats().retrying_events(), 1u);
  clock_.Advance(1s - 1ms);  // Its backoff, less a tick.
  EXPECT_EQ(Stats().events_delivered(), 1u);
  clock_.Advance(1ms);
  EXPECT_EQ(Stats().events_delivered(), 2u);
  const auto got = w->WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].id(), got[0].id());
  EXPECT_EQ(got[1].attempt(), 2u);
  // The second timeout waits the second backoff (2 s).
  clock_.Advance(5s);
  clock_.Advance(2s - 1ms);
  EXPECT_EQ(Stats().events_delivered(), 2u);
  clock_.Advance(1ms);
  EXPECT_EQ(Stats().events_delivered(), 3u);
}

TEST_F(FakeClockTest, BackoffScheduleGrowsToItsMaximum) {
  Policy(Backoff(1000, 2, 4000));
  auto w = Worker();
  Set("a", 1s);
  clock_.Advance(1s);
  ASSERT_EQ(w->WaitFor(1).size(), 1u);
  const std::vector<std::chrono::milliseconds> waits = {1s, 2s, 4s, 4s, 4s};
  for (std::size_t i = 0; i < waits.size(); ++i) {
    const auto got = w->WaitFor(i + 1);
    ASSERT_EQ(got.size(), i + 1);
    EXPECT_EQ(got[i].attempt(), i + 1);
    Nack({got[i].id()});
    clock_.Advance(waits[i] - 1ms);
    EXPECT_EQ(Stats().events_delivered(), i + 1) << "attempt " << i + 1;
    clock_.Advance(1ms);
    EXPECT_EQ(Stats().events_delivered(), i + 2) << "attempt " << i + 1;
  }
}

TEST_F(FakeClockTest, JitteredBackoffStaysWithinItsWindow) {
  // 8 s with jitter 0.5: each wait is in [4 s, 8 s].
  v1::Policy p = Backoff(8000, 1, 8000);
  p.set_backoff_jitter(0.5);
  Policy(p);
  auto w = Worker();
  constexpr int kEvents = 8;
  for (int i = 0; i < kEvents; ++i) Set("k" + std::to_string(i), 1s);
  clock_.Advance(1s);
  const auto first = w->WaitFor(kEvents);
  ASSERT_EQ(first.size(), static_cast<std::size_t>(kEvents));
  std::vector<std::uint64_t> ids;
  for (const auto& e : first) ids.push_back(e.id());
  Nack(ids);
  clock_.Advance(4s - 1ms);
  EXPECT_EQ(Stats().events_delivered(), static_cast<std::uint64_t>(kEvents));
  // Then 10 ms at a time: each comes back in one step, within the window.
  std::set<std::uint64_t> steps;
  std::uint64_t delivered = kEvents;
  for (int step = 1; step <= 401; ++step) {
    clock_.Advance(10ms);
    const std::uint64_t now = Stats().events_delivered();
    if (now > delivered) steps.insert(step);
    delivered = now;
  }
  EXPECT_EQ(delivered, 2u * kEvents);
  // Not all at once: the jitter spread them.
  EXPECT_GT(steps.size(), 1u);
}

TEST_F(FakeClockTest, LastAttemptMakesADeadLetterExactlyOnce) {
  v1::Policy p = Backoff(1000, 1, 1000);
  p.set_max_attempts(3);
  Policy(p);
  auto w = Worker();
  TestStream watcher(d_.stub(), TestStream::Watcher("jobs"));
  ASSERT_TRUE(watcher.WaitRegistered());
  Set("a", 1s);
  clock_.Advance(1s);
  for (std::size_t attempt = 1; attempt <= 3; ++attempt) {
    const auto got = w->WaitFor(attempt);
    ASSERT_EQ(got.size(), attempt);
    Nack({got.back().id()});
    clock_.Advance(1s);
  }
  const auto s = Stats();
  EXPECT_EQ(s.dead_letters(), 1u);
  EXPECT_EQ(s.retrying_events(), 0u);
  EXPECT_EQ(s.events_delivered(), 3u);
  clock_.Advance(24h);
  EXPECT_EQ(Stats().events_delivered(), 3u);
  EXPECT_EQ(Stats().dead_letters(), 1u);
  // The watcher saw the firing and the move, once each.
  const auto seen = watcher.WaitFor(2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].reason(), v1::REASON_DEAD_LETTERED);
  EXPECT_EQ(w->Events().size(), 3u);
}

TEST_F(FakeClockTest, ExtendLeasePostponesTheAckDeadline) {
  auto w = Worker(/*ack_timeout_ms=*/5000);
  Set("a", 1s);
  clock_.Advance(1s);
  const auto got = w->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  clock_.Advance(4s);
  Extend(got[0].id(), 10s);  // The deadline is now + 10 s.
  clock_.Advance(10s - 1ms);
  EXPECT_EQ(Stats().in_flight_events(), 1u);
  clock_.Advance(1ms);
  EXPECT_EQ(Stats().in_flight_events(), 0u);
  EXPECT_EQ(Stats().retrying_events(), 1u);
}

TEST_F(FakeClockTest, PauseHoldsEventsAndResumeDeliversEachOnce) {
  v1::Policy paused;
  paused.set_paused(true);
  Policy(paused);
  auto w = Worker();
  for (int i = 0; i < 10; ++i) Set("k" + std::to_string(i), 1s);
  clock_.Advance(1s);
  clock_.Advance(1h);
  EXPECT_EQ(Stats().ready_events(), 10u);
  EXPECT_EQ(Stats().events_delivered(), 0u);
  Policy(v1::Policy());  // Resume.
  const auto got = w->WaitFor(10);
  ASSERT_EQ(got.size(), 10u);
  std::set<std::uint64_t> ids;
  for (const auto& e : got) ids.insert(e.id());
  EXPECT_EQ(ids.size(), 10u);
  clock_.Advance(1h);
  EXPECT_EQ(Stats().events_delivered(), 10u);
}

TEST_F(FakeClockTest, DispatchRateHoldsOverAWindowAcrossWorkers) {
  v1::Policy p;
  p.set_max_dispatch_rate(10);
  p.set_dispatch_burst(1);
  Policy(p);
  auto w1 = Worker();
  auto w2 = Worker();
  auto w3 = Worker();
  v1::BatchRequest req;
  for (int i = 0; i < 300; ++i) {
    auto* set = req.add_operations()->mutable_set();
    set->set_namespace_("jobs");
    set->set_key("k" + std::to_string(i));
    *set->mutable_delay() = Millis(1000);
  }
  v1::BatchResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d_.stub().Batch(&ctx, req, &resp).ok());
  clock_.Advance(1s);  // All due; one token (the burst).
  EXPECT_EQ(Stats().events_delivered(), 1u);
  // Over 10 s, 10 ms at a time: at most one more per 100 ms, and the rate
  // is reached.
  for (int step = 1; step <= 1000; ++step) {
    clock_.Advance(10ms);
    ASSERT_LE(Stats().events_delivered(), 1u + step / 10) << step;
  }
  EXPECT_EQ(Stats().events_delivered(), 101u);
  // All of them reached the workers.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::size_t got = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    got = w1->Events().size() + w2->Events().size() + w3->Events().size();
    if (got >= 101) break;
    std::this_thread::sleep_for(5ms);  // The pause of a bounded poll.
  }
  EXPECT_EQ(got, 101u);
}

// Workers with room share what a namespace's limits let through evenly:
// two workers that acknowledge at once get half each, under a dispatch
// rate (a burst of tokens, then one at a time) and under an in-flight cap.
TEST_F(FakeClockTest, WorkersShareTheNamespaceLimitsEvenly) {
  for (const bool rate : {true, false}) {
    SCOPED_TRACE(rate ? "dispatch rate" : "in-flight cap");
    v1::Policy p;
    if (rate) {
      p.set_max_dispatch_rate(20);  // A burst of 20, then 20 a second.
    } else {
      p.set_max_in_flight(4);
    }
    Policy(p);
    auto w1 = Worker();
    auto w2 = Worker();
    constexpr int kTimers = 100;
    v1::BatchRequest req;
    const std::string prefix = rate ? "r" : "c";
    for (int i = 0; i < kTimers; ++i) {
      auto* set = req.add_operations()->mutable_set();
      set->set_namespace_("jobs");
      set->set_key(prefix + std::to_string(i));
      *set->mutable_delay() = Millis(1000);
    }
    v1::BatchResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d_.stub().Batch(&ctx, req, &resp).ok());
    // The namespace's count of deliveries goes on from the pass before
    // unless the namespace was freed between the passes (it is freed once
    // empty, at a time of the daemon's); from here its timers keep it.
    const std::uint64_t before = Stats().events_delivered();
    // Each worker acknowledges what it got as it comes; the clock moves on
    // 10 ms at a time until every event was delivered (bounded).
    std::size_t acked[2] = {0, 0};
    TestStream* workers[2] = {w1.get(), w2.get()};
    clock_.Advance(1s);
    for (int step = 0; step < 2000 && acked[0] + acked[1] < kTimers; ++step) {
      for (int w = 0; w < 2; ++w) {
        const auto got = workers[w]->Events();
        std::vector<std::uint64_t> ids;
        for (std::size_t i = acked[w]; i < got.size(); ++i) {
          ids.push_back(got[i].id());
        }
        if (!ids.empty()) Ack(ids);
        acked[w] = got.size();
      }
      clock_.Advance(10ms);
      // What was delivered reaches the streams (a bounded poll). (Once all
      // are acknowledged the namespace may be freed, its count gone.)
      const std::uint64_t count = Stats().events_delivered();
      const std::uint64_t delivered = count >= before ? count - before : 0;
      const auto deadline = std::chrono::steady_clock::now() + 5s;
      while (w1->Events().size() + w2->Events().size() < delivered &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
      }
    }
    ASSERT_EQ(acked[0] + acked[1], static_cast<std::size_t>(kTimers));
    EXPECT_GE(acked[0], 40u);
    EXPECT_LE(acked[0], 60u);
    w1.reset();
    w2.reset();
  }
}

TEST_F(FakeClockTest, PolicyChangeReachesEventsAlreadyWaiting) {
  v1::Policy paused;
  paused.set_paused(true);
  Policy(paused);
  auto w = Worker();
  for (int i = 0; i < 5; ++i) Set("k" + std::to_string(i), 1s);
  clock_.Advance(1s);
  ASSERT_EQ(Stats().ready_events(), 5u);
  // Unpaused at one a second: the waiting events go out at that rate.
  v1::Policy slow;
  slow.set_max_dispatch_rate(1);
  slow.set_dispatch_burst(1);
  Policy(slow);
  ASSERT_EQ(w->WaitFor(1).size(), 1u);
  for (std::uint64_t n = 2; n <= 5; ++n) {
    clock_.Advance(1s - 1ms);
    EXPECT_EQ(Stats().events_delivered(), n - 1);
    clock_.Advance(1ms);
    EXPECT_EQ(Stats().events_delivered(), n);
  }
  // A new backoff applies from the next failure on.
  auto got = w->WaitFor(5);
  Ack({got[1].id(), got[2].id(), got[3].id(), got[4].id()});
  Policy(Backoff(60'000, 1, 60'000));
  Nack({got[0].id()});
  clock_.Advance(60s - 1ms);
  EXPECT_EQ(Stats().events_delivered(), 5u);
  clock_.Advance(1ms);
  EXPECT_EQ(Stats().events_delivered(), 6u);
}

TEST_F(FakeClockTest, WallClockStepForwardFiresWhatCameDue) {
  auto w = Worker();
  Set("a", 10min);
  clock_.StepWall(10min - 1ms);
  EXPECT_EQ(Stats().pending_timers(), 1u);
  clock_.StepWall(1ms);
  EXPECT_EQ(Stats().pending_timers(), 0u);
  EXPECT_EQ(w->WaitFor(1).size(), 1u);
}

TEST_F(FakeClockTest, WallClockStepBackNeverFiresEarly) {
  auto w = Worker();
  Set("a", 10min);
  clock_.StepWall(-1h);
  clock_.Advance(10min);  // The old steady deadline: wall time is 1 h short.
  EXPECT_EQ(Stats().pending_timers(), 1u);
  clock_.Advance(1h - 1ms);
  EXPECT_EQ(Stats().pending_timers(), 1u);
  clock_.Advance(1ms);
  EXPECT_EQ(Stats().pending_timers(), 0u);
  const auto got = w->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(ToNanos(got[0].fire_time()), FakeClock::kStart + 600'000'000'000);
}

TEST_F(FakeClockTest, MonotonicPauseFiresAtTheWallTime) {
  auto w = Worker();
  Set("a", 10min);
  Set("b", 20min);
  clock_.PauseSteady(15min);  // Suspended: steady time stood still.
  EXPECT_EQ(Stats().pending_timers(), 1u);
  EXPECT_EQ(w->WaitFor(1).size(), 1u);
  clock_.Advance(5min - 1ms);
  EXPECT_EQ(Stats().pending_timers(), 1u);
  clock_.Advance(1ms);
  EXPECT_EQ(Stats().pending_timers(), 0u);
}

// The system clock tells nothing: a step is found by polling the offset.
class SilentClock : public FakeClock {
 public:
  void Listen(const void*, std::function<void()>) override {}
};

TEST(ClockPoll, StepFoundByPollingIsActedOn) {
  SilentClock clock;
  auto o = TestDaemon::DefaultOptions();
  o.scheduler.clock = &clock;
  o.scheduler.clock_poll = 5ms;
  TestDaemon d(o);
  ASSERT_TRUE(d.started());
  TestStream w(d.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(w.WaitRegistered());
  v1::SetTimerRequest req;
  req.set_namespace_("jobs");
  req.set_key("a");
  *req.mutable_delay() = Millis(3'600'000);
  v1::SetTimerResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d.stub().SetTimer(&ctx, req, &resp).ok());
  clock.StepWall(1h);
  EXPECT_EQ(w.WaitFor(1, 10s).size(), 1u);
}

}  // namespace
}  // namespace delayd::testing
