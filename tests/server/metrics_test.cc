// The metrics endpoint, scraped after a known sequence of operations: each
// family holds what the operations did.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "delayd/text/build_info.h"
#include "tests/common/fake_clock.h"
#include "tests/common/metrics_scrape.h"
#include "tests/common/temp_dir.h"
#include "tests/server/calls.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

DelaydServer::Options WithMetrics(bool namespace_labels = true) {
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  o.metrics_listen = "127.0.0.1:0";
  o.metrics_namespace_labels = namespace_labels;
  return o;
}

// Scrapes until `ready` holds for the scrape (figures are updated
// asynchronously, just after the calls are answered), for at most 5 s.
template <typename Ready>
Scrape ScrapeUntil(TestDaemon& d, Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  for (;;) {
    auto body = HttpGet(d.server().metrics_port(), "/metrics");
    EXPECT_TRUE(body.has_value());
    Scrape s(body.value_or(""));
    if (ready(s) || std::chrono::steady_clock::now() > deadline) return s;
    std::this_thread::sleep_for(10ms);  // The pause of a bounded poll.
  }
}

// This process's CPU time so far, all threads.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// In "a": a worker; k1 fires at once, is delivered and acked; k2 is moved;
// k3 is removed; a lookup of a missing key. In "b": two timers drained, no
// worker.
void RunKnownSequence(TestDaemon& d) {
  TestStream worker(d.stub(), TestStream::Worker("a"));
  ASSERT_TRUE(worker.WaitRegistered());
  ASSERT_TRUE(Set(d.stub(), "a", "k1", 0).ok());
  ASSERT_TRUE(Set(d.stub(), "a", "k2", 3'600'000).ok());
  ASSERT_TRUE(Set(d.stub(), "a", "k3", 3'600'000).ok());
  {
    v1::MoveTimerRequest req;
    req.set_namespace_("a");
    req.set_key("k2");
    *req.mutable_delay() = Millis(7'200'000);
    v1::MoveTimerResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().MoveTimer(&ctx, req, &resp).ok());
  }
  {
    v1::RemoveTimerRequest req;
    req.set_namespace_("a");
    req.set_key("k3");
    v1::RemoveTimerResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().RemoveTimer(&ctx, req, &resp).ok());
  }
  {
    v1::GetTimerRequest req;
    req.set_namespace_("a");
    req.set_key("missing");
    v1::Timer resp;
    grpc::ClientContext ctx;
    ASSERT_EQ(d.stub().GetTimer(&ctx, req, &resp).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  auto events = worker.WaitFor(1);
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(Ack(d.stub(), "a", {events[0].id()}).ok());
  ASSERT_TRUE(Set(d.stub(), "b", "x", 3'600'000).ok());
  ASSERT_TRUE(Set(d.stub(), "b", "y", 3'600'000).ok());
  {
    v1::DrainRequest req;
    req.set_namespace_("b");
    v1::DrainResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Drain(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.drained(), 2u);
  }
}

TEST(Metrics, QuantilesAreTheBoundsOfTheBucketsTheyFallIn) {
  prometheus::Histogram h(LatencyBuckets());
  EXPECT_EQ(QuantilesOf(h).count, 0u);
  EXPECT_EQ(QuantilesOf(h).p99, 0.0);
  for (int i = 0; i < 98; ++i) h.Observe(0.0003);  // (0.25 ms, 0.5 ms]
  h.Observe(0.02);                                 // (10 ms, 25 ms]
  h.Observe(0.02);
  Quantiles q = QuantilesOf(h);
  EXPECT_EQ(q.count, 100u);
  EXPECT_EQ(q.p50, 0.0005);
  EXPECT_EQ(q.p99, 0.025);
  for (int i = 0; i < 100; ++i) h.Observe(1000);  // beyond the last bound
  q = QuantilesOf(h);
  EXPECT_EQ(q.p50, 0.025);
  EXPECT_EQ(q.p99, 300.0);  // the largest finite bound
}

TEST(Metrics, EachFamilyHoldsWhatAKnownSequenceDid) {
  TestDaemon d(WithMetrics());
  ASSERT_TRUE(d.started());
  ASSERT_NE(d.server().metrics_port(), 0);
  RunKnownSequence(d);
  // The daemon runs in this process, whose CPU time the endpoint reads in
  // 10 ms ticks: a quiet test can use less than one. Spend at least 50 ms
  // first, so the figure has something to show.
  const auto spend_until = std::chrono::steady_clock::now() + 5s;
  while (ProcessCpuSeconds() < 0.05 &&
         std::chrono::steady_clock::now() < spend_until) {
  }
  const double cpu_before = ProcessCpuSeconds();
  // (A stream's call is counted once its end is written, after the
  // subscriber has left: wait for both.)
  const Scrape s = ScrapeUntil(d, [](const Scrape& s) {
    return s.Get("delayd_ready_events", {{"namespace", "b"}}) == 2.0 &&
           s.Get("delayd_subscribers",
                 {{"namespace", "a"}, {"mode", "worker"}}) == 0.0 &&
           s.Get("delayd_grpc_requests_total",
                 {{"method", "Subscribe"}, {"code", "UNAVAILABLE"}})
               .has_value();
  });
  auto a = [](Scrape::Labels l = {}) {
    l["namespace"] = "a";
    return l;
  };
  auto b = [](Scrape::Labels l = {}) {
    l["namespace"] = "b";
    return l;
  };
  // Per namespace: gauges.
  EXPECT_EQ(s.Get("delayd_pending_timers", a()), 1.0);  // k2.
  EXPECT_EQ(s.Get("delayd_pending_timers", b()), 0.0);
  EXPECT_EQ(s.Get("delayd_ready_events", a()), 0.0);
  EXPECT_EQ(s.Get("delayd_in_flight_events", a()), 0.0);
  EXPECT_EQ(s.Get("delayd_ready_events", b()), 2.0);
  EXPECT_EQ(s.Get("delayd_subscribers", a({{"mode", "watcher"}})), 0.0);
  // Per namespace: totals.
  EXPECT_EQ(s.Get("delayd_timers_set_total", a()), 3.0);
  EXPECT_EQ(s.Get("delayd_timers_moved_total", a()), 1.0);
  EXPECT_EQ(s.Get("delayd_timers_removed_total", a()), 1.0);
  EXPECT_EQ(s.Get("delayd_timers_fired_total", a({{"reason", "expired"}})),
            1.0);
  EXPECT_EQ(s.Get("delayd_timers_fired_total", a({{"reason", "drained"}})),
            0.0);
  EXPECT_EQ(s.Get("delayd_timers_fired_total", b({{"reason", "drained"}})),
            2.0);
  EXPECT_EQ(s.Get("delayd_events_delivered_total", a()), 1.0);
  EXPECT_EQ(s.Get("delayd_events_acked_total", a()), 1.0);
  EXPECT_EQ(s.Get("delayd_events_redelivered_total", a()), 0.0);
  EXPECT_EQ(s.Get("delayd_timers_set_total", b()), 2.0);
  EXPECT_EQ(s.Get("delayd_namespaces"), 2.0);
  // Histograms: 3 events fired, 1 delivered, 1 acked.
  EXPECT_EQ(s.Get("delayd_firing_lateness_seconds_count"), 3.0);
  EXPECT_EQ(s.Get("delayd_delivery_lateness_seconds_count"), 1.0);
  EXPECT_EQ(s.Get("delayd_ack_latency_seconds_count"), 1.0);
  // Every event fired within the minute.
  EXPECT_EQ(s.Get("delayd_firing_lateness_seconds_bucket", {{"le", "60"}}),
            3.0);
  // The same histograms, read as quantiles by Stats.
  {
    grpc::ClientContext ctx;
    v1::StatsResponse all;
    ASSERT_TRUE(d.stub().Stats(&ctx, {}, &all).ok());
    EXPECT_EQ(all.firing_lateness().count(), 3u);
    EXPECT_EQ(all.delivery_lateness().count(), 1u);
    const auto& p99 = all.firing_lateness().p99();
    EXPECT_GT(p99.seconds() * 1'000'000'000LL + p99.nanos(), 0);
    EXPECT_LE(p99.seconds(), 60);
  }
  // gRPC calls by method and code, and their latency.
  EXPECT_EQ(s.Get("delayd_grpc_requests_total",
                  {{"method", "SetTimer"}, {"code", "OK"}}),
            5.0);
  EXPECT_EQ(s.Get("delayd_grpc_requests_total",
                  {{"method", "GetTimer"}, {"code", "NOT_FOUND"}}),
            1.0);
  EXPECT_EQ(s.Get("delayd_grpc_requests_total",
                  {{"method", "Subscribe"}, {"code", "UNAVAILABLE"}}),
            1.0);  // The worker's stream, ended when its client left.
  EXPECT_EQ(s.Get("delayd_grpc_request_duration_seconds_count",
                  {{"method", "SetTimer"}}),
            5.0);
  EXPECT_FALSE(
      s.Get("delayd_grpc_requests_total", {{"method", "Batch"}, {"code", "OK"}})
          .has_value());
  // The process.
  EXPECT_GT(s.Get("process_resident_memory_bytes").value_or(0), 1e6);
  EXPECT_GT(s.Get("process_threads").value_or(0), 2.0);
  EXPECT_GT(s.Get("process_open_fds").value_or(0), 2.0);
  // Between this process's own readings around the scrape (utime and stime
  // are each rounded down to a tick).
  const double cpu = s.Get("process_cpu_seconds_total").value_or(-1);
  EXPECT_GE(cpu, cpu_before - 0.02);
  EXPECT_LE(cpu, ProcessCpuSeconds());
  const double started = s.Get("process_start_time_seconds").value_or(0);
  const double now = static_cast<double>(WallNow()) / 1e9;
  EXPECT_GT(started, now - 3600);
  EXPECT_LE(started, now + 1);
  EXPECT_EQ(s.Get("delayd_durable"), 0.0);
}

// The Stats call gives the same per-namespace figures as the endpoint.
TEST(Metrics, StatsGivesEachNamespaceFigures) {
  TestDaemon d(TestDaemon::DefaultOptions());
  ASSERT_TRUE(d.started());
  RunKnownSequence(d);
  v1::StatsResponse r;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  do {
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Stats(&ctx, {}, &r).ok());
    // The worker's leaving is counted just after its stream ends.
    if (r.namespaces_size() == 2 && r.namespaces(0).workers() == 0 &&
        r.namespaces(1).ready_events() == 2) {
      break;
    }
    std::this_thread::sleep_for(10ms);  // The pause of a bounded poll.
  } while (std::chrono::steady_clock::now() < deadline);
  ASSERT_EQ(r.namespaces_size(), 2);
  const v1::NamespaceStats& a = r.namespaces(0);
  const v1::NamespaceStats& b = r.namespaces(1);
  EXPECT_EQ(a.namespace_(), "a");
  EXPECT_EQ(a.pending_timers(), 1u);
  EXPECT_EQ(a.ready_events(), 0u);
  EXPECT_EQ(a.in_flight_events(), 0u);
  EXPECT_EQ(a.workers(), 0u);
  EXPECT_EQ(a.watchers(), 0u);
  EXPECT_EQ(a.timers_set(), 3u);
  EXPECT_EQ(a.timers_moved(), 1u);
  EXPECT_EQ(a.timers_removed(), 1u);
  EXPECT_EQ(a.timers_expired(), 1u);
  EXPECT_EQ(a.timers_drained(), 0u);
  EXPECT_EQ(a.events_delivered(), 1u);
  EXPECT_EQ(a.events_redelivered(), 0u);
  EXPECT_EQ(a.events_acked(), 1u);
  EXPECT_EQ(b.namespace_(), "b");
  EXPECT_EQ(b.pending_timers(), 0u);
  EXPECT_EQ(b.ready_events(), 2u);
  EXPECT_EQ(b.timers_set(), 2u);
  EXPECT_EQ(b.timers_drained(), 2u);
  EXPECT_EQ(b.events_delivered(), 0u);
  // The daemon's figures are the sums.
  EXPECT_EQ(r.pending_timers(), 1u);
  EXPECT_EQ(r.timers_set(), 5u);
  EXPECT_EQ(r.timers_fired(), 3u);
}

// Retrying events and dead letters, per namespace: one event nacked to
// retry in an hour, one nacked on its last attempt.
TEST(Metrics, RetryingAndDeadLettersAreGauges) {
  TestDaemon d(WithMetrics());
  ASSERT_TRUE(d.started());
  {
    v1::SetPolicyRequest req;
    req.set_namespace_("a");
    req.mutable_policy()->set_max_attempts(1);
    v1::Policy resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().SetPolicy(&ctx, req, &resp).ok());
  }
  TestStream worker(d.stub(), TestStream::Worker("a"));
  TestStream other(d.stub(), TestStream::Worker("b"));
  ASSERT_TRUE(worker.WaitRegistered());
  ASSERT_TRUE(other.WaitRegistered());
  ASSERT_TRUE(Set(d.stub(), "a", "dead", 0).ok());
  ASSERT_TRUE(Set(d.stub(), "b", "later", 0).ok());
  auto nack = [&](const std::string& ns, std::uint64_t id) {
    v1::NackRequest req;
    req.set_namespace_(ns);
    req.add_event_ids(id);
    *req.mutable_retry_after() = Millis(3'600'000);
    v1::NackResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Nack(&ctx, req, &resp).ok());
  };
  auto a = worker.WaitFor(1);
  auto b = other.WaitFor(1);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  nack("a", a[0].id());
  nack("b", b[0].id());
  const Scrape s = ScrapeUntil(d, [](const Scrape& s) {
    return s.Get("delayd_dead_letters", {{"namespace", "a"}}) == 1.0;
  });
  EXPECT_EQ(s.Get("delayd_dead_letters", {{"namespace", "a"}}), 1.0);
  EXPECT_EQ(s.Get("delayd_retrying_events", {{"namespace", "a"}}), 0.0);
  EXPECT_EQ(s.Get("delayd_dead_letters", {{"namespace", "b"}}), 0.0);
  EXPECT_EQ(s.Get("delayd_retrying_events", {{"namespace", "b"}}), 1.0);
  EXPECT_EQ(s.Get("delayd_in_flight_events", {{"namespace", "b"}}), 0.0);
  EXPECT_EQ(
      s.Get("delayd_grpc_requests_total", {{"method", "Nack"}, {"code", "OK"}}),
      2.0);
}

