// One namespace's dispatcher on its own, with fake subscribers, a fake
// clock and (or not) the in-memory fake store: round robin among workers
// with room, in-flight limits, acks, nacks and their retry times, ack
// deadlines, a worker's leaving, dead letters, and payloads read back.
#include "server/core/dispatcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "server/core/payload_ref.h"
#include "server/store/memory/memory_store.h"
#include "tests/common/fake_clock.h"
#include "tests/server/fake_subscriber.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::FakeClock;
using testing::FakeSubscriber;

class DispatcherTest : public ::testing::TestWithParam<bool> {
 protected:
  DispatcherTest() : counters_(4), refs_(4, [](NamespaceId) {}) {
    if (GetParam()) {
      disk_ = std::make_shared<MemoryStore::Disk>();
      store_ = std::make_unique<MemoryStore>(disk_, StoreHooks());
      store_->SetExecutor([this](std::function<void()> run) {
        asio::post(io_, std::move(run));
      });
    }
    dispatcher_ = std::make_unique<Dispatcher>(
        LoopExecutor(io_.get_executor(), nullptr), io_.get_executor(),
        io_.get_executor(), clock_, "jobs", 0, counters_, metrics_, limits_,
        store_.get(), &refs_);
    for (int t = 0; t < 2; ++t) threads_.emplace_back([this] { io_.run(); });
  }
  ~DispatcherTest() override {
    std::promise<void> closed;
    dispatcher_->Close(Status::Unavailable("test over"),
                       [&] { closed.set_value(); });
    closed.get_future().wait();
    if (store_) store_->Close();
    work_.reset();
    io_.stop();
    for (auto& t : threads_) t.join();
  }

  std::shared_ptr<FakeSubscriber> Subscribe(
      std::uint32_t max_in_flight = 100,
      std::chrono::seconds ack_timeout = std::chrono::seconds(60),
      bool keep_leases = false, bool stalled = false) {
    auto sub = std::make_shared<FakeSubscriber>(stalled);
    SubscribeOptions o;
    o.max_in_flight = max_in_flight;
    o.ack_timeout = ack_timeout;
    o.keep_leases = keep_leases;
    std::promise<void> registered;
    dispatcher_->Subscribe(next_id_++, sub, o, [&] { registered.set_value(); });
    registered.get_future().wait();
    return sub;
  }
  // Publishes `n` events with keys k<from>.., stored first (with a store,
  // an event's payload lives there).
  void Publish(int n, int from = 0) {
    std::vector<Event> events;
    Batch batch;
    for (int i = from; i < from + n; ++i) {
      const std::string key = "k" + std::to_string(i);
      const std::uint64_t id = static_cast<std::uint64_t>(i + 1) << 10;
      const std::string payload = "payload " + key;
      Event e{id,
              0,
              store_ ? KeyBlob(key, id) : Blob(key, payload),
              id,
              clock_.Wall(),
              clock_.Wall(),
              0,
              Reason::kExpired};
      if (store_) {
        batch.AddTimer(StoredTimer{0, key, e.fire_time, id, id}, payload);
        batch.FireTimer(
            StoredEvent{id, 0, key, id, e.fire_time, e.fired_at, e.reason, id});
      }
      events.push_back(std::move(e));
    }
    if (store_) {
      ASSERT_TRUE(store_->WriteNow(batch).ok());
    }
    dispatcher_->Publish(std::move(events));
  }
  AckResult Ack(const std::vector<std::uint64_t>& ids) {
    std::promise<AckResult> done;
    dispatcher_->Ack(ids, [&](AckResult r) { done.set_value(std::move(r)); });
    return done.get_future().get();
  }
  LeaseResult Nack(const std::vector<std::uint64_t>& ids,
                   std::optional<std::chrono::nanoseconds> retry_after) {
    std::promise<LeaseResult> done;
    dispatcher_->Nack(ids, retry_after, "boom",
                      [&](LeaseResult r) { done.set_value(std::move(r)); });
    return done.get_future().get();
  }
  // Holds every pool thread until `released` is ready.
  void HoldPool(std::shared_future<void> released) {
    std::atomic<int> blocked{0};
    for (std::size_t t = 0; t < threads_.size(); ++t) {
      asio::post(io_, [&blocked, released] {
        ++blocked;
        released.wait();
      });
    }
    while (blocked.load() < static_cast<int>(threads_.size())) {
      std::this_thread::yield();
    }
  }
  // Moves the fake clock and waits until the dispatcher acted on it.
  void Advance(std::chrono::nanoseconds d) {
    clock_.Advance(d);
    std::promise<void> woke;
    dispatcher_->Wake([&] { woke.set_value(); });
    woke.get_future().wait();
  }
  static std::vector<std::uint64_t> Ids(
      const std::vector<FakeSubscriber::Got>& got) {
    std::vector<std::uint64_t> ids;
    for (const auto& g : got) ids.push_back(g.id);
    return ids;
  }
  void SetPolicy(const Policy& p) {
    dispatcher_->SetPolicy(p);
    Advance(0ns);  // (A barrier through the strand.)
  }

