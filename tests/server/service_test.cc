// The timer API against a daemon on loopback: set, get, move, remove,
// drain, list, limits, errors, stats, health and shutdown.
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "grpc/health/v1/health.grpc.pb.h"
#include "server/api/server.h"
#include "tests/server/service_fixture.h"

namespace delayd::testing {
namespace {

TEST_F(DelaydTest, SetGetMoveRemove) {
  v1::SetTimerResponse set;
  ASSERT_TRUE(Set("k1", 60000, "hello", "", false, &set).ok());
  EXPECT_GT(set.version(), 0u);
  EXPECT_FALSE(set.replaced());
  v1::Timer t;
  ASSERT_TRUE(Get("k1", &t).ok());
  EXPECT_EQ(t.key(), "k1");
  EXPECT_EQ(t.namespace_(), "default");
  EXPECT_EQ(t.payload(), "hello");
  EXPECT_EQ(t.version(), set.version());
  EXPECT_EQ(ToNanos(t.fire_time()), ToNanos(set.fire_time()));
  v1::MoveTimerResponse moved;
  ASSERT_TRUE(Move("k1", 120000, set.version(), &moved).ok());
  EXPECT_GT(moved.version(), set.version());
  EXPECT_GT(ToNanos(moved.fire_time()), ToNanos(set.fire_time()));
  ASSERT_TRUE(Remove("k1", moved.version()).ok());
  EXPECT_EQ(Get("k1").error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(Stats().pending_timers(), 0u);
}

TEST_F(DelaydTest, InvalidInputIsRejectedWithTheFieldNamed) {
  auto expect_invalid = [](const grpc::Status& s, const std::string& field) {
    EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << field;
    EXPECT_NE(s.error_message().find(field), std::string::npos)
        << s.error_message();
  };
  expect_invalid(Set("", 1000), "key");
  expect_invalid(Set(std::string(257, 'k'), 1000), "key");
  expect_invalid(Set("k", 1000, std::string(64 * 1024 + 1, 'x')), "payload");
  expect_invalid(Set("k", 1000, "p", std::string(65, 'n')), "namespace");
  expect_invalid(Set("k", 1000, "p", "bad namespace!"), "namespace");
  expect_invalid(Set("k", -5), "delay");
  expect_invalid(Set("k", 11LL * 365 * 24 * 3600 * 1000), "delay");
  {
    v1::SetTimerRequest req;
    req.set_key("k");
    v1::SetTimerResponse resp;
    grpc::ClientContext ctx;
    expect_invalid(d_.stub().SetTimer(&ctx, req, &resp), "fire_time");
  }
  {
    v1::SetTimerRequest req;
    req.set_key("k");
    *req.mutable_fire_time() =
        FromNanos(WallNow() + 11LL * 365 * 24 * 3600 * 1'000'000'000);
    v1::SetTimerResponse resp;
    grpc::ClientContext ctx;
    expect_invalid(d_.stub().SetTimer(&ctx, req, &resp), "fire_time");
  }
  {
    v1::ListTimersRequest req;
    req.set_page_token("garbage");
    v1::ListTimersResponse resp;
    grpc::ClientContext ctx;
    expect_invalid(d_.stub().ListTimers(&ctx, req, &resp), "page_token");
  }
  {
    v1::ListTimersRequest req;
    req.set_page_size(1001);
    v1::ListTimersResponse resp;
    grpc::ClientContext ctx;
    expect_invalid(d_.stub().ListTimers(&ctx, req, &resp), "page_size");
  }
  {
    v1::BatchRequest req;
    v1::BatchResponse resp;
    grpc::ClientContext ctx;
    expect_invalid(d_.stub().Batch(&ctx, req, &resp), "operations");
  }
  expect_invalid(Ack({}), "event_ids");
  {
    TestStream s(d_.stub(), TestStream::Worker("default", 20000));
    expect_invalid(s.WaitDone(), "max_in_flight");
  }
  {
    TestStream s(d_.stub(), TestStream::Worker("default", 10, 5));
    expect_invalid(s.WaitDone(), "ack_timeout");
  }
  // Nothing was changed, and the daemon still serves.
  EXPECT_EQ(Stats().pending_timers(), 0u);
  EXPECT_TRUE(Set("k", 1000).ok());
}

TEST_F(DelaydTest, ErrorCodes) {
  EXPECT_EQ(Move("missing", 1000).error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(Remove("missing").error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(Get("missing").error_code(), StatusCode::NOT_FOUND);
  v1::SetTimerResponse set;
  ASSERT_TRUE(Set("k", 60000, "p", "", false, &set).ok());
  EXPECT_EQ(Set("k", 60000, "p", "", /*if_absent=*/true).error_code(),
            StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Move("k", 1000, set.version() + 1).error_code(),
            StatusCode::ABORTED);
  EXPECT_EQ(Remove("k", set.version() + 1).error_code(), StatusCode::ABORTED);
  v1::Timer t;
  ASSERT_TRUE(Get("k", &t).ok());
  EXPECT_EQ(t.version(), set.version()) << "failed calls changed nothing";
  v1::AckResponse ack;
  ASSERT_TRUE(Ack({12345}, &ack).ok());
  EXPECT_EQ(ack.acked(), 0u);
  ASSERT_EQ(ack.unknown_ids_size(), 1);
}

// (A node's own limits, set in process: not built against a cluster.)
#ifndef DELAYD_API_ON_CLUSTER
TEST(DelaydLimits, PendingAndSubscriberLimitsAreResourceExhausted) {
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  o.scheduler.limits.max_pending_timers = 3;
  o.scheduler.limits.max_subscribers = 1;
  TestDaemon d(o);
  auto set = [&](const std::string& key) {
    v1::SetTimerRequest req;
    req.set_key(key);
    *req.mutable_delay() = Millis(60000);
    v1::SetTimerResponse resp;
    grpc::ClientContext ctx;
    return d.stub().SetTimer(&ctx, req, &resp);
  };
  for (const char* k : {"a", "b", "c"}) ASSERT_TRUE(set(k).ok());
  EXPECT_EQ(set("d").error_code(), StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(set("a").ok()) << "replacing does not add a timer";
  TestStream first(d.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(first.WaitRegistered());
  TestStream second(d.stub(), TestStream::Worker("default"));
  EXPECT_EQ(second.WaitDone().error_code(), StatusCode::RESOURCE_EXHAUSTED);
}

TEST(DelaydLimits, UnacknowledgedEventsCountAgainstThePendingLimit) {
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  o.scheduler.limits.max_pending_timers = 3;
  TestDaemon d(o);
  auto set = [&](const std::string& key, std::int64_t delay_ms) {
    v1::SetTimerRequest req;
    req.set_key(key);
    *req.mutable_delay() = Millis(delay_ms);
    v1::SetTimerResponse resp;
    grpc::ClientContext ctx;
    return d.stub().SetTimer(&ctx, req, &resp);
  };
  ASSERT_TRUE(set("due-1", 0).ok());
  ASSERT_TRUE(set("due-2", 0).ok());
  ASSERT_TRUE(set("later", 60000).ok());
  // The two due timers fire and wait: no worker is connected.
  auto stats = [&] {
    v1::StatsResponse s;
    grpc::ClientContext ctx;
    EXPECT_TRUE(d.stub().Stats(&ctx, v1::StatsRequest(), &s).ok());
    return s;
  };
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (stats().ready_events() < 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(stats().ready_events(), 2u);
  EXPECT_EQ(set("more", 60000).error_code(), StatusCode::RESOURCE_EXHAUSTED);
  // A worker takes and acknowledges them: room again.
  TestStream w(d.stub(), TestStream::Worker("default"));
  auto events = w.WaitFor(2);
  ASSERT_EQ(events.size(), 2u);
  v1::AckRequest ack;
  for (const auto& e : events) ack.add_event_ids(e.id());
  v1::AckResponse ack_resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d.stub().Ack(&ctx, ack, &ack_resp).ok());
  EXPECT_TRUE(set("more", 60000).ok());
}
#endif

TEST_F(DelaydTest, ReplaceFiresOnlyTheNewTimer) {
  TestStream w(d_.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(w.WaitRegistered());
  // The replace must land before the old fire time; on a slow machine that
  // takes a longer delay, so try growing ones until it does.
  for (std::int64_t delay : {100, 400, 1600}) {
    const std::string key = "k" + std::to_string(delay);
    v1::SetTimerResponse a, b;
    ASSERT_TRUE(Set(key, delay, "old", "", false, &a).ok());
    ASSERT_TRUE(Set(key, 2 * delay, "new", "", false, &b).ok());
    if (!b.replaced()) continue;  // The old one fired first: too slow.
    ASSERT_TRUE(Set("marker" + key, 6 * delay).ok());
    auto events = WaitForKeys(w, {key, "marker" + key}, 2);
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0].key(), key);
    EXPECT_EQ(events[0].payload(), "new");
    EXPECT_EQ(events[0].version(), b.version());
    EXPECT_EQ(events[1].key(), "marker" + key);
    return;
  }
  FAIL() << "never replaced a timer before it fired";
}

TEST_F(DelaydTest, MoveToNowOrUnderATickFiresOnce) {
  TestStream w(d_.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(w.WaitRegistered());
  ASSERT_TRUE(Set("a", 60000).ok());
  ASSERT_TRUE(Set("b", 60000).ok());
  ASSERT_TRUE(Move("a", 0).ok());
  v1::MoveTimerRequest req;  // b: a fire time in the past.
  req.set_key("b");
  *req.mutable_fire_time() = FromNanos(WallNow() - 5'000'000'000);
  v1::MoveTimerResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d_.stub().MoveTimer(&ctx, req, &resp).ok());
  ASSERT_TRUE(Set("marker", 300).ok());
  auto events = w.WaitFor(3);
  ASSERT_EQ(events.size(), 3u);
  std::multiset<std::string> keys;
  for (const auto& e : events) keys.insert(e.key());
  // Each exactly once (a second firing would show up before the marker).
  EXPECT_EQ(keys, (std::multiset<std::string>{"a", "b", "marker"}));
}

TEST_F(DelaydTest, PayloadsOfEverySizeRoundTrip) {
  // Inline (key and payload within 32 bytes), just past it, and the limit.
  TestStream w(d_.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(w.WaitRegistered());
  const std::vector<std::string> payloads = {
      "", "short", std::string(32 - 2, 'a'), std::string(32 - 1, 'b'),
      std::string(64 * 1024, 'c')};
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_TRUE(Set(key, 60000, payloads[i]).ok());
    v1::Timer t;
    ASSERT_TRUE(Get(key, &t).ok());
    EXPECT_EQ(t.payload(), payloads[i]) << key;
    ASSERT_TRUE(Move(key, 0).ok());
  }
  auto events = w.WaitFor(payloads.size());
  ASSERT_EQ(events.size(), payloads.size());
  for (const auto& e : events) {
    EXPECT_EQ(e.payload(), payloads[std::stoul(e.key().substr(1))]) << e.key();
  }
}

TEST_F(DelaydTest, RemovedTimerNeverFires) {
  TestStream w(d_.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(w.WaitRegistered());
  // The remove must land before the fire time; try growing delays.
  for (std::int64_t delay : {100, 400, 1600}) {
    const std::string key = "gone" + std::to_string(delay);
    ASSERT_TRUE(Set(key, delay).ok());
    if (!Remove(key).ok()) continue;  // It fired first: too slow.
    ASSERT_TRUE(Set("marker" + key, 3 * delay).ok());
    auto events = WaitForKeys(w, {key, "marker" + key}, 1);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].key(), "marker" + key);
    return;
  }
  FAIL() << "never removed a timer before it fired";
}

TEST_F(DelaydTest, DrainFiresANamespaceNowAndLaterTimersBehave) {
  TestStream w(d_.stub(), TestStream::Worker("jobs"));
  TestStream other(d_.stub(), TestStream::Watcher("other"));
  ASSERT_TRUE(w.WaitRegistered());
  ASSERT_TRUE(other.WaitRegistered());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Set("k" + std::to_string(i), 3'600'000, "p", "jobs").ok());
  }
  ASSERT_TRUE(Set("untouched", 3'600'000, "p", "other").ok());
  v1::DrainRequest req;
  req.set_namespace_("jobs");
  v1::DrainResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d_.stub().Drain(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.drained(), 10u);
  auto events = w.WaitFor(10);
  ASSERT_EQ(events.size(), 10u);
  for (const auto& e : events) EXPECT_EQ(e.reason(), v1::REASON_DRAINED);
  EXPECT_TRUE(Get("untouched", nullptr, "other").ok());
  // Set after drain: pending, fires at its own time, not at once.
  ASSERT_TRUE(Set("after", 1500, "p", "jobs").ok());
  v1::Timer t;
  ASSERT_TRUE(Get("after", &t, "jobs").ok());
  events = w.WaitFor(11);
  ASSERT_EQ(events.size(), 11u);
  EXPECT_EQ(events[10].key(), "after");
  EXPECT_EQ(events[10].reason(), v1::REASON_EXPIRED);
  EXPECT_GE(ToNanos(events[10].fired_at()), ToNanos(t.fire_time()));
  EXPECT_TRUE(other.Events().empty());
}

TEST_F(DelaydTest, NeverEarlyForThousandsOfTimersOverASecond) {
  constexpr int kTimers = 3000;
  TestStream w(d_.stub(), TestStream::Worker("default", 10000));
  ASSERT_TRUE(w.WaitRegistered());
  std::mt19937 rng(7);
  const WallNanos start = WallNow();
  // (On a cluster, a set that meets a partition changing hands answers
  // UNAVAILABLE, changing nothing: it is sent again, as a client would,
  // within a deadline.)
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (int b = 0; b < kTimers / 500; ++b) {
    v1::BatchRequest req;
    for (int i = 0; i < 500; ++i) {
      auto* set = req.add_operations()->mutable_set();
      set->set_key("t" + std::to_string(b * 500 + i));
      *set->mutable_fire_time() =
          FromNanos(start + std::uniform_int_distribution<std::int64_t>(
                                0, 1'000'000'000)(rng));
    }
    while (req.operations_size() > 0) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      v1::BatchResponse resp;
      grpc::ClientContext ctx;
      ASSERT_TRUE(d_.stub().Batch(&ctx, req, &resp).ok());
      v1::BatchRequest again;
      for (int i = 0; i < resp.results_size(); ++i) {
        const auto& r = resp.results(i);
        if (r.code() == grpc::StatusCode::UNAVAILABLE) {
          *again.add_operations() = req.operations(i);
        } else {
          ASSERT_EQ(r.code(), 0) << r.message();
        }
      }
      req = std::move(again);
    }
  }
  // Every timer's event, each once — but on a cluster an event not yet
  // acknowledged (this worker acknowledges none) is delivered again by a
  // partition's new owner when one changes hands: a repeat must be the
  // same event (its id and key), delivered again.
  std::vector<v1::Event> events;
  std::map<std::uint64_t, std::string> key_of;
  const auto wait_until = std::chrono::steady_clock::now() + 10s;
  while (key_of.size() < static_cast<std::size_t>(kTimers) &&
         std::chrono::steady_clock::now() < wait_until) {
    events = w.WaitFor(std::max<std::size_t>(events.size() + 1, kTimers),
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                           wait_until - std::chrono::steady_clock::now()));
    for (const auto& e : events) key_of.emplace(e.id(), e.key());
  }
  if (key_of.size() != static_cast<std::size_t>(kTimers)) {
    std::map<std::string, std::string> seen;
    for (const auto& e : events) {
      seen[e.key()] += " id " + std::to_string(e.id()) + " v" +
                       std::to_string(e.version()) + " a" +
                       std::to_string(e.attempt()) + ";";
    }
    std::string twice;
    for (const auto& [k, what] : seen) {
      if (std::count(what.begin(), what.end(), ';') > 1) {
        twice += k + ":" + what + "\n";
      }
    }
    FAIL() << key_of.size() << " events for " << kTimers << " timers:\n"
           << twice;
  }
  const auto received = w.ReceivedAt();
  std::set<std::string> keys;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    EXPECT_GE(ToNanos(e.fired_at()), ToNanos(e.fire_time())) << e.key();
    EXPECT_GE(received[i], ToNanos(e.fire_time())) << e.key();
    EXPECT_EQ(key_of[e.id()], e.key()) << "an event id with two keys";
    keys.insert(e.key());
  }
  EXPECT_EQ(keys.size(), static_cast<std::size_t>(kTimers)) << "duplicates";
}

TEST_F(DelaydTest, ListTimersPagesThroughAPrefix) {
  for (int i = 0; i < 25; ++i) {
    ASSERT_TRUE(Set("user:" + std::to_string(i), 60000).ok());
  }
  ASSERT_TRUE(Set("order:1", 60000).ok());
  std::set<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    v1::ListTimersRequest req;
    req.set_key_prefix("user:");
    req.set_page_size(10);
    req.set_page_token(token);
    v1::ListTimersResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d_.stub().ListTimers(&ctx, req, &resp).ok());
    EXPECT_LE(resp.timers_size(), 10);
    for (const auto& t : resp.timers()) {
      EXPECT_TRUE(seen.insert(t.key()).second) << "listed twice: " << t.key();
    }
    token = resp.next_page_token();
    ASSERT_LT(++pages, 10);
  } while (!token.empty());
  EXPECT_EQ(seen.size(), 25u);
}

TEST_F(DelaydTest, StatsAndHealth) {
  ASSERT_TRUE(Set("a", 60000).ok());
  auto stats = Stats();
  EXPECT_EQ(stats.pending_timers(), 1u);
  EXPECT_EQ(stats.partitions(), d_.partitions());
  EXPECT_EQ(stats.timers_set(), 1u);
  auto health = grpc::health::v1::Health::NewStub(d_.channel());
  grpc::health::v1::HealthCheckResponse h;
  grpc::ClientContext ctx;
  ASSERT_TRUE(
      health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &h).ok());
  EXPECT_EQ(h.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(stats.has_durable());
  // One namespace's figures leave the daemon-wide ones unset (not zero).
  v1::StatsRequest one;
  one.set_namespace_("default");
  v1::StatsResponse ns;
  grpc::ClientContext ctx2;
  ASSERT_TRUE(d_.stub().Stats(&ctx2, one, &ns).ok());
  ASSERT_EQ(ns.namespaces_size(), 1);
  EXPECT_EQ(ns.namespaces(0).pending_timers(), 1u);
  EXPECT_FALSE(ns.has_durable());
  EXPECT_FALSE(ns.has_pending_timers());
  EXPECT_FALSE(ns.has_partitions());
  EXPECT_FALSE(ns.has_timers_set());
}

TEST_F(DelaydTest, ShutdownEndsStreamsAndRefusesCalls) {
  TestStream w(d_.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(w.WaitRegistered());
  d_.Shutdown(500ms);
  EXPECT_EQ(w.WaitDone().error_code(), StatusCode::UNAVAILABLE);
  EXPECT_FALSE(Set("k", 1000).ok());
}

}  // namespace
}  // namespace delayd::testing
