// The RocksDB store's syncs (rocks_store.h). Under --fsync always: a write
// nobody waits for is synced with the next that someone does, or once the
// interval passes. Under an interval: a write is synced within it, and an
// idle store does not wake for nothing; nor does its marker.
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "server/store/rocksdb/rocks_mark.h"
#include "server/store/rocksdb/rocks_store.h"
#include "tests/common/power_loss_fs.h"
#include "tests/common/temp_dir.h"
#include "tests/common/thread_names.h"

namespace delayd::testing {
namespace {

using std::chrono_literals::operator""s;
using std::chrono_literals::operator""ms;

class AlwaysSyncs : public ::testing::Test {
 protected:
  void SetUp() override { Open(std::chrono::hours(1)); }
  // Under --fsync always, with `interval` as the longest a write nobody
  // waits for stays unsynced (or under `policy`, with its interval).
  void Open(std::chrono::nanoseconds interval,
            FsyncPolicy policy = FsyncPolicy::kAlways) {
    store_.reset();
    if (!fs_) fs_ = PowerLossFs::Make(&env_);
    RocksOptions o;
    o.dir = dir_ / "data";
    o.fsync = policy;
    o.fsync_interval = interval;
    o.env = env_.get();
    ASSERT_TRUE(RocksStore::Open(o, StoreHooks(), &store_).ok());
  }
  void TearDown() override { store_.reset(); }

  // Writes one timer `id`; `written` runs once it is written, `done` (if
  // any) once it is durable.
  void Put(std::uint64_t id, std::function<void()> written,
           std::function<void(Status)> done) {
    Batch batch;
    batch.AddTimer(StoredTimer{0, "k" + std::to_string(id), 0, id, id}, "p");
    store_->Write(batch, std::move(written), std::move(done));
  }

  // Waits (bounded) until the log has been synced more than `n` times.
  void WaitForSyncsAbove(std::uint64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (fs_->log_syncs() <= n) {  // Polls for the timed sync.
      ASSERT_LT(std::chrono::steady_clock::now(), deadline)
          << "an unsynced write stayed so";
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  // Writes timer `id` and waits until it is durable.
  void PutDurable(std::uint64_t id) {
    std::promise<Status> durable;
    Put(id, nullptr, [&](Status s) { durable.set_value(std::move(s)); });
    auto synced = durable.get_future();
    ASSERT_EQ(synced.wait_for(10s), std::future_status::ready);
    ASSERT_TRUE(synced.get().ok());
  }

  // The durable sequence the store's mark records.
  std::uint64_t MarkedSequence() {
    StoreMark mark;
    bool marked = false;
    EXPECT_TRUE(ReadMark(env_.get(), dir_ / "data", &mark, &marked).ok());
    return mark.sequence;
  }

  // Writes timer `id` and waits until it is written (not synced).
  void PutWritten(std::uint64_t id) {
    std::promise<void> written;
    Put(
        id, [&] { written.set_value(); }, nullptr);
    ASSERT_EQ(written.get_future().wait_for(10s), std::future_status::ready);
  }

  TempDir dir_;
  std::unique_ptr<rocksdb::Env> env_;
  std::shared_ptr<PowerLossFs> fs_;
  std::unique_ptr<RocksStore> store_;
};

TEST_F(AlwaysSyncs, AWriteNobodyWaitsForIsSyncedWithTheNextThatSomeoneDoes) {
  const std::uint64_t before = fs_->log_syncs();
  for (std::uint64_t id = 1; id <= 5; ++id) {
    std::promise<void> written;
    Put(
        id, [&] { written.set_value(); }, nullptr);
    ASSERT_EQ(written.get_future().wait_for(10s), std::future_status::ready);
  }
  EXPECT_EQ(fs_->log_syncs(), before) << "a write nobody waits for synced";
  std::promise<Status> durable;
  Put(6, nullptr, [&](Status s) { durable.set_value(std::move(s)); });
  auto synced = durable.get_future();
  ASSERT_EQ(synced.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(synced.get().ok());
  EXPECT_EQ(fs_->log_syncs(), before + 1);
  // That one sync made all six durable.
  EXPECT_EQ(fs_->Crash().bytes, 0u);
  fs_->Revive();
}

TEST_F(AlwaysSyncs, AWriteNobodyWaitsForIsSyncedOnceTheIntervalPasses) {
  Open(std::chrono::milliseconds(20));
  const std::uint64_t before = fs_->log_syncs();
  PutWritten(1);
  WaitForSyncsAbove(before);
  EXPECT_EQ(fs_->Crash().bytes, 0u);
  fs_->Revive();
}

// Under an interval of 10 ms.
class IntervalSyncs : public AlwaysSyncs {
 protected:
  void SetUp() override {
    Open(std::chrono::milliseconds(10), FsyncPolicy::kInterval);
  }
};

// This process's CPU time (every thread), in seconds.
double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

TEST_F(IntervalSyncs, AWriteIsSyncedWithinItAndAnIdleStoreSleeps) {
  const std::uint64_t before = fs_->log_syncs();
  PutWritten(1);
  WaitForSyncsAbove(before);
  // Idle for thirty intervals: no sync, and next to no CPU (the syncer
  // once woke again and again after an interval with nothing to sync, a
  // whole core's worth). What is tested is time passing with nothing to
  // do, so the test lets it pass.
  const std::uint64_t synced = fs_->log_syncs();
  const double cpu = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double used = ProcessCpuSeconds() - cpu;
  EXPECT_EQ(fs_->log_syncs(), synced);
  EXPECT_LT(used, 0.1) << "an idle store took " << used << " s of CPU in 0.3 s";
  // A write after the idle spell is synced as the first was.
  PutWritten(2);
  WaitForSyncsAbove(synced);
  EXPECT_EQ(fs_->Crash().bytes, 0u);
  fs_->Revive();
}

TEST_F(AlwaysSyncs, AnIdleStoresMarkerSleepsUntilAWrite) {
  PutDurable(1);
  // It checks once a second while the mark changes; the first check that
  // finds nothing changed puts it to sleep (bounded wait for that).
  const long seen = WaitUntilAsleep("store-marker", 1500ms, 10s);
  ASSERT_GE(seen, 0) << "the marker of an idle store kept waking (or there "
                        "is no store-marker thread)";
  // Asleep: three of its intervals pass without a wake-up (what is tested
  // is time passing with nothing written, so the test lets it pass).
  std::this_thread::sleep_for(3s);
  EXPECT_EQ(WakeUpsOf("store-marker"), seen) << "an idle store's marker woke";
  // A write wakes it: the mark records the write's durability within
  // seconds, not at the idle interval's end.
  const std::uint64_t before = MarkedSequence();
  PutDurable(2);
  const auto recorded = std::chrono::steady_clock::now() + 10s;
  while (MarkedSequence() <= before) {  // Polls the mark, bounded.
    ASSERT_LT(std::chrono::steady_clock::now(), recorded)
        << "a write to a sleeping marker's store went unmarked";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace
}  // namespace delayd::testing