// Requests on a Work stream count as calls of their methods, by the code
// of their answers, with their latency; the stream itself as one Work call.
TEST(Metrics, AWorkStreamsRequestsCountAsCallsOfTheirMethods) {
  TestDaemon d(WithMetrics());
  ASSERT_TRUE(d.started());
  grpc::ClientContext ctx;
  auto stream = d.stub().Work(&ctx);
  v1::WorkRequest req;
  *req.mutable_subscribe() = TestStream::Worker("a");
  ASSERT_TRUE(stream->Write(req));
  ASSERT_TRUE(Set(d.stub(), "a", "k", 0).ok());
  v1::SubscribeResponse msg;
  while (msg.events().empty()) ASSERT_TRUE(stream->Read(&msg));
  // An ack of the event, a nack of an unknown id, a lease extension with
  // none given (INVALID_ARGUMENT), each answered on the stream.
  req.Clear();
  req.set_ref(1);
  req.mutable_ack()->add_event_ids(msg.events(0).id());
  ASSERT_TRUE(stream->Write(req));
  req.Clear();
  req.set_ref(2);
  req.mutable_nack()->add_event_ids(12345);
  ASSERT_TRUE(stream->Write(req));
  req.Clear();
  req.set_ref(3);
  req.mutable_extend_lease()->add_event_ids(12345);
  ASSERT_TRUE(stream->Write(req));
  int answers = 0;
  while (answers < 3 && stream->Read(&msg)) answers += msg.answers_size();
  ASSERT_EQ(answers, 3);
  stream->WritesDone();
  ASSERT_TRUE(stream->Finish().ok());
  const Scrape s = ScrapeUntil(d, [](const Scrape& s) {
    return s.Get("delayd_grpc_requests_total",
                 {{"method", "Work"}, {"code", "OK"}}) == 1.0;
  });
  auto calls = [&s](const std::string& method, const std::string& code) {
    return s.Get("delayd_grpc_requests_total",
                 {{"method", method}, {"code", code}});
  };
  EXPECT_EQ(calls("Work", "OK"), 1.0);
  EXPECT_EQ(calls("Ack", "OK"), 1.0);
  EXPECT_EQ(calls("Nack", "OK"), 1.0);
  EXPECT_EQ(calls("ExtendLease", "INVALID_ARGUMENT"), 1.0);
  EXPECT_EQ(
      s.Get("delayd_grpc_request_duration_seconds_count", {{"method", "Ack"}}),
      1.0);
}

