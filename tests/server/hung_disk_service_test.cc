// A store whose log stops taking writes (tests/common/power_loss_fs.h,
// HoldLogWrites): only what waits for durability waits. Events already in
// memory are still delivered and acknowledged, reads answer, and once the
// writer's backlog passes its bound new changes are refused, changing
// nothing, instead of taking memory without bound. A payload read that
// hangs holds only the events it reads, and those it then does not send
// keep their dispatch-rate tokens.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "tests/server/hung_disk.h"

namespace delayd::testing {
namespace {

// Three timers due at once for `worker`, a worker with room for one:
// one delivered, the other two waiting in memory for room.
void OneDeliveredTwoReady(TestDaemon& d, TestStream& worker) {
  ASSERT_TRUE(worker.WaitRegistered());
  for (const char* key : {"e0", "e1", "e2"}) {
    ASSERT_TRUE(Set(d.stub(), "", key, 1).ok());
  }
  ASSERT_EQ(worker.WaitFor(1).size(), 1u);
  ASSERT_TRUE(Eventually([&] { return Stats(d.stub()).ready_events() == 2; }));
}

// Under --fsync 1s a set's write, and an ack's, hangs on the thread that
// takes it (a gRPC thread, a pool thread), and at most one thread at a time
// (the others' writes queue for the store's writer); under always, on the
// store's writer.
void DeliveryAndAcksGoOnWhileTheLogHangs(FsyncPolicy fsync) {
  HoldingDaemon held([fsync](DelaydServer::Options&, RocksOptions& store) {
    store.fsync = fsync;
  });
  auto& fs = held.fs;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(Set(d.stub(), "", "waiting", 3'600'000).ok());
  // One event at a time: the other two wait in memory for room.
  TestStream worker(d.stub(), TestStream::Worker("default", 1));
  ASSERT_NO_FATAL_FAILURE(OneDeliveredTwoReady(d, worker));

  fs->HoldLogWrites(true);
  std::vector<std::thread> threads;
  Release release{fs.get(), threads};
  std::atomic<bool> set_done{false};
  threads.emplace_back([&] {
    EXPECT_TRUE(Set(d.stub(), "", "late", 3'600'000).ok());
    set_done = true;
  });
  ASSERT_TRUE(Eventually([&] { return fs->held_log_writes() > 0; }))
      << "no write reached the log";

  // Each ack's answer waits for the disk, but the ack itself frees room at
  // once: the next event in memory is delivered.
  for (std::size_t n = 1; n <= 3; ++n) {
    const auto got = worker.WaitFor(n, 10s);
    ASSERT_EQ(got.size(), n) << "delivery stopped while the log hangs";
    threads.emplace_back([&d, id = got[n - 1].id()] {
      EXPECT_TRUE(Ack(d.stub(), "", {id}).ok());
    });
  }
  // Reads answer too, the new timer's included (it is in memory).
  EXPECT_TRUE(Get(d.stub(), "", "waiting").ok());
  EXPECT_TRUE(Get(d.stub(), "", "late").ok());
  EXPECT_FALSE(set_done) << "acknowledged before it was written";
  EXPECT_GT(fs->held_log_writes(), 0);

  fs->HoldLogWrites(false);
  for (auto& t : threads) t.join();
  EXPECT_TRUE(set_done);
  EXPECT_TRUE(
      Eventually([&] { return Stats(d.stub()).in_flight_events() == 0; }));
}

TEST(StalledStore, DeliveryAndAcksGoOnWhileTheLogHangs) {
  DeliveryAndAcksGoOnWhileTheLogHangs(FsyncPolicy::kAlways);
}

TEST(StalledStore, DeliveryAndAcksGoOnWhileTheLogHangsUnderAnInterval) {
  DeliveryAndAcksGoOnWhileTheLogHangs(FsyncPolicy::kInterval);
}

// As above, with a timer falling due while the log hangs: its firing's
// write waits for the disk on whichever thread writes it, and the pool
// (`threads` threads) still delivers and takes acks of what is in memory.
void DeliveryGoesOnWhileAFiringWaitsForTheLog(std::uint32_t threads) {
  HoldingDaemon held([threads](DelaydServer::Options& o, RocksOptions&) {
    o.scheduler.threads = threads;
  });
  auto& fs = held.fs;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  TestStream worker(d.stub(), TestStream::Worker("default", 1));
  ASSERT_NO_FATAL_FAILURE(OneDeliveredTwoReady(d, worker));
  ASSERT_TRUE(Set(d.stub(), "", "due", 300).ok());  // Answered: durable.

  fs->HoldLogWrites(true);
  std::vector<std::thread> threads_started;
  Release release{fs.get(), threads_started};
  ASSERT_TRUE(Eventually([&] { return fs->held_log_writes() > 0; }))
      << "the firing's write did not reach the log";
  for (std::size_t n = 1; n <= 3; ++n) {
    const auto got = worker.WaitFor(n, 10s);
    ASSERT_EQ(got.size(), n) << "delivery stopped while a firing's write "
                                "waits for the log, with "
                             << threads << " pool thread(s)";
    threads_started.emplace_back([&d, id = got[n - 1].id()] {
      EXPECT_TRUE(Ack(d.stub(), "", {id}).ok());
    });
  }
  fs->HoldLogWrites(false);
  for (auto& t : threads_started) t.join();
  threads_started.clear();
  EXPECT_EQ(worker.WaitFor(4, 10s).size(), 4u) << "the due timer was lost";
}

TEST(StalledStore, OnePoolThreadDeliversWhileAFiringWaitsForTheLog) {
  DeliveryGoesOnWhileAFiringWaitsForTheLog(1);
}

TEST(StalledStore, TwoPoolThreadsDeliverWhileAFiringWaitsForTheLog) {
  DeliveryGoesOnWhileAFiringWaitsForTheLog(2);
}

// As above, with an ack's write the first to wait for the log: a pool
// thread that takes an ack writes it itself (under --fsync 1s) only while
// another pool thread remains (Dispatcher::SetWriteAcksHere), and off the
// namespace's strand, so delivery goes on either way.
void DeliveryGoesOnWhileAnAcksWriteWaitsForTheLog(std::uint32_t threads) {
  HoldingDaemon held([threads](DelaydServer::Options& o, RocksOptions& store) {
    o.scheduler.threads = threads;
    store.fsync = FsyncPolicy::kInterval;
  });
  auto& fs = held.fs;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  TestStream worker(d.stub(), TestStream::Worker("default", 1));
  ASSERT_NO_FATAL_FAILURE(OneDeliveredTwoReady(d, worker));

  fs->HoldLogWrites(true);
  std::vector<std::thread> acks;
  Release release{fs.get(), acks};
  for (std::size_t n = 1; n <= 3; ++n) {
    const auto got = worker.WaitFor(n, 10s);
    ASSERT_EQ(got.size(), n) << "delivery stopped while an ack's write "
                                "waits for the log, with "
                             << threads << " pool thread(s)";
    acks.emplace_back([&d, id = got[n - 1].id()] {
      EXPECT_TRUE(Ack(d.stub(), "", {id}).ok());
    });
    if (n == 1) {
      ASSERT_TRUE(Eventually([&] { return fs->held_log_writes() > 0; }))
          << "the ack's write did not reach the log";
    }
  }
  fs->HoldLogWrites(false);
  for (auto& t : acks) t.join();
  acks.clear();
  EXPECT_TRUE(
      Eventually([&] { return Stats(d.stub()).in_flight_events() == 0; }));
}

TEST(StalledStore, OnePoolThreadDeliversWhileAnAcksWriteWaitsForTheLog) {
  DeliveryGoesOnWhileAnAcksWriteWaitsForTheLog(1);
}

TEST(StalledStore, TwoPoolThreadsDeliverWhileAnAcksWriteWaitsForTheLog) {
  DeliveryGoesOnWhileAnAcksWriteWaitsForTheLog(2);
}

TEST(StalledStore, ChangesAreRefusedOnceTheBacklogIsFull) {
  constexpr std::size_t kPayload = 4096;
  constexpr int kSetters = 10;
  HoldingDaemon held([](DelaydServer::Options&, RocksOptions& store) {
    store.max_backlog_bytes = 4 * kPayload;
  });
  auto& fs = held.fs;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  fs->HoldLogWrites(true);
  std::vector<grpc::Status> results(kSetters);
  std::vector<std::atomic<bool>> answered(kSetters);
  std::vector<std::thread> setters;
  {
    Release release{fs.get(), setters};
    // One at a time, each once the one before is answered (refused) or
    // applied (and so queued): calls arriving together may all pass the
    // check before any of them is queued, which the bound allows.
    for (int i = 0; i < kSetters; ++i) {
      const std::uint64_t pending = Stats(d.stub()).pending_timers();
      setters.emplace_back([&, i] {
        results[i] = Set(d.stub(), "", "k" + std::to_string(i), 3'600'000,
                         std::string(kPayload, 'x'));
        answered[i] = true;
      });
      ASSERT_TRUE(Eventually([&] {
        return answered[i] || Stats(d.stub()).pending_timers() > pending;
      }));
    }
  }
  int refused = 0;
  for (int i = 0; i < kSetters; ++i) {
    const std::string key = "k" + std::to_string(i);
    if (results[i].ok()) {
      EXPECT_TRUE(Get(d.stub(), "", key).ok()) << key;
      continue;
    }
    ++refused;
    EXPECT_EQ(results[i].error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(results[i].error_message().find("store is behind"),
              std::string::npos)
        << results[i].error_message();
    EXPECT_EQ(Get(d.stub(), "", key).error_code(), grpc::StatusCode::NOT_FOUND)
        << key << " was refused but changed";
  }
  EXPECT_GE(refused, kSetters - 5);
}

// A payload still in the store's memory is read without the disk: while
// every read from the disk hangs, an event just fired goes out at once.
TEST(StalledStore, PayloadsInMemoryGoOutWhileDiskReadsHang) {
  GatedDaemon gated(/*cached_reads=*/true);
  ReadGate& gate = gated.gate;
  TestDaemon& d = gated.daemon;
  ASSERT_TRUE(d.started());
  TestStream worker(d.stub(), TestStream::Worker("default", 10));
  ASSERT_TRUE(worker.WaitRegistered());
  gate.Hold();
  ASSERT_TRUE(Set(d.stub(), "", "recent", 0, "its payload").ok());
  const auto got = worker.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload(), "its payload");
  EXPECT_EQ(gate.waiting(), 0);
}

TEST(StalledStore, AHangingPayloadReadHoldsOnlyTheEventsItReads) {
  GatedDaemon gated;
  ReadGate& gate = gated.gate;
  TestDaemon& d = gated.daemon;
  ASSERT_TRUE(d.started());
  auto first =
      std::make_unique<TestStream>(d.stub(), TestStream::Worker("default", 10));
  ASSERT_TRUE(first->WaitRegistered());
  ASSERT_TRUE(Set(d.stub(), "", "sent", 0).ok());
  const auto sent = first->WaitFor(1);
  ASSERT_EQ(sent.size(), 1u);

  // The next event's payload read hangs.
  gate.Hold();
  ASSERT_TRUE(Set(d.stub(), "", "read", 0, "its payload").ok());
  ASSERT_TRUE(Eventually([&] { return gate.waiting() == 1; }));
  // The namespace's other work goes on: an ack, a worker leaving.
  ASSERT_TRUE(Ack(d.stub(), "", {sent[0].id()}).ok());
  EXPECT_EQ(Stats(d.stub()).events_acked(), 1u);
  first.reset();
  ASSERT_TRUE(Eventually([&] { return Stats(d.stub()).workers() == 0; }));

  // Its worker left while it was read: it goes to the next one, never
  // having been sent (attempt 1).
  gate.Release();
  TestStream second(d.stub(), TestStream::Worker("default", 10));
  const auto got = second.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].key(), "read");
  EXPECT_EQ(got[0].payload(), "its payload");
  EXPECT_EQ(got[0].attempt(), 1u);
}