  FakeClock clock_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{
      io_.get_executor()};
  Limits limits_;
  Counters counters_;
  Metrics metrics_;
  NamespaceRefs refs_;
  std::shared_ptr<MemoryStore::Disk> disk_;
  std::unique_ptr<MemoryStore> store_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::vector<std::thread> threads_;
  std::uint64_t next_id_ = 1;
};

TEST_P(DispatcherTest, EventsGoRoundRobinToWorkersWithRoom) {
  auto a = Subscribe(/*max_in_flight=*/3);
  auto b = Subscribe(/*max_in_flight=*/3);
  Publish(6);
  const auto got_a = a->WaitFor(3, 10s);
  const auto got_b = b->WaitFor(3, 10s);
  EXPECT_EQ(got_a.size(), 3u);
  EXPECT_EQ(got_b.size(), 3u);
  for (const auto& g : got_a) {
    EXPECT_EQ(g.attempt, 1u);
    EXPECT_EQ(g.payload, "payload " + g.key);
  }
  // Full: the next waits for room.
  Publish(1, 6);
  Advance(0ns);
  EXPECT_EQ(a->got().size() + b->got().size(), 6u);
  const AckResult acked = Ack({got_a[0].id});
  EXPECT_EQ(acked.acked, 1u);
  EXPECT_TRUE(acked.error.ok());
  const auto more = a->WaitFor(4, 10s);
  ASSERT_EQ(more.size(), 4u);
  EXPECT_EQ(more[3].key, "k6");
}

// A worker held back by its unwritten bytes gets the events that waited
// for it once its stream is written out, with nothing else happening (no
// ack, no new event): the drained stream alone takes the turn.
TEST_P(DispatcherTest, EventsHeldBackByAStreamsBacklogGoOnceItDrains) {
  limits_.worker_backlog_bytes = 1;  // Full with one unwritten event.
  auto w = Subscribe(/*max_in_flight=*/100, 60s, false, /*stalled=*/true);
  Publish(1);
  ASSERT_EQ(w->WaitFor(1, 10s).size(), 1u);
  Publish(4, 1);
  Advance(0ns);
  EXPECT_EQ(w->got().size(), 1u);
  EXPECT_EQ(counters_.of(0).ready.load(), 4u);
  w->Unstall();
  EXPECT_EQ(w->WaitFor(5, 10s).size(), 5u);
  EXPECT_EQ(counters_.of(0).ready.load(), 0u);
}

// Stats read between Publish and the strand's taking the events (right after
// recovery, or a firing) count them already, and once only.
TEST_P(DispatcherTest, PublishedEventsCountAsReadyBeforeTheStrandRuns) {
  std::promise<void> release;
  HoldPool(release.get_future().share());
  Publish(3);
  EXPECT_EQ(counters_.ready.load(), 3u);
  release.set_value();
  Advance(0ns);  // (A barrier through the strand.)
  EXPECT_EQ(counters_.ready.load(), 3u);
  auto w = Subscribe();
  EXPECT_EQ(w->WaitFor(3, 10s).size(), 3u);
  EXPECT_EQ(counters_.ready.load(), 0u);
  EXPECT_EQ(counters_.in_flight.load(), 3u);
}

TEST_P(DispatcherTest, AnAckFromOutsideThePoolIsTakenOnItsThread) {
  auto w = Subscribe();
  Publish(1);
  const auto got = w->WaitFor(1, 10s);
  ASSERT_EQ(got.size(), 1u);
  // Every pool thread held: what happens now happens on this thread.
  std::promise<void> release;
  HoldPool(release.get_future().share());
  std::promise<AckResult> done;
  dispatcher_->Ack({got[0].id},
                   [&](AckResult r) { done.set_value(std::move(r)); });
  EXPECT_EQ(counters_.acked.load(), 1u) << "the ack's turn waited for the pool";
  release.set_value();
  EXPECT_EQ(done.get_future().get().acked, 1u);
}

TEST_P(DispatcherTest, AckOfUnknownIdsSaysSo) {
  auto w = Subscribe();
  Publish(1);
  const auto got = w->WaitFor(1, 10s);
  ASSERT_EQ(got.size(), 1u);
  const AckResult r = Ack({got[0].id, 999999});
  EXPECT_EQ(r.acked, 1u);
  ASSERT_EQ(r.unknown.size(), 1u);
  EXPECT_EQ(r.unknown[0], 999999u);
  if (store_) {
    EXPECT_EQ(disk_->events(), 0u);
  }
}