TEST(Metrics, WithoutNamespaceLabelsEachFamilyIsTheSum) {
  TestDaemon d(WithMetrics(/*namespace_labels=*/false));
  ASSERT_TRUE(d.started());
  RunKnownSequence(d);
  const Scrape s = ScrapeUntil(
      d, [](const Scrape& s) { return s.Get("delayd_ready_events") == 2.0; });
  EXPECT_EQ(s.Count("delayd_pending_timers"), 1u);
  EXPECT_EQ(s.Get("delayd_pending_timers"), 1.0);
  EXPECT_EQ(s.Get("delayd_timers_set_total"), 5.0);
  EXPECT_EQ(s.Get("delayd_timers_fired_total", {{"reason", "expired"}}), 1.0);
  EXPECT_EQ(s.Get("delayd_timers_fired_total", {{"reason", "drained"}}), 2.0);
  EXPECT_FALSE(
      s.Get("delayd_pending_timers", {{"namespace", "a"}}).has_value());
}

TEST(Metrics, AFreedNamespaceLeavesTheScrapeAndANewOneStartsFromZero) {
  TestDaemon d(WithMetrics());
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(Set(d.stub(), "gone", "k", 0).ok());  // Fires; no worker.
  {
    TestStream worker(d.stub(), TestStream::Worker("gone"));
    auto events = worker.WaitFor(1);
    ASSERT_EQ(events.size(), 1u);
    ASSERT_TRUE(Ack(d.stub(), "gone", {events[0].id()}).ok());
  }
  // Nothing holds it now: it is freed, and its series go.
  Scrape s = ScrapeUntil(d, [](const Scrape& s) {
    return !s.Get("delayd_timers_set_total", {{"namespace", "gone"}});
  });
  EXPECT_FALSE(s.Get("delayd_timers_set_total", {{"namespace", "gone"}}));
  // Its id, reused by a new namespace, counts from zero.
  ASSERT_TRUE(Set(d.stub(), "new", "k", 3'600'000).ok());
  s = ScrapeUntil(d, [](const Scrape&) { return true; });
  EXPECT_EQ(s.Get("delayd_timers_set_total", {{"namespace", "new"}}), 1.0);
  EXPECT_EQ(s.Get("delayd_events_acked_total", {{"namespace", "new"}}), 0.0);
}

