// The scheduler core without gRPC: many client threads against partitions
// and dispatchers, so that ThreadSanitizer checks all of the core's
// concurrency with no suppressions.
#include "server/core/scheduler.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "server/store/memory/memory_store.h"
#include "tests/common/thread_names.h"
#include "tests/server/fake_subscriber.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;

using testing::FakeSubscriber;

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() : scheduler_(Options()) {
    EXPECT_TRUE(scheduler_.Start().ok());
    EXPECT_TRUE(scheduler_.Intern("default", &pin_).ok());
    ns_ = pin_.id();
  }
  static Scheduler::Options Options() {
    Scheduler::Options o;
    o.partitions = 4;
    o.threads = 3;
    return o;
  }
  std::shared_ptr<FakeSubscriber> Worker(
      std::uint32_t max_in_flight, bool stalled = false,
      std::chrono::nanoseconds ack_timeout = std::chrono::seconds(30)) {
    auto sub = std::make_shared<FakeSubscriber>(stalled);
    std::promise<void> registered;
    SubscribeOptions options;
    options.max_in_flight = max_in_flight;
    options.ack_timeout = ack_timeout;
    scheduler_.dispatcher(ns_).Subscribe(scheduler_.NewSubscriberId(), sub,
                                         options,
                                         [&] { registered.set_value(); });
    registered.get_future().wait();
    return sub;
  }
  OpResult Apply(Op op) {
    std::promise<OpResult> p;
    scheduler_.Submit(std::move(op), [&](OpResult r) { p.set_value(r); });
    return p.get_future().get();
  }

  Scheduler scheduler_;
  NamespacePin pin_;  // Keeps "default" for the test.
  NamespaceId ns_ = 0;
};

// A unary operation on a free partition is applied and answered on the
// caller's thread: no hop to a scheduler thread and back.
TEST_F(SchedulerTest, ItsPoolThreadsAreNamed) {
  EXPECT_EQ(testing::ThreadsNamed("delayd-pool"), 3);  // Options().threads
}

TEST_F(SchedulerTest, OperationOnAFreePartitionRunsOnTheCallingThread) {
  for (int i = 0; i < 10; ++i) {
    std::optional<std::thread::id> ran_on;
    scheduler_.Submit(SetOp{ns_, Blob("k" + std::to_string(i), ""),
                            WallNow() + 3'600'000'000'000},
                      [&](OpResult r) {
                        EXPECT_TRUE(r.status.ok());
                        ran_on = std::this_thread::get_id();
                      });
    ASSERT_TRUE(ran_on.has_value()) << "not answered before Submit returned";
    EXPECT_EQ(*ran_on, std::this_thread::get_id());
  }
}

// An answer never runs holding its partition: while one answer is running
// (and waits), an operation on the same partition from another thread is
// applied and answered.
TEST_F(SchedulerTest, AnswersRunWithoutHoldingThePartition) {
  ASSERT_TRUE(Apply(SetOp{ns_, Blob("k", ""), WallNow() + 3'600'000'000'000})
                  .status.ok());
  std::promise<void> in_answer;
  std::promise<OpResult> other;
  std::future<OpResult> other_result = other.get_future();
  std::future<void> holder = std::async(std::launch::async, [&] {
    scheduler_.Submit(MoveOp{ns_, "k", WallNow() + 3'600'000'000'000},
                      [&](OpResult) {
                        in_answer.set_value();
                        // Waits (bounded) for the other operation: it would
                        // wait for this answer if the answer held the lock.
                        other_result.wait_for(10s);
                      });
  });
  in_answer.get_future().wait();
  std::future<void> submitted = std::async(std::launch::async, [&] {
    scheduler_.Submit(RemoveOp{ns_, "k"},
                      [&](OpResult r) { other.set_value(std::move(r)); });
  });
  ASSERT_EQ(submitted.wait_for(10s), std::future_status::ready);
  holder.wait();
  ASSERT_EQ(other_result.wait_for(0s), std::future_status::ready)
      << "the operation waited for another's answer";
  EXPECT_TRUE(other_result.get().status.ok());
}

TEST_F(SchedulerTest, ConcurrentClientsEveryTimerFiresOnceNeverEarly) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 1500;
  auto worker = Worker(100000);
  std::vector<std::thread> clients;
  std::atomic<int> accepted{0};
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < kPerThread; ++i) {
        SetOp set{
            ns_, Blob("t" + std::to_string(t) + "-" + std::to_string(i), "p"),
            WallNow() + std::uniform_int_distribution<int>(0, 50'000'000)(rng)};
        scheduler_.Submit(std::move(set), [&](OpResult r) {
          if (r.status.ok()) accepted.fetch_add(1);
        });
      }
    });
  }
  for (auto& c : clients) c.join();
  const auto got = worker->WaitFor(kThreads * kPerThread, 10s);
  EXPECT_EQ(accepted.load(), kThreads * kPerThread);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kThreads * kPerThread));
  std::set<std::string> keys;
  std::set<std::uint64_t> ids;
  for (const auto& g : got) {
    EXPECT_GE(g.received, g.fire_time) << g.key;
    keys.insert(g.key);
    ids.insert(g.id);
  }
  EXPECT_EQ(keys.size(), got.size()) << "a timer fired twice";
  EXPECT_EQ(ids.size(), got.size()) << "an event id was reused";
}

