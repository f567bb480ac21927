// No event leaves the daemon before the write that created its timer is
// durable on the store in use: with the store's commit held (RocksDB's
// syncs under --fsync always; PostgreSQL's tables locked against writes),
// a timer set just now fires in memory but its event waits until the set
// is durable; a timer set durably before fires at once, its firing's own
// durability not waited for (and, under --fsync always, made durable by the
// next sync someone waits for), and its firing written by the thread that
// fired it (as a set's write is by the gRPC thread that takes the call, and
// an ack's by the pool thread that takes it; on a loop, each is the loop's).
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <atomic>
#include <thread>

#include "tests/common/thread_names.h"
#include "tests/server/hung_disk.h"
#include "tests/server/test_stores.h"

namespace delayd::testing {
namespace {

// How long a test watches for an event that must not come. (An event
// published too early leaves at once: the firing is written or sent within
// a millisecond of the timer's time.)
constexpr auto kWatch = 400ms;

TEST(DurableFiring, AnEventWaitsForTheSyncOfItsTimersSet) {
  HoldingDaemon held;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  TestStream worker(d.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(worker.WaitRegistered());
  held.fs->HoldSyncs(true);
  std::vector<std::thread> threads;
  struct Unhold {
    PowerLossFs* fs;
    std::vector<std::thread>& threads;
    ~Unhold() {
      fs->HoldSyncs(false);
      for (auto& t : threads) t.join();
    }
  } unhold{held.fs.get(), threads};
  std::atomic<bool> answered{false};
  threads.emplace_back([&] {
    EXPECT_TRUE(Set(d.stub(), "", "soon", 20).ok());
    answered = true;
  });
  // Fired in memory, its set not yet durable (nor answered).
  ASSERT_TRUE(Eventually([&] {
    return NamespaceStats(d.stub(), "default").timers_expired() == 1;
  }));
  EXPECT_EQ(worker.WaitFor(1, kWatch).size(), 0u)
      << "an event left before the write that set its timer was durable";
  EXPECT_FALSE(answered);
  held.fs->HoldSyncs(false);
  const auto got = worker.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].key(), "soon");
  threads[0].join();
  threads.clear();
  EXPECT_TRUE(answered);
}

TEST(DurableFiring, ATimerSetDurablyFiresWithoutWaitingForItsFiringsSync) {
  HoldingDaemon held;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  TestStream worker(d.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(worker.WaitRegistered());
  ASSERT_TRUE(Set(d.stub(), "", "later", 300).ok());  // Answered: durable.
  held.fs->HoldSyncs(true);
  struct Unhold {
    PowerLossFs* fs;
    ~Unhold() { fs->HoldSyncs(false); }
  } unhold{held.fs.get()};
  const auto got = worker.WaitFor(1, 10s);
  ASSERT_EQ(got.size(), 1u) << "a durable timer's event waited for a sync";
  EXPECT_EQ(got[0].key(), "later");
}

// A daemon on a file system that counts syncs, with no timed sync.
struct UntimedSyncs : HoldingDaemon {
  UntimedSyncs()
      : HoldingDaemon([](DelaydServer::Options&, RocksOptions& store) {
          store.fsync_interval = std::chrono::hours(1);
        }) {}
};

// Under --fsync always, a firing of timers set durably is made durable by
// the next sync someone waits for (here its event's ack), not by one of its
// own: one sync for the fire and the ack together.
TEST(DurableFiring, AFiringOfDurableTimersHasNoSyncOfItsOwn) {
  UntimedSyncs held;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  TestStream worker(d.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(worker.WaitRegistered());
  // (The first firing also reserves event ids, with a sync of its own.)
  std::size_t n = 0;
  for (const std::string key : {"first", "second"}) {
    ASSERT_TRUE(Set(d.stub(), "", key, 300).ok());  // Answered: durable.
    const std::uint64_t before = held.fs->log_syncs();
    const auto got = worker.WaitFor(++n, 10s);  // (All received so far.)
    ASSERT_EQ(got.size(), n);
    ASSERT_EQ(got.back().key(), key);
    v1::AckResponse acked;
    ASSERT_TRUE(Ack(d.stub(), "default", {got.back().id()}, &acked).ok());
    ASSERT_EQ(acked.acked(), 1u);
    if (key == "second") {
      EXPECT_EQ(held.fs->log_syncs(), before + 1)
          << "the firing was synced apart from the ack";
    }
  }
}

// A firing of timers set durably is written by the pool thread (or loop) whose
// alarm fired it (Store::WriteDeferred), which then publishes its events: the
// store's writer is not woken for it.
TEST(DurableFiring, AFiringIsWrittenByTheThreadThatFiredIt) {
  UntimedSyncs held;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  TestStream worker(d.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(worker.WaitRegistered());
  // (The first firing also reserves event ids, a write of its own.)
  ASSERT_TRUE(Set(d.stub(), "", "first", 1).ok());
  ASSERT_EQ(worker.WaitFor(1, 10s).size(), 1u);
  constexpr int kTimers = 10;
  for (int i = 0; i < kTimers; ++i) {  // Answered: durable.
    ASSERT_TRUE(Set(d.stub(), "", "t" + std::to_string(i), 400 + 40 * i).ok());
  }
  const long before = WakeUpsOf("store-writer");
  ASSERT_GE(before, 0) << "no thread named store-writer";
  ASSERT_EQ(worker.WaitFor(1 + kTimers, 10s).size(), 1u + kTimers);
  // (A wake-up or two of the last set's group may fall after `before`.)
  EXPECT_LT(WakeUpsOf("store-writer") - before, kTimers / 2)
      << "the store's writer woke for the firings";
}

// A daemon under --fsync 1s, where a call's write is made by the thread
// that takes it (under always, the store's threads write and sync it).
struct TimedSyncs : HoldingDaemon {
  TimedSyncs()
      : HoldingDaemon([](DelaydServer::Options&, RocksOptions& store) {
          store.fsync = FsyncPolicy::kInterval;
        }) {}
};

// A SetTimer's write is made by the gRPC thread (or loop) that takes the call
// (Store::CommitDeferred), which then answers it: the store's writer is not
// woken for it.
TEST(DurableFiring, ASetIsWrittenByTheThreadThatTakesTheCall) {
  TimedSyncs held;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(Set(d.stub(), "", "first", 3'600'000).ok());  // The namespace.
  const long before =
      WaitUntilAsleep("store-writer", std::chrono::milliseconds(300), 10s);
  ASSERT_GE(before, 0) << "the store's writer never slept";
  constexpr int kTimers = 10;
  for (int i = 0; i < kTimers; ++i) {  // Answered: durable.
    ASSERT_TRUE(Set(d.stub(), "", "t" + std::to_string(i), 3'600'000).ok());
  }
  EXPECT_LT(WakeUpsOf("store-writer") - before, kTimers / 2)
      << "the store's writer woke for the sets";
}

// An ack's write is made by the pool thread (or loop) that takes it, once it
// leaves the namespace's strand: the store's writer is not woken for it.
TEST(DurableFiring, AnAckIsWrittenByThePoolThreadThatTakesIt) {
  TimedSyncs held;
  TestDaemon& d = held.daemon;
  ASSERT_TRUE(d.started());
  TestStream worker(d.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(worker.WaitRegistered());
  constexpr int kTimers = 10;
  for (int i = 0; i < kTimers; ++i) {
    ASSERT_TRUE(Set(d.stub(), "", "t" + std::to_string(i), 1).ok());
  }
  const auto got = worker.WaitFor(kTimers, 10s);
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kTimers));
  const long before =
      WaitUntilAsleep("store-writer", std::chrono::milliseconds(300), 10s);
  ASSERT_GE(before, 0) << "the store's writer never slept";
  for (const auto& e : got) {  // One at a time, each answered: durable.
    v1::AckResponse acked;
    ASSERT_TRUE(Ack(d.stub(), "default", {e.id()}, &acked).ok());
    ASSERT_EQ(acked.acked(), 1u);
  }
  EXPECT_LT(WakeUpsOf("store-writer") - before, kTimers / 2)
      << "the store's writer woke for the acks";
}

// A connection of the test's own that holds delayd's tables against
// writes (reads go on) until released.
class TableLock {
 public:
  explicit TableLock(const std::string& url)
      : conn_(PQconnectdb(url.c_str())) {}
  ~TableLock() {
    Release();
    PQfinish(conn_);
  }
  bool Hold() {
    held_ = Run("BEGIN") && Run("LOCK TABLE delayd_jobs IN SHARE MODE");
    return held_;
  }
  void Release() {
    if (std::exchange(held_, false)) Run("COMMIT");
  }

 private:
  bool Run(const char* sql) {
    PGresult* r = PQexec(conn_, sql);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    EXPECT_TRUE(ok) << sql << ": " << PQerrorMessage(conn_);
    PQclear(r);
    return ok;
  }
  PGconn* conn_;
  bool held_ = false;
};

TEST(DurableFiring, AnEventWaitsForTheCommitOfItsTimersSet) {
  TestStore store(Backend::kPostgres);
  ASSERT_FALSE(store.url().empty());
  TestDaemon d(store.On(TestDaemon::DefaultOptions()));
  ASSERT_TRUE(d.started());
  TestStream worker(d.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(worker.WaitRegistered());
  ASSERT_TRUE(Set(d.stub(), "", "first", 3'600'000).ok());  // The namespace.
  TableLock lock(store.url());
  ASSERT_TRUE(lock.Hold());
  std::atomic<bool> answered{false};
  std::thread set([&] { answered = Set(d.stub(), "", "soon", 20).ok(); });
  struct Join {
    TableLock& lock;
    std::thread& t;
    ~Join() {
      lock.Release();
      if (t.joinable()) t.join();
    }
  } join{lock, set};
  ASSERT_TRUE(Eventually([&] {
    return NamespaceStats(d.stub(), "default").timers_expired() == 1;
  }));
  EXPECT_EQ(worker.WaitFor(1, kWatch).size(), 0u)
      << "an event left before the INSERT that set its timer committed";
  lock.Release();
  const auto got = worker.WaitFor(1, 10s);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].key(), "soon");
  set.join();
  EXPECT_TRUE(answered);
}

}  // namespace
}  // namespace delayd::testing
