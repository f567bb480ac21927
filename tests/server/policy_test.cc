// Namespace policies: their stored form, the token bucket and jittered
// backoff on made-up times, and against a daemon on loopback: defaults,
// bad values refused, pause and resume, the in-flight cap and the dispatch
// rate across workers, the default ack timeout, the limit on policies, and
// policies surviving a restart.
#include "server/common/policy.h"

#include <gtest/gtest.h>

#include "server/core/token_bucket.h"
#include "tests/common/temp_dir.h"
#include "tests/server/calls.h"
#include "tests/server/test_client.h"
#include "tests/server/test_stores.h"

namespace delayd::testing {
namespace {

TEST(PolicyRecord, RoundTripsAndRefusesDamage) {
  Policy p;
  p.retry.initial_backoff = 250ms;
  p.retry.multiplier = 3;
  p.retry.max_backoff = 1h;
  p.retry.jitter = 0.5;
  p.ack_timeout = 5s;
  p.max_dispatch_rate = 123.5;
  p.dispatch_burst = 7;
  p.max_in_flight = 9;
  p.paused = true;
  const std::string bytes = EncodePolicy(p);
  EXPECT_EQ(DecodePolicy(bytes), p);
  EXPECT_FALSE(DecodePolicy(bytes.substr(1)).has_value());
  EXPECT_FALSE(DecodePolicy(bytes + "x").has_value());
  std::string other_version = bytes;
  other_version[0] = 9;
  EXPECT_FALSE(DecodePolicy(other_version).has_value());
  std::string bad_flag = bytes;
  bad_flag.back() = 2;
  EXPECT_FALSE(DecodePolicy(bad_flag).has_value());
}

// A dedup window takes version 3, with or without a push target; without
// one the older versions are written, as before.
TEST(PolicyRecord, ADedupWindowIsVersionThreeWithOrWithoutAPushTarget) {
  Policy p;
  p.max_attempts = 4;
  EXPECT_EQ(EncodePolicy(p)[0], 1);
  p.dedup_window = 10min;
  std::string bytes = EncodePolicy(p);
  EXPECT_EQ(bytes[0], 3);
  EXPECT_EQ(DecodePolicy(bytes), p);
  EXPECT_FALSE(DecodePolicy(bytes + "x").has_value());
  EXPECT_FALSE(DecodePolicy(bytes.substr(0, bytes.size() - 1)).has_value());
  p.push.url = "https://example.com/hook";
  p.push.method = "POST";
  bytes = EncodePolicy(p);
  EXPECT_EQ(bytes[0], 3);
  EXPECT_EQ(DecodePolicy(bytes), p);
  EXPECT_FALSE(DecodePolicy(bytes.substr(0, bytes.size() - 1)).has_value());
  p.dedup_window = 0ns;
  EXPECT_EQ(EncodePolicy(p)[0], 2);
  EXPECT_EQ(DecodePolicy(EncodePolicy(p)), p);
}

TEST(TokenBucket, HoldsTheRateOverAWindowAndTheBurstAfterQuiet) {
  using Time = TokenBucket::Time;
  const Time t0{};
  TokenBucket b;
  b.Configure(100, 10, t0);
  EXPECT_EQ(b.Available(t0), 10u);  // Starts full.
  b.Take(10);
  EXPECT_EQ(b.Available(t0), 0u);
  EXPECT_EQ(b.NextToken(t0), t0 + 10ms);
  EXPECT_EQ(b.Available(t0 + 10ms), 1u);
  EXPECT_EQ(b.Available(t0 + 1h), 10u);  // Never more than the burst.
  // Taking all there is, as often as possible, over 10 s: the rate, plus
  // the first burst.
  b.Configure(100, 10, t0);
  std::size_t taken = 0;
  for (Time t = t0; t < t0 + 10s; t += 1ms) {
    const std::size_t n = b.Available(t);
    b.Take(n);
    taken += n;
  }
  EXPECT_GE(taken, 100u * 10 + 10 - 1);
  EXPECT_LE(taken, 100u * 10 + 10);
  // Given back: available again at once, never beyond the burst.
  b.Configure(100, 10, t0);
  b.Take(10);
  b.Return(4);
  EXPECT_EQ(b.Available(t0), 4u);
  b.Return(100);
  EXPECT_EQ(b.Available(t0), 10u);
  TokenBucket unlimited;
  unlimited.Configure(0, 0, t0);
  EXPECT_TRUE(unlimited.unlimited());
  TokenBucket slow;
  slow.Configure(0.5, 0, t0);  // Burst 0: a second's worth, at least 1.
  EXPECT_EQ(slow.Available(t0), 1u);
}

TEST(Backoff, JitterCutsTheWaitWithinItsFraction) {
  RetryPolicy p;
  p.jitter = 0.25;
  EXPECT_EQ(Backoff(p, 3, 0.0), 4s);
  EXPECT_EQ(Backoff(p, 3, 0.5), 3500ms);
  const auto low = Backoff(p, 3, 0.999999);
  EXPECT_GT(low, 3s);
  EXPECT_LE(low, 4s);
  p.jitter = 0;
  EXPECT_EQ(Backoff(p, 3, 0.999999), 4s);
}

// --- Against a daemon. ---

class PolicyTest : public ::testing::Test {
 protected:
  static DelaydServer::Options Options(const TestStore* store = nullptr) {
    auto o = TestDaemon::DefaultOptions();
    o.scheduler.limits.max_namespaces = 3;
    return store != nullptr ? store->On(o) : o;
  }
  grpc::Status SetPolicy(TestDaemon& d, const std::string& ns,
                         const v1::Policy& p, v1::Policy* out = nullptr,
                         const std::vector<std::string>& mask = {}) {
    v1::SetPolicyRequest req;
    req.set_namespace_(ns);
    *req.mutable_policy() = p;
    for (const auto& path : mask) req.mutable_update_mask()->add_paths(path);
    v1::Policy resp;
    grpc::ClientContext ctx;
    grpc::Status s = d.stub().SetPolicy(&ctx, req, &resp);
    if (out != nullptr) *out = resp;
    return s;
  }
  v1::Policy GetPolicy(TestDaemon& d, const std::string& ns) {
    v1::GetPolicyRequest req;
    req.set_namespace_(ns);
    v1::Policy resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(d.stub().GetPolicy(&ctx, req, &resp).ok());
    return resp;
  }
  void SetTimers(TestDaemon& d, const std::string& ns, int n) {
    v1::BatchRequest req;
    for (int i = 0; i < n; ++i) {
      auto* set = req.add_operations()->mutable_set();
      set->set_namespace_(ns);
      set->set_key("k" + std::to_string(i));
      *set->mutable_delay() = Millis(0);
    }
    v1::BatchResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Batch(&ctx, req, &resp).ok());
  }
  v1::NamespaceStats Stats(TestDaemon& d, const std::string& ns) {
    return NamespaceStats(d.stub(), ns);
  }
  // Waits (up to 10 s) until `ns` has `ready` events ready and none
  // pending, then passes once through its dispatcher (a Nack of no event
  // it has is answered from there): whatever delivery followed is done.
  void WaitReady(TestDaemon& d, const std::string& ns, std::uint64_t ready) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      const auto s = Stats(d, ns);
      if ((s.ready_events() == ready && s.pending_timers() == 0) ||
          std::chrono::steady_clock::now() > deadline) {
        break;
      }
      std::this_thread::sleep_for(5ms);  // The pause of a bounded poll.
    }
    v1::NackRequest req;
    req.set_namespace_(ns);
    req.add_event_ids(~std::uint64_t{0});
    v1::NackResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Nack(&ctx, req, &resp).ok());
  }
  void Ack(TestDaemon& d, const std::string& ns, std::uint64_t id) {
    ASSERT_TRUE(testing::Ack(d.stub(), ns, {id}).ok());
  }
};