TEST_F(SchedulerTest, RemoveRacingExpiryIsEitherRemovedOrFiredNeverBoth) {
  constexpr int kTimers = 2000;
  auto worker = Worker(100000);
  const WallNanos at = WallNow() + 20'000'000;
  for (int i = 0; i < kTimers; ++i) {
    ASSERT_TRUE(
        Apply(SetOp{ns_, Blob("k" + std::to_string(i), ""), at}).status.ok());
  }
  std::atomic<int> removed{0};
  std::vector<std::thread> removers;
  for (int t = 0; t < 2; ++t) {
    removers.emplace_back([&, t] {
      for (int i = t; i < kTimers; i += 2) {
        std::promise<void> done;
        scheduler_.Submit(RemoveOp{ns_, "k" + std::to_string(i)},
                          [&](OpResult r) {
                            if (r.status.ok()) removed.fetch_add(1);
                            done.set_value();
                          });
        done.get_future().wait();
      }
    });
  }
  for (auto& r : removers) r.join();
  const std::size_t fired = kTimers - removed.load();
  const auto got = worker->WaitFor(fired, 5s);
  EXPECT_EQ(got.size(), fired);
  // Nothing more arrives: a marker set after everything fires alone.
  ASSERT_TRUE(Apply(SetOp{ns_, Blob("marker", ""), WallNow()}).status.ok());
  const auto all = worker->WaitFor(fired + 1, 5s);
  ASSERT_EQ(all.size(), fired + 1);
  EXPECT_EQ(all.back().key, "marker");
  EXPECT_EQ(scheduler_.counters().pending.load(), 0u);
}

TEST_F(SchedulerTest, AcksFromManyThreadsRetireEveryEvent) {
  constexpr int kTimers = 3000;
  auto worker = Worker(100000);
  std::vector<Op> ops;
  for (int i = 0; i < kTimers; ++i) {
    ops.push_back(SetOp{ns_, Blob("k" + std::to_string(i), ""), WallNow()});
  }
  std::promise<std::vector<OpResult>> results;
  scheduler_.SubmitBatch(std::move(ops), [&](std::vector<OpResult> r) {
    results.set_value(std::move(r));
  });
  for (const auto& r : results.get_future().get()) ASSERT_TRUE(r.status.ok());
  const auto got = worker->WaitFor(kTimers, 10s);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kTimers));
  std::atomic<std::uint32_t> acked{0};
  std::vector<std::thread> ackers;
  for (int t = 0; t < 3; ++t) {
    ackers.emplace_back([&, t] {
      std::vector<std::uint64_t> ids;
      for (std::size_t i = t; i < got.size(); i += 3) ids.push_back(got[i].id);
      std::promise<void> done;
      scheduler_.dispatcher(ns_).Ack(ids, [&](AckResult r) {
        acked.fetch_add(r.acked);
        done.set_value();
      });
      done.get_future().wait();
    });
  }
  for (auto& a : ackers) a.join();
  EXPECT_EQ(acked.load(), static_cast<std::uint32_t>(kTimers));
  EXPECT_EQ(scheduler_.counters().in_flight.load(), 0u);
  EXPECT_EQ(scheduler_.counters().ready.load(), 0u);
}