TEST(Metrics, TheStoreIsMeasured) {
  TempDir dir;
  DelaydServer::Options o = WithMetrics();
  RocksOptions store;
  store.dir = dir / "data";
  o.scheduler.store = RocksStoreOpener(store);  // --fsync always.
  TestDaemon d(o);
  ASSERT_TRUE(d.started());
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(Set(d.stub(), "a", "k" + std::to_string(i), 3'600'000).ok());
  }
  const Scrape s = ScrapeUntil(d, [](const Scrape&) { return true; });
  EXPECT_EQ(s.Get("delayd_durable"), 1.0);
  // Each acknowledged write waited for a sync of the log.
  EXPECT_GE(s.Get("delayd_store_wal_sync_seconds_count").value_or(0), 5.0);
  EXPECT_GE(s.Get("delayd_store_wal_sync_group_writes_sum").value_or(0), 5.0);
  EXPECT_TRUE(s.Get("delayd_store_live_data_bytes").has_value());
  EXPECT_TRUE(s.Get("delayd_store_pending_compaction_bytes").has_value());
  EXPECT_EQ(s.Get("delayd_store_errors_total"), 0.0);
  EXPECT_EQ(s.Get("delayd_store_write_stalls_total"), 0.0);
  // Nothing holds the disk: no operation has been running for long.
  EXPECT_GE(s.Get("delayd_store_busy_seconds").value_or(-1), 0.0);
  EXPECT_LT(s.Get("delayd_store_busy_seconds").value_or(99), 5.0);
}