TEST_F(PolicyTest, DefaultsAreFilledInAndASetPolicyReadsBack) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  v1::Policy got = GetPolicy(d, "jobs");
  EXPECT_EQ(got.initial_backoff().seconds(), 1);
  EXPECT_EQ(got.backoff_multiplier(), 2.0);
  EXPECT_EQ(got.max_backoff().seconds(), 600);
  EXPECT_EQ(got.ack_timeout().seconds(), 30);
  EXPECT_EQ(got.max_dispatch_rate(), 0.0);
  EXPECT_FALSE(got.paused());
  v1::Policy p;
  p.set_max_dispatch_rate(50);
  p.set_paused(true);
  *p.mutable_initial_backoff() = Millis(0);
  v1::Policy answered;
  ASSERT_TRUE(SetPolicy(d, "jobs", p, &answered).ok());
  got = GetPolicy(d, "jobs");
  EXPECT_EQ(got.SerializeAsString(), answered.SerializeAsString());
  EXPECT_EQ(got.max_dispatch_rate(), 50.0);
  EXPECT_TRUE(got.paused());
  EXPECT_EQ(got.initial_backoff().nanos(), 0);
  EXPECT_EQ(got.max_backoff().seconds(), 600);  // Unset: the default.
  // A namespace policy is not a namespace: none was created.
  v1::StatsResponse all;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d.stub().Stats(&ctx, {}, &all).ok());
  EXPECT_EQ(all.namespaces_size(), 0);
}