TEST_F(SchedulerTest, ShutdownEndsSubscribersAndRefusesOperations) {
  auto worker = Worker(10);
  std::promise<void> done;
  scheduler_.Shutdown([&] { done.set_value(); });
  EXPECT_EQ(done.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(worker->WaitEnded(5s));
  EXPECT_EQ(worker->end_code(), Code::kUnavailable);
  EXPECT_EQ(Apply(SetOp{ns_, Blob("k", ""), WallNow()}).status.code(),
            Code::kUnavailable);
}

// A worker whose stream takes nothing (a wedged process on a live
// connection) holds at most max_in_flight events, however often they time
// out and go to another worker; once its stream drains it gets more.
TEST_F(SchedulerTest, StalledWorkerNeverHoldsMoreThanItsRoom) {
  auto stalled = Worker(10, /*stalled=*/true, 100ms);
  const WallNanos now = WallNow();
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(
        Apply(SetOp{ns_, Blob("k" + std::to_string(i), "p"), now}).status.ok());
  }
  ASSERT_EQ(stalled->WaitFor(10, 5000ms).size(), 10u);
  // Another worker takes everything, the stalled one's ten among them
  // (after their ack timeout), while the stalled one gets nothing more.
  auto live = Worker(100);  // Full once it has all 100.
  std::set<std::uint64_t> ids;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (ids.size() < 100 && std::chrono::steady_clock::now() < deadline) {
    for (const auto& g : live->WaitFor(ids.size() + 1, 1000ms)) {
      ids.insert(g.id);
    }
  }
  EXPECT_EQ(ids.size(), 100u);
  EXPECT_EQ(stalled->WaitFor(11, 300ms).size(), 10u);
  // Written out at last: it has room again, and takes the next event.
  stalled->Unstall();
  ASSERT_TRUE(Apply(SetOp{ns_, Blob("after", "p"), WallNow()}).status.ok());
  const auto got = stalled->WaitFor(11, 5000ms);
  EXPECT_GE(got.size(), 11u);
}

// Drains kTimers timers of 1 KiB (one publish: one partition) to a watcher
// that writes nothing, under `limits`; over the in-memory store if
// `with_store`. Returns how many events it was given before it was ended (-1 if
// it was not ended with RESOURCE_EXHAUSTED, -2 if the scheduler did not start:
// nothing after that would be answered).
constexpr int kTimers = 1000;
constexpr std::size_t kPayload = 1024;
int GivenToAStalledWatcher(bool with_store, Limits limits) {
  Scheduler::Options o;
  o.partitions = 1;
  o.threads = 2;
  o.limits = limits;
  if (with_store) {
    o.store = MemoryStore::Opener(std::make_shared<MemoryStore::Disk>());
  }
  Scheduler scheduler(o);
  if (const Status s = scheduler.Start(); !s.ok()) {
    ADD_FAILURE() << "Start: " << s.message();
    return -2;
  }
  NamespacePin pin;
  EXPECT_TRUE(scheduler.Intern("default", &pin).ok());
  const NamespaceId ns = pin.id();
  auto watcher = std::make_shared<FakeSubscriber>(/*stalled=*/true);
  std::promise<void> registered;
  SubscribeOptions options;
  options.watcher = true;
  scheduler.dispatcher(ns).Subscribe(scheduler.NewSubscriberId(), watcher,
                                     options, [&] { registered.set_value(); });
  registered.get_future().wait();
  for (int i = 0; i < kTimers; ++i) {
    std::promise<OpResult> set;
    scheduler.Submit(
        SetOp{ns, Blob("k" + std::to_string(i), std::string(kPayload, 'p')),
              WallNow() + 3'600'000'000'000},
        [&](OpResult r) { set.set_value(std::move(r)); });
    EXPECT_TRUE(set.get_future().get().status.ok());
  }
  std::promise<std::uint64_t> drained;
  scheduler.Drain(ns, [&](Status s, std::uint64_t n) {
    EXPECT_TRUE(s.ok());
    drained.set_value(n);
  });
  EXPECT_EQ(drained.get_future().get(), static_cast<std::uint64_t>(kTimers));
  if (!watcher->WaitEnded(5s) ||
      watcher->end_code() != Code::kResourceExhausted) {
    return -1;
  }
  return static_cast<int>(watcher->WaitFor(kTimers, 0ms).size());
}

// A large publish (a Drain of a whole namespace) reaches watchers a chunk
// at a time: one that writes nothing is ended once past its backlog limit,
// given at most one chunk (32 events) more, never the whole publish. With a
// store too, where the copies wait for their payloads, read a chunk at a
// time off the strand.
TEST(SchedulerWatchers, StalledWatcherIsEndedWithinAChunkOfItsLimit) {
  for (const bool store : {false, true}) {
    SCOPED_TRACE(store ? "with a store" : "in memory");
    Limits bytes;
    bytes.watcher_backlog_bytes = 64 << 10;
    // Past the limit at the 64th event (about 1 KiB each); its chunk is the
    // last it is given.
    const int given = GivenToAStalledWatcher(store, bytes);
    EXPECT_GT(given, static_cast<int>((64u << 10) / (kPayload + 8)));
    EXPECT_LE(given, static_cast<int>((64u << 10) / kPayload + 32));
    // Over the event limit: with a store, more copies than that waiting for
    // their payloads end it too.
    Limits events;
    events.watcher_backlog = 100;
    const int given_events = GivenToAStalledWatcher(store, events);
    EXPECT_GE(given_events, 0);
    EXPECT_LE(given_events, 100 + 32);
  }
}

}  // namespace
}  // namespace delayd