// Watchers' copies have their payloads read off the namespace's strand too:
// a read that hangs for them holds neither acks nor the namespace's other
// work, and they get the event, in order, once it is read.
TEST(StalledStore, AHangingReadForWatchersHoldsNoAcks) {
  GatedDaemon gated;
  ReadGate& gate = gated.gate;
  TestDaemon& d = gated.daemon;
  ASSERT_TRUE(d.started());
  TestStream watcher(d.stub(), TestStream::Watcher("default"));
  ASSERT_TRUE(watcher.WaitRegistered());
  TestStream worker(d.stub(), TestStream::Worker("default", 10));
  ASSERT_TRUE(worker.WaitRegistered());
  ASSERT_TRUE(Set(d.stub(), "", "first", 0).ok());
  const auto first = worker.WaitFor(1);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(watcher.WaitFor(1).size(), 1u);

  gate.Hold();
  ASSERT_TRUE(Set(d.stub(), "", "second", 0, "its payload").ok());
  ASSERT_TRUE(Eventually([&] { return gate.waiting() >= 1; }));
  EXPECT_TRUE(Ack(d.stub(), "", {first[0].id()}, nullptr, 5s).ok());
  EXPECT_EQ(Stats(d.stub()).events_acked(), 1u);

  gate.Release();
  const auto seen = watcher.WaitFor(2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].key(), "second");
  EXPECT_EQ(seen[1].payload(), "its payload");
  const auto got = worker.WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].payload(), "its payload");
}