TEST_F(PolicyTest, BadValuesAreRefusedNamingTheFieldAndChangeNothing) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  auto refused = [&](v1::Policy p, const std::string& field) {
    grpc::Status s = SetPolicy(d, "jobs", p);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_NE(s.error_message().find(field), std::string::npos)
        << s.error_message();
  };
  v1::Policy p;
  p.set_backoff_multiplier(0.5);
  refused(p, "backoff_multiplier");
  p = {};
  p.set_backoff_multiplier(std::nan(""));
  refused(p, "backoff_multiplier");
  p = {};
  p.set_backoff_jitter(1.5);
  refused(p, "backoff_jitter");
  p = {};
  *p.mutable_initial_backoff() = Millis(5000);
  *p.mutable_max_backoff() = Millis(1000);
  refused(p, "max_backoff");
  p = {};
  *p.mutable_ack_timeout() = Millis(10);
  refused(p, "ack_timeout");
  p = {};
  p.set_max_dispatch_rate(-1);
  refused(p, "max_dispatch_rate");
  p = {};
  p.set_max_in_flight(2'000'000);
  refused(p, "max_in_flight");
  p = {};
  p.set_paused(true);
  p.set_max_dispatch_rate(1e9);
  refused(p, "max_dispatch_rate");
  EXPECT_FALSE(GetPolicy(d, "jobs").paused());
}