TEST_P(DispatcherTest, NackedEventComesBackAfterItsRetryTime) {
  auto w = Subscribe();
  Publish(1);
  auto got = w->WaitFor(1, 10s);
  ASSERT_EQ(got.size(), 1u);
  const WallNanos nacked_at = clock_.Wall();
  EXPECT_EQ(Nack({got[0].id}, 5s).done, 1u);
  Advance(5s - 1ms);
  EXPECT_EQ(w->got().size(), 1u);
  if (store_) {
    // The retry time is kept with its fate, for a restart (written after
    // the Nack's answer, without waiting for it).
    store_->Sync();
    const auto fate = disk_->FateOf(got[0].id);
    ASSERT_TRUE(fate.has_value());
    EXPECT_EQ(fate->attempts, 1u);
    EXPECT_EQ(fate->retry_at, nacked_at + 5'000'000'000);
  }
  Advance(1ms);
  got = w->WaitFor(2, 10s);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].id, got[0].id);
  EXPECT_EQ(got[1].attempt, 2u);
}

TEST_P(DispatcherTest, MissedAckDeadlineRedeliversToAnotherWorker) {
  auto slow = Subscribe(/*max_in_flight=*/1, /*ack_timeout=*/10s);
  Publish(1);
  ASSERT_EQ(slow->WaitFor(1, 10s).size(), 1u);
  auto other = Subscribe();
  // Deadline, then the first backoff (1 s by default).
  Advance(10s);
  Advance(1s);
  const auto got = other->WaitFor(1, 10s);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].attempt, 2u);
}

TEST_P(DispatcherTest, ALeavingWorkersEventsGoToOthersAtOnce) {
  auto leaving = Subscribe();
  Publish(2);
  ASSERT_EQ(leaving->WaitFor(2, 10s).size(), 2u);
  auto staying = Subscribe();
  dispatcher_->Unsubscribe(1);
  const auto got = staying->WaitFor(2, 10s);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].key, "k0");  // Oldest first.
  EXPECT_EQ(got[0].attempt, 2u);
}

TEST_P(DispatcherTest, WhatAWorkerNeverGotIsNotCountedAsAnAttempt) {
  Policy p;
  p.max_attempts = 1;
  SetPolicy(p);
  // Handed to its stream, never written to its client.
  auto stalled = Subscribe(100, 60s, /*keep_leases=*/false, /*stalled=*/true);
  Publish(2);
  ASSERT_EQ(stalled->WaitFor(2, 10s).size(), 2u);
  auto staying = Subscribe();
  dispatcher_->Unsubscribe(1);
  const auto got = staying->WaitFor(2, 10s);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].key, "k0");  // Oldest first.
  EXPECT_EQ(got[0].attempt, 1u);
  EXPECT_EQ(got[1].attempt, 1u);
  EXPECT_EQ(counters_.of(0).dead_letters.load(), 0u);
}

TEST_P(DispatcherTest, AWorkerThatKeepsLeasesLeavesItsEventsInFlight) {
  auto pulling = Subscribe(100, 60s, /*keep_leases=*/true);
  Publish(2);
  const auto got = pulling->WaitFor(2, 10s);
  ASSERT_EQ(got.size(), 2u);
  auto staying = Subscribe();
  dispatcher_->Unsubscribe(1);
  Advance(0ns);  // (A barrier through the strand.)
  EXPECT_EQ(counters_.of(0).in_flight.load(), 2u);
  EXPECT_EQ(counters_.of(0).ready.load(), 0u);
  EXPECT_TRUE(staying->got().empty());
  // Acknowledged by id after the stream is gone...
  const AckResult acked = Ack({got[0].id});
  EXPECT_EQ(acked.acked, 1u);
  EXPECT_TRUE(acked.unknown.empty());
  // ...and the other goes to another worker once its deadline (and the
  // first retry's backoff) passed.
  Advance(61s);
  Advance(2s);
  const auto again = staying->WaitFor(1, 10s);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id, got[1].id);
  EXPECT_EQ(again[0].attempt, 2u);
}

TEST_P(DispatcherTest, LastFailedAttemptMakesADeadLetter) {
  Policy p;
  p.max_attempts = 1;
  SetPolicy(p);
  auto w = Subscribe();
  Publish(1);
  const auto got = w->WaitFor(1, 10s);
  ASSERT_EQ(got.size(), 1u);
  Nack({got[0].id}, std::nullopt);
  std::promise<DeadLetterPage> page;
  dispatcher_->ListDeadLetters(
      0, 10, 1 << 20, [&](DeadLetterPage p) { page.set_value(std::move(p)); });
  const DeadLetterPage dead = page.get_future().get();
  ASSERT_TRUE(dead.error.ok()) << dead.error.message();
  ASSERT_EQ(dead.letters.size(), 1u);
  EXPECT_EQ(dead.letters[0].event.id, got[0].id);
  EXPECT_EQ(dead.letters[0].error, "boom");
  EXPECT_EQ(dead.letters[0].event.blob.payload(), "payload k0");
  EXPECT_EQ(counters_.of(0).dead_letters.load(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Store, DispatcherTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "MemoryStore" : "NoStore";
                         });

}  // namespace
}  // namespace delayd