// A dead-letter listing reads its payloads off the namespace's strand too,
// as the store was when it was asked for: a read that hangs holds no acks,
// and a dead letter purged meanwhile is left out, not taken for damage.
TEST(StalledStore, AHangingDeadLetterListingHoldsNoAcks) {
  GatedDaemon gated;
  ReadGate& gate = gated.gate;
  TestDaemon& d = gated.daemon;
  ASSERT_TRUE(d.started());
  {
    v1::SetPolicyRequest req;
    req.mutable_policy()->set_max_attempts(1);
    v1::Policy resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().SetPolicy(&ctx, req, &resp).ok());
  }
  TestStream worker(d.stub(), TestStream::Worker("default", 10));
  ASSERT_TRUE(worker.WaitRegistered());
  ASSERT_TRUE(Set(d.stub(), "", "dead", 0).ok());
  const auto dead = worker.WaitFor(1);
  ASSERT_EQ(dead.size(), 1u);
  ASSERT_TRUE(Set(d.stub(), "", "live", 0).ok());
  const auto both = worker.WaitFor(2);
  ASSERT_EQ(both.size(), 2u);
  {
    v1::NackRequest req;
    req.add_event_ids(dead[0].id());
    v1::NackResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Nack(&ctx, req, &resp).ok());
  }
  ASSERT_TRUE(Eventually([&] { return Stats(d.stub()).dead_letters() == 1; }));

  gate.Hold();
  auto listing = std::async(std::launch::async, [&] {
    v1::ListDeadLettersRequest req;
    v1::ListDeadLettersResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    const grpc::Status s = d.stub().ListDeadLetters(&ctx, req, &resp);
    return std::make_pair(s.error_code(), resp.dead_letters_size());
  });
  ASSERT_TRUE(Eventually([&] { return gate.waiting() == 1; }));
  EXPECT_TRUE(Ack(d.stub(), "", {both[1].id()}, nullptr, 5s).ok());
  {
    v1::DeadLettersRequest req;
    req.set_all(true);
    v1::DeadLettersResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    ASSERT_TRUE(d.stub().PurgeDeadLetters(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.count(), 1u);
  }
  gate.Release();
  const auto [code, listed] = listing.get();
  EXPECT_EQ(code, grpc::StatusCode::OK);
  EXPECT_EQ(listed, 0);
  v1::StatsResponse stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d.stub().Stats(&ctx, v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.store_errors(), 0u);
}