// A step of the system clock is acted on as the kernel reports it, not at
// the next poll (an hour away here). The step is 1 us forward, so that no
// other process on the machine sees time go back; without the right to set
// the clock (CAP_SYS_TIME) the test is skipped.
TEST(Metrics, AStepOfTheSystemClockIsActedOnAsItComes) {
  DelaydServer::Options o = WithMetrics();
  o.scheduler.clock_poll = std::chrono::hours(1);
  TestDaemon d(o);
  ASSERT_TRUE(d.started());
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  now.tv_nsec += 1000;
  if (now.tv_nsec >= 1'000'000'000) {
    now.tv_nsec -= 1'000'000'000;
    ++now.tv_sec;
  }
  if (clock_settime(CLOCK_REALTIME, &now) != 0) {
    GTEST_SKIP() << "setting the clock: " << std::strerror(errno);
  }
  const Scrape s = ScrapeUntil(d, [](const Scrape& s) {
    return s.Get("delayd_clock_steps_total") >= 1.0;
  });
  EXPECT_EQ(s.Get("delayd_clock_steps_total"), 1.0);
}

TEST(Metrics, AnAddressInUseIsRefused) {
  TestDaemon first(WithMetrics());
  ASSERT_TRUE(first.started());
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  o.listen = "127.0.0.1:0";
  o.metrics_listen =
      "127.0.0.1:" + std::to_string(first.server().metrics_port());
  DelaydServer second(o);
  const Status s = second.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--metrics-listen"), std::string::npos)
      << s.message();
}

