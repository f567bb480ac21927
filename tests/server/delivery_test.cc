// Delivery against a daemon on loopback: workers sharing the load, ack
// timeouts, disconnects, late workers, watchers and flow control.
#include <gtest/gtest.h>

#include "tests/server/service_fixture.h"

namespace delayd::testing {
namespace {

TEST_F(DelaydTest, WorkersShareTheLoadEachEventOnce) {
  TestStream a(d_.stub(), TestStream::Worker("default", 5));
  TestStream b(d_.stub(), TestStream::Worker("default", 5));
  ASSERT_TRUE(a.WaitRegistered());
  ASSERT_TRUE(b.WaitRegistered());
  // Both workers ack what they get until 40 events are done.
  for (int i = 0; i < 40; ++i)
    ASSERT_TRUE(Set("k" + std::to_string(i), 0).ok());
  std::set<std::uint64_t> acked;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (acked.size() < 40 && std::chrono::steady_clock::now() < deadline) {
    for (TestStream* s : {&a, &b}) {
      std::vector<std::uint64_t> fresh;
      for (const auto& e : s->WaitFor(acked.size() / 2 + 1, 50ms)) {
        if (!acked.count(e.id())) fresh.push_back(e.id());
      }
      if (!fresh.empty()) {
        ASSERT_TRUE(Ack(fresh).ok());
        acked.insert(fresh.begin(), fresh.end());
      }
    }
  }
  ASSERT_EQ(acked.size(), 40u);
  EXPECT_GT(a.Events().size(), 0u);
  EXPECT_GT(b.Events().size(), 0u);
  EXPECT_EQ(a.Events().size() + b.Events().size(), 40u) << "no duplicates";
}

TEST_F(DelaydTest, UnackedEventIsRedeliveredAfterAckTimeout) {
  TestStream w(d_.stub(), TestStream::Worker("default", 10, 200));
  ASSERT_TRUE(w.WaitRegistered());
  ASSERT_TRUE(Set("k", 0).ok());
  auto events = w.WaitFor(2);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].id(), events[1].id());
  EXPECT_EQ(events[0].attempt(), 1u);
  EXPECT_EQ(events[1].attempt(), 2u);
  v1::AckResponse ack;
  ASSERT_TRUE(Ack({events[0].id()}, &ack).ok());
  EXPECT_EQ(ack.acked(), 1u);
  EXPECT_EQ(Stats().in_flight_events(), 0u);
}

TEST_F(DelaydTest, DisconnectedWorkersEventsGoToAnother) {
  auto first = std::make_unique<TestStream>(d_.stub(),
                                            TestStream::Worker("default", 10));
  ASSERT_TRUE(first->WaitRegistered());
  ASSERT_TRUE(Set("k", 0, "job").ok());
  auto got = first->WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  first.reset();  // Disconnects without acking.
  TestStream second(d_.stub(), TestStream::Worker("default", 10));
  auto again = second.WaitFor(1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id(), got[0].id());
  EXPECT_EQ(again[0].attempt(), 2u);
  EXPECT_EQ(again[0].payload(), "job");
}

TEST_F(DelaydTest, EventsWaitForALateWorker) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Set("k" + std::to_string(i), 0).ok());
  // Wait until all five have fired and are waiting.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (Stats().ready_events() < 5 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(Stats().ready_events(), 5u);
  TestStream w(d_.stub(), TestStream::Worker("default"));
  EXPECT_EQ(w.WaitFor(5).size(), 5u);
}

TEST_F(DelaydTest, WatcherGetsACopyOfEveryEvent) {
  TestStream watcher(d_.stub(), TestStream::Watcher("default"));
  TestStream worker(d_.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(watcher.WaitRegistered());
  ASSERT_TRUE(worker.WaitRegistered());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Set("k" + std::to_string(i), 0).ok());
  EXPECT_EQ(watcher.WaitFor(3).size(), 3u);
  EXPECT_EQ(worker.WaitFor(3).size(), 3u);
  // Watchers do not ack: nothing is outstanding on their account.
  ASSERT_TRUE(Ack(Ids(worker.Events())).ok());
  EXPECT_EQ(Stats().in_flight_events(), 0u);
  EXPECT_EQ(Stats().ready_events(), 0u);
}