// Reads run on threads of their own: more held reads than the daemon has
// threads (two here) never stop acks.
TEST(StalledStore, HeldReadsNeverTakeThePoolFromAcks) {
  GatedDaemon gated;
  ReadGate& gate = gated.gate;
  TestDaemon& d = gated.daemon;
  ASSERT_TRUE(d.started());
  TestStream worker(d.stub(), TestStream::Worker("default", 10));
  ASSERT_TRUE(worker.WaitRegistered());
  ASSERT_TRUE(Set(d.stub(), "", "first", 0).ok());
  const auto first = worker.WaitFor(1);
  ASSERT_EQ(first.size(), 1u);
  constexpr int kReads = 4;
  for (int i = 0; i < kReads; ++i) {
    ASSERT_TRUE(Set(d.stub(), "", "p" + std::to_string(i), 3'600'000).ok());
  }
  gate.Hold();
  std::vector<std::future<grpc::Status>> gets;
  for (int i = 0; i < kReads; ++i) {
    gets.push_back(std::async(std::launch::async, [&d, i] {
      return Get(d.stub(), "", "p" + std::to_string(i));
    }));
  }
  ASSERT_TRUE(Eventually([&] { return gate.waiting() >= 2; }));
  EXPECT_TRUE(Ack(d.stub(), "", {first[0].id()}, nullptr, 5s).ok());
  gate.Release();
  for (auto& g : gets) EXPECT_TRUE(g.get().ok());
}