// A set with an update mask changes the fields it names and keeps the
// others in force (a paused namespace stays paused when its max attempts
// change); a mask naming no field of Policy changes nothing.
TEST_F(PolicyTest, AMaskedSetChangesOnlyTheFieldsItNames) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  v1::Policy p;
  p.set_paused(true);
  p.set_max_attempts(5);
  *p.mutable_max_backoff() = Millis(60'000);
  ASSERT_TRUE(SetPolicy(d, "jobs", p).ok());
  // What the form sends: every field as loaded, paused false among them;
  // only max_attempts is named.
  v1::Policy form;
  form.set_max_attempts(3);
  v1::Policy answered;
  ASSERT_TRUE(SetPolicy(d, "jobs", form, &answered, {"max_attempts"}).ok());
  EXPECT_TRUE(answered.paused());
  EXPECT_EQ(answered.max_attempts(), 3u);
  EXPECT_EQ(answered.max_backoff().seconds(), 60);
  v1::Policy now = GetPolicy(d, "jobs");
  EXPECT_TRUE(now.paused());
  EXPECT_EQ(now.max_attempts(), 3u);
  EXPECT_TRUE(Stats(d, "jobs").paused());
  // Checked against the policy in force: a new initial backoff past the
  // max backoff in force is refused.
  v1::Policy backoff;
  *backoff.mutable_initial_backoff() = Millis(120'000);
  const grpc::Status refused =
      SetPolicy(d, "jobs", backoff, nullptr, {"initial_backoff"});
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error_message().find("max_backoff"), std::string::npos)
      << refused.error_message();
  const grpc::Status unknown = SetPolicy(d, "jobs", form, nullptr, {"nope"});
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(unknown.error_message().find("'nope'"), std::string::npos);
  // Resume alone.
  v1::Policy resume;
  ASSERT_TRUE(SetPolicy(d, "jobs", resume, &answered, {"paused"}).ok());
  EXPECT_FALSE(answered.paused());
  EXPECT_EQ(answered.max_attempts(), 3u);
  now = GetPolicy(d, "jobs");
  EXPECT_FALSE(now.paused());
  EXPECT_EQ(now.max_attempts(), 3u);
  EXPECT_EQ(now.max_backoff().seconds(), 60);
}

TEST_F(PolicyTest, PauseHoldsEventsAndResumeDeliversEachOnce) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  v1::Policy paused;
  paused.set_paused(true);
  ASSERT_TRUE(SetPolicy(d, "jobs", paused).ok());
  TestStream worker(d.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(worker.WaitRegistered());
  SetTimers(d, "jobs", 5);
  WaitReady(d, "jobs", 5);
  EXPECT_EQ(worker.Events().size(), 0u);
  EXPECT_EQ(Stats(d, "jobs").in_flight_events(), 0u);
  EXPECT_TRUE(Stats(d, "jobs").paused());
  ASSERT_TRUE(SetPolicy(d, "jobs", v1::Policy()).ok());  // Resume.
  EXPECT_FALSE(Stats(d, "jobs").paused());
  auto got = worker.WaitFor(5);
  ASSERT_EQ(got.size(), 5u);
  std::set<std::string> keys;
  for (const auto& e : got) keys.insert(e.key());
  EXPECT_EQ(keys.size(), 5u);
  WaitReady(d, "jobs", 0);
  EXPECT_EQ(Stats(d, "jobs").events_delivered(), 5u);
}

TEST_F(PolicyTest, InFlightCapHoldsAcrossWorkers) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  v1::Policy p;
  p.set_max_in_flight(2);
  ASSERT_TRUE(SetPolicy(d, "jobs", p).ok());
  TestStream a(d.stub(), TestStream::Worker("jobs", 10));
  TestStream b(d.stub(), TestStream::Worker("jobs", 10));
  ASSERT_TRUE(a.WaitRegistered());
  ASSERT_TRUE(b.WaitRegistered());
  // What the workers have read, once at least `n` events (up to 5 s): the
  // daemon counts an event in flight before the worker reads it.
  auto received = [&](std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (a.Events().size() + b.Events().size() < n &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(5ms);
    }
    return a.Events().size() + b.Events().size();
  };
  SetTimers(d, "jobs", 5);
  WaitReady(d, "jobs", 3);
  EXPECT_EQ(received(2), 2u);
  EXPECT_EQ(Stats(d, "jobs").in_flight_events(), 2u);
  // One acknowledged: one more goes out.
  const auto first = a.Events().empty() ? b.Events()[0] : a.Events()[0];
  Ack(d, "jobs", first.id());
  WaitReady(d, "jobs", 2);
  EXPECT_EQ(received(3), 3u);
}