// (On a cluster each owner delivers its share of max_in_flight, at least
// one: relay_test checks that.)
#ifndef DELAYD_API_ON_CLUSTER
TEST_F(DelaydTest, FlowControlHoldsEventsBeyondMaxInFlight) {
  TestStream w(d_.stub(), TestStream::Worker("default", 2));
  ASSERT_TRUE(w.WaitRegistered());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Set("k" + std::to_string(i), 0).ok());
  ASSERT_TRUE(WaitDispatched(5));
  auto first = w.WaitFor(2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(Stats().in_flight_events(), 2u);
  EXPECT_EQ(Stats().ready_events(), 3u);
  EXPECT_EQ(w.Events().size(), 2u) << "more than max_in_flight delivered";
  ASSERT_TRUE(Ack(Ids(first)).ok());
  auto more = w.WaitFor(4);
  ASSERT_EQ(more.size(), 4u);
  ASSERT_TRUE(Ack({more[2].id(), more[3].id()}).ok());
  EXPECT_EQ(w.WaitFor(5).size(), 5u);
}
#endif

TEST_F(DelaydTest, MaxEventsBoundsWhatAStreamIsGiven) {
  auto request = TestStream::Worker("default", 10);
  request.set_max_events(3);
  TestStream w(d_.stub(), request);
  ASSERT_TRUE(w.WaitRegistered());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Set("k" + std::to_string(i), 0).ok());
  ASSERT_TRUE(WaitDispatched(5));
  auto first = w.WaitFor(3);
  ASSERT_EQ(first.size(), 3u);
  // (On a cluster, an owner may have handed the stream's relay an event
  // beyond the three, which the relay gives back: awaited.)
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  auto s = Stats();
  while ((s.in_flight_events() != 3 || s.ready_events() != 2) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);  // Polls the condition, bounded.
    s = Stats();
  }
  EXPECT_EQ(s.in_flight_events(), 3u);
  EXPECT_EQ(s.ready_events(), 2u);
  // Acknowledging frees room under max_in_flight, but the stream has had
  // its three: the other two wait for another worker, not yet attempted.
  ASSERT_TRUE(Ack(Ids(first)).ok());
  TestStream other(d_.stub(), TestStream::Worker("default", 10));
  auto rest = other.WaitFor(2);
  ASSERT_EQ(rest.size(), 2u);
  for (const auto& e : rest) EXPECT_EQ(e.attempt(), 1u);
  EXPECT_EQ(w.Events().size(), 3u);
}

#ifndef DELAYD_API_ON_CLUSTER
// A stream's write timer is armed by a write that finds it idle, and when
// it goes off it waits out the rest of a later write's timeout (stream.h):
// a stream written to for several timeouts while its client reads is not
// cut, and once the client stops reading the stream is cut all the same.
TEST(StreamWriteTimeout, AStreamIsCutOnlyOnceItsClientStopsReading) {
  // (Far beyond a small write's completion while its client reads, even
  // under a sanitizer with another test beside it.)
  constexpr auto kTimeout = 1s;
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  o.scheduler.limits.stream_write_timeout = kTimeout;
  TestDaemon d(o);
  ASSERT_TRUE(d.started());
  grpc::ClientContext ctx;
  auto reader = d.stub().Subscribe(&ctx, TestStream::Worker("default", 10000));
  v1::SubscribeResponse msg;
  ASSERT_TRUE(reader->Read(&msg));  // (Registered.)
  // Five timeouts of events, each read as it comes and acknowledged.
  const auto read_until = std::chrono::steady_clock::now() + 5 * kTimeout;
  int set = 0, read = 0;
  while (std::chrono::steady_clock::now() < read_until) {
    ASSERT_TRUE(Set(d.stub(), "", "a" + std::to_string(set++), 0, "p").ok());
    while (read < set) {
      ASSERT_TRUE(reader->Read(&msg))
          << "cut while its client read, after " << read << " events";
      read += msg.events_size();
      ASSERT_TRUE(
          AckEvents(d.stub(), "", {msg.events().begin(), msg.events().end()})
              .ok());
    }
  }
  EXPECT_EQ(Stats(d.stub()).workers(), 1u);
  // The client stops reading: events of 60 KiB (60 MB, past what the
  // stream's windows and buffers take) make its write stall, and the stream
  // is cut (the worker is gone) once that write has waited a timeout.
  const std::string big(60 << 10, 'b');
  for (int n = 0; n < 1000 && Stats(d.stub()).workers() != 0;) {
    for (int i = 0; i < 20; ++i, ++n) {
      ASSERT_TRUE(Set(d.stub(), "", "b" + std::to_string(n), 0, big).ok());
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (Stats(d.stub()).workers() != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);  // Polls the condition, bounded.
  }
  EXPECT_EQ(Stats(d.stub()).workers(), 0u)
      << "a stream whose client stopped reading was not cut";
  ctx.TryCancel();
}
#endif

}  // namespace
}  // namespace delayd::testing