// The dispatch rate counts deliveries: events taken for a worker that left
// while their payloads were read were never sent, and the next worker gets
// them at once, not a rate's wait later.
TEST(StalledStore, EventsNotSentAfterTheirReadKeepTheirRateTokens) {
  GatedDaemon gated;
  ReadGate& gate = gated.gate;
  TestDaemon& d = gated.daemon;
  ASSERT_TRUE(d.started());
  constexpr int kEvents = 5;
  {
    // A burst of 5, then one every 10 s.
    v1::SetPolicyRequest req;
    req.mutable_policy()->set_max_dispatch_rate(0.1);
    req.mutable_policy()->set_dispatch_burst(kEvents);
    v1::Policy resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().SetPolicy(&ctx, req, &resp).ok());
  }
  for (int i = 0; i < kEvents; ++i) {
    ASSERT_TRUE(Set(d.stub(), "", "k" + std::to_string(i), 0).ok());
  }
  ASSERT_TRUE(
      Eventually([&] { return Stats(d.stub()).ready_events() == kEvents; }));
  // The first worker's events (the whole burst) are read, and the read
  // hangs; it leaves.
  gate.Hold();
  auto first =
      std::make_unique<TestStream>(d.stub(), TestStream::Worker("default", 10));
  ASSERT_TRUE(first->WaitRegistered());
  ASSERT_TRUE(Eventually([&] { return gate.waiting() == 1; }));
  first.reset();
  ASSERT_TRUE(Eventually([&] { return Stats(d.stub()).workers() == 0; }));
  gate.Release();
  // Without the tokens back, the next would come 10 s later.
  TestStream second(d.stub(), TestStream::Worker("default", 10));
  EXPECT_EQ(second.WaitFor(kEvents, 3000ms).size(),
            static_cast<std::size_t>(kEvents));
}

}  // namespace
}  // namespace delayd::testing
