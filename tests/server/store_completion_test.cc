// Every store's Sync() (store.h) returns once everything queued is durable
// and its completions have run. Recovery relies on it: right after Sync it
// counts the completions of the overdue timers' firing, and a Sync that
// returned while one still ran made the daemon refuse to start.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>

#include "server/store/memory/memory_store.h"
#include "tests/server/test_stores.h"

namespace delayd::testing {
namespace {

using std::chrono_literals::operator""s;
using std::chrono_literals::operator""ms;

enum class Kind { kMemory, kRocksDb, kPostgres };

std::string KindName(const ::testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::kMemory:
      return "Memory";
    case Kind::kRocksDb:
      return "RocksDB";
    case Kind::kPostgres:
      return "PostgreSQL";
  }
  return "";
}

class StoreSync : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    StoreOpener open;
    if (GetParam() == Kind::kMemory) {
      open = MemoryStore::Opener(std::make_shared<MemoryStore::Disk>());
    } else {
      disk_ = std::make_unique<TestStore>(GetParam() == Kind::kRocksDb
                                              ? Backend::kRocksDb
                                              : Backend::kPostgres);
      open = disk_->Opener();
    }
    ASSERT_TRUE(open(StoreHooks(), &store_).ok());
  }
  void TearDown() override { store_.reset(); }

  std::unique_ptr<TestStore> disk_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreSync, WaitsForACompletionUnderWay) {
  std::promise<void> started;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> finished = false;
  Batch batch;
  batch.AddTimer(StoredTimer{0, "k", 0, 1, 1}, "p");
  store_->Commit(batch, [&](Status s) {
    EXPECT_TRUE(s.ok()) << s.message();
    started.set_value();
    released.wait();
    finished = true;
  });
  ASSERT_EQ(started.get_future().wait_for(10s), std::future_status::ready);
  // The completion is under way (on the store's thread: no executor yet).
  auto synced = std::async(std::launch::async, [&] {
    store_->Sync();
    return finished.load();
  });
  // A Sync that does not wait returns within this time; one that waits
  // returns only after the release below.
  EXPECT_EQ(synced.wait_for(200ms), std::future_status::timeout);
  release.set_value();
  ASSERT_EQ(synced.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(synced.get()) << "Sync returned before the completion ended";
}

// A commit after Close is refused: its completion gets the error (and the
// store does not touch what Close released).
TEST_P(StoreSync, ACommitAfterCloseIsRefused) {
  store_->Close();
  std::promise<Status> got;
  Batch batch;
  batch.AddTimer(StoredTimer{0, "k", 0, 1, 1}, "p");
  store_->Commit(batch, [&](Status s) { got.set_value(s); });
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(f.get().ok());
  Batch now;
  now.AddTimer(StoredTimer{0, "n", 0, 2, 2}, "p");
  EXPECT_FALSE(store_->WriteNow(now).ok());
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreSync,
                         ::testing::Values(Kind::kMemory, Kind::kRocksDb,
                                           Kind::kPostgres),
                         KindName);

}  // namespace
}  // namespace delayd::testing
