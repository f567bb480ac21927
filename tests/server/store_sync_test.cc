// The RocksDB store's syncs under --fsync always (rocks_store.h): a write
// nobody waits for is synced with the next that someone does, or once the
// interval passes.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "server/store/rocksdb/rocks_store.h"
#include "tests/common/power_loss_fs.h"
#include "tests/common/temp_dir.h"

namespace delayd::testing {
namespace {

using std::chrono_literals::operator""s;

class AlwaysSyncs : public ::testing::Test {
 protected:
  void SetUp() override { Open(std::chrono::hours(1)); }
  // Under --fsync always, with `interval` as the longest a write nobody
  // waits for stays unsynced.
  void Open(std::chrono::nanoseconds interval) {
    store_.reset();
    if (!fs_) fs_ = PowerLossFs::Make(&env_);
    RocksOptions o;
    o.dir = dir_ / "data";
    o.fsync = FsyncPolicy::kAlways;
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
  std::promise<void> written;
  Put(
      1, [&] { written.set_value(); }, nullptr);
  ASSERT_EQ(written.get_future().wait_for(10s), std::future_status::ready);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (fs_->log_syncs() == before) {  // Polls for the timed sync.
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "an unsynced write stayed so";
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(fs_->Crash().bytes, 0u);
  fs_->Revive();
}

}  // namespace
}  // namespace delayd::testing