TEST_F(PolicyTest, DispatchRateHoldsAcrossWorkers) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  v1::Policy p;
  p.set_max_dispatch_rate(40);
  p.set_dispatch_burst(1);
  ASSERT_TRUE(SetPolicy(d, "jobs", p).ok());
  std::vector<std::unique_ptr<TestStream>> workers;
  for (int i = 0; i < 3; ++i) {
    workers.push_back(std::make_unique<TestStream>(
        d.stub(), TestStream::Worker("jobs", 100)));
    ASSERT_TRUE(workers.back()->WaitRegistered());
  }
  const WallNanos set_at = WallNow();
  SetTimers(d, "jobs", 13);
  std::vector<WallNanos> at;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (at.size() < 13 && std::chrono::steady_clock::now() < deadline) {
    at.clear();
    for (auto& w : workers) {
      for (WallNanos t : w->ReceivedAt()) at.push_back(t);
    }
    std::this_thread::sleep_for(10ms);  // The pause of a bounded poll.
  }
  ASSERT_EQ(at.size(), 13u);
  std::sort(at.begin(), at.end());
  // One at once (the burst), then one per 25 ms: 12 more take 300 ms.
  // (Timed from before the set: the first delivery may reach the client
  // later than it left.)
  EXPECT_GE(at.back() - set_at, 300'000'000);
}

TEST_F(PolicyTest, WorkersWithoutAnAckTimeoutTakeThePolicys) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  v1::Policy p;
  *p.mutable_ack_timeout() = Millis(200);
  *p.mutable_initial_backoff() = Millis(0);
  ASSERT_TRUE(SetPolicy(d, "jobs", p).ok());
  auto request = TestStream::Worker("jobs");
  request.clear_ack_timeout();
  TestStream worker(d.stub(), request);
  ASSERT_TRUE(worker.WaitRegistered());
  // (Timed from before the set: the first delivery may reach the client
  // later than it left.)
  const WallNanos set_at = WallNow();
  SetTimers(d, "jobs", 1);
  // With the 30 s default it would not come back within the wait. A third
  // attempt may follow 200 ms later, before a slow (sanitized) test thread
  // wakes; the first two are what the policy's timeout decides.
  auto got = worker.WaitFor(2, 10'000ms);
  ASSERT_GE(got.size(), 2u);
  EXPECT_EQ(got[1].attempt(), 2u);
  EXPECT_GE(worker.ReceivedAt()[1] - set_at, 200'000'000);
}

TEST_F(PolicyTest, PoliciesAreBoundedByTheNamespaceLimit) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  v1::Policy p;
  p.set_paused(true);
  for (const char* ns : {"a", "b", "c"}) {
    ASSERT_TRUE(SetPolicy(d, ns, p).ok()) << ns;
  }
  EXPECT_EQ(SetPolicy(d, "d", p).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  // Changing one is fine; the default removes one and frees its place.
  ASSERT_TRUE(SetPolicy(d, "a", v1::Policy()).ok());
  EXPECT_TRUE(SetPolicy(d, "d", p).ok());
}

class PolicyRestart : public PolicyTest,
                      public ::testing::WithParamInterface<Backend> {};

TEST_P(PolicyRestart, PoliciesSurviveARestart) {
  TestStore store(GetParam());
  v1::Policy p;
  p.set_paused(true);
  p.set_max_in_flight(7);
  p.set_backoff_jitter(0.25);
  {
    TestDaemon d(Options(&store));
    ASSERT_TRUE(d.started());
    ASSERT_TRUE(SetPolicy(d, "jobs", p).ok());
    SetTimers(d, "jobs", 2);
    d.Shutdown();
  }
  TestDaemon d(Options(&store));
  ASSERT_TRUE(d.started());
  const v1::Policy got = GetPolicy(d, "jobs");
  EXPECT_TRUE(got.paused());
  EXPECT_EQ(got.max_in_flight(), 7u);
  EXPECT_EQ(got.backoff_jitter(), 0.25);
  // Still paused: the recovered events wait.
  TestStream worker(d.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(worker.WaitRegistered());
  WaitReady(d, "jobs", 2);
  EXPECT_EQ(worker.Events().size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Stores, PolicyRestart, AllBackends(), BackendName);

}  // namespace
}  // namespace delayd::testing