TEST(Metrics, SchedulesAndTheirRunsAreCountedPerNamespace) {
  FakeClock clock;
  DelaydServer::Options o = WithMetrics();
  o.scheduler.clock = &clock;
  TestDaemon d(o);
  ASSERT_TRUE(d.started());
  for (const char* key : {"a", "b"}) {
    v1::SetScheduleRequest req;
    req.set_namespace_("s");
    req.set_key(key);
    req.mutable_spec()->mutable_every()->set_seconds(60);
    v1::Schedule resp;
    ASSERT_TRUE(d.stub().SetSchedule(Within().get(), req, &resp).ok());
  }
  clock.Advance(std::chrono::seconds(60));   // one run each, on time
  clock.Advance(std::chrono::seconds(600));  // ten instants at once: latest
  const Scrape s = ScrapeUntil(d, [](const Scrape& s) {
    return s.Get("delayd_schedule_runs_total",
                 {{"namespace", "s"}, {"kind", "fired"}}) == 4.0;
  });
  EXPECT_EQ(s.Get("delayd_schedules", {{"namespace", "s"}}), 2.0);
  EXPECT_EQ(s.Get("delayd_schedule_runs_total",
                  {{"namespace", "s"}, {"kind", "fired"}}),
            4.0);
  EXPECT_EQ(s.Get("delayd_schedule_runs_total",
                  {{"namespace", "s"}, {"kind", "caught_up"}}),
            0.0);  // the newest instant was on time
  EXPECT_EQ(s.Get("delayd_schedule_runs_total",
                  {{"namespace", "s"}, {"kind", "dropped"}}),
            0.0);
}

// Which build answers: delayd_build_info and Stats' version.
TEST(Metrics, TheBuildIsNamedInTheScrapeAndInStats) {
  TestDaemon d(WithMetrics());
  ASSERT_TRUE(d.started());
  const Scrape s = ScrapeUntil(d, [](const Scrape&) { return true; });
  EXPECT_EQ(
      s.Get("delayd_build_info", {{"commit", std::string(BuildCommit())},
                                  {"version", std::string(BuildVersion())}}),
      1.0);
  EXPECT_EQ(s.Count("delayd_build_info"), 1u);
  v1::StatsResponse r;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d.stub().Stats(&ctx, {}, &r).ok());
  EXPECT_EQ(r.version(), VersionAndCommit());
  EXPECT_EQ(r.version().rfind("0.", 0), 0u) << r.version();
  // Any caller may ask, one namespace's reader included.
  v1::StatsRequest one;
  one.set_namespace_("a");
  grpc::ClientContext one_ctx;
  ASSERT_TRUE(d.stub().Stats(&one_ctx, one, &r).ok());
  EXPECT_EQ(r.version(), VersionAndCommit());
}

}  // namespace
}  // namespace delayd::testing
