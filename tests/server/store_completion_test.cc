// Every store's Sync() (store.h) returns once everything queued is durable
// and its completions have run. Recovery relies on it: right after Sync it
// counts the completions of the overdue timers' firing, and a Sync that
// returned while one still ran made the daemon refuse to start.
//
// Where completions run (store.h, SetInlineCompletions): on the store's own
// thread while that is on (RocksDB and the memory store; PostgreSQL keeps
// the executor), one group at a time, and a refused batch's through the
// executor, since its caller may hold a lock. Where a deferred write is
// written (store.h, WriteDeferred): RocksDB on the thread that calls
// WriteHere, unless the queue is long.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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

// Commits one timer whose completion, once it runs, waits for Release().
class BlockedCompletion {
 public:
  explicit BlockedCompletion(Store& store) {
    Batch batch;
    batch.AddTimer(StoredTimer{0, "k", 0, 1, 1}, "p");
    store.Commit(batch, [this](Status s) {
      EXPECT_TRUE(s.ok()) << s.message();
      started_.set_value();
      released_.wait();
      finished_ = true;
    });
  }
  // Whether the completion started within 10 s.
  bool Started() {
    return started_.get_future().wait_for(10s) == std::future_status::ready;
  }
  void Release() { release_.set_value(); }
  bool finished() const { return finished_; }

 private:
  std::promise<void> started_;
  std::promise<void> release_;
  std::shared_future<void> released_ = release_.get_future().share();
  std::atomic<bool> finished_ = false;
};

TEST_P(StoreSync, WaitsForACompletionUnderWay) {
  BlockedCompletion first(*store_);
  ASSERT_TRUE(first.Started());
  // The completion is under way (on the store's thread: no executor yet).
  auto synced = std::async(std::launch::async, [&] {
    store_->Sync();
    return first.finished();
  });
  // A Sync that does not wait returns within this time; one that waits
  // returns only after the release below.
  EXPECT_EQ(synced.wait_for(200ms), std::future_status::timeout);
  first.Release();
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

// Counts what is handed to it, and runs it on the calling thread.
struct CountingExecutor {
  std::shared_ptr<std::atomic<int>> handed =
      std::make_shared<std::atomic<int>>(0);
  std::function<void(std::function<void()>)> Get() const {
    return [handed = handed](std::function<void()> run) {
      ++*handed;
      run();
    };
  }
};

// Commits one timer (`id`: its version and payload id) and waits for its
// completion; its thread, or nullopt.
std::optional<std::thread::id> CommitAndWait(Store& store,
                                             const std::string& key,
                                             std::uint64_t id) {
  auto ran = std::make_shared<std::promise<std::thread::id>>();
  Batch batch;
  batch.AddTimer(StoredTimer{0, key, 0, id, id}, "p");
  store.Commit(batch, [ran](Status s) {
    EXPECT_TRUE(s.ok()) << s.message();
    ran->set_value(std::this_thread::get_id());
  });
  auto f = ran->get_future();
  if (f.wait_for(10s) != std::future_status::ready) return std::nullopt;
  return f.get();
}

TEST_P(StoreSync, InlineCompletionsRunOnTheStoresThread) {
  CountingExecutor executor;
  store_->SetExecutor(executor.Get());
  store_->SetInlineCompletions(true);
  const auto inline_thread = CommitAndWait(*store_, "a", 1);
  ASSERT_TRUE(inline_thread.has_value()) << "no completion";
  EXPECT_NE(*inline_thread, std::this_thread::get_id());
  // PostgreSQL keeps the executor; the others run it themselves.
  EXPECT_EQ(*executor.handed, GetParam() == Kind::kPostgres ? 1 : 0);
  store_->SetInlineCompletions(false);
  ASSERT_TRUE(CommitAndWait(*store_, "b", 2).has_value()) << "no completion";
  EXPECT_EQ(*executor.handed, GetParam() == Kind::kPostgres ? 2 : 1);
}

TEST_P(StoreSync, ARefusedBatchsCompletionGoesThroughTheExecutor) {
  CountingExecutor executor;
  store_->SetExecutor(executor.Get());
  store_->SetInlineCompletions(true);
  store_->Close();
  Status got = Status::Ok();
  Batch batch;
  batch.AddTimer(StoredTimer{0, "k", 0, 1, 1}, "p");
  // (The executor runs it on this thread: it has run once Commit returns.)
  store_->Commit(batch, [&](Status s) { got = s; });
  EXPECT_EQ(*executor.handed, 1);
  EXPECT_FALSE(got.ok());
}

// Under `always` the RocksDB store's syncer runs a synced group's
// completions and its writer those of a group with nothing to write or sync
// (an empty batch): never both at once, as on the executor's strand.
TEST_P(StoreSync, InlineCompletionsRunOneGroupAtATime) {
  CountingExecutor executor;
  store_->SetExecutor(executor.Get());
  store_->SetInlineCompletions(true);
  BlockedCompletion first(*store_);
  ASSERT_TRUE(first.Started());
  std::promise<bool> second;
  Batch empty;
  store_->Commit(empty, [&](Status) { second.set_value(first.finished()); });
  auto after = second.get_future();
  // One that does not wait for the first runs within this time.
  EXPECT_EQ(after.wait_for(200ms), std::future_status::timeout);
  first.Release();
  ASSERT_EQ(after.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(after.get()) << "ran beside the first group's completion";
  EXPECT_EQ(*executor.handed, GetParam() == Kind::kPostgres ? 2 : 0);
}

// Defers `n` batches (timers `first`..), each recording the thread its
// `written` ran on, calls WriteHere, and waits until all are durable.
std::vector<std::thread::id> DeferThenWriteHere(Store& store,
                                                std::uint64_t first, int n) {
  auto threads = std::make_shared<std::vector<std::thread::id>>();
  auto mu = std::make_shared<std::mutex>();
  for (int i = 0; i < n; ++i) {
    const std::uint64_t id = first + static_cast<std::uint64_t>(i);
    Batch batch;
    batch.AddTimer(StoredTimer{0, "k" + std::to_string(id), 0, id, id}, "p");
    store.WriteDeferred(
        batch,
        [threads, mu] {
          std::lock_guard lock(*mu);
          threads->push_back(std::this_thread::get_id());
        },
        nullptr);
  }
  store.WriteHere();
  store.Sync();
  std::lock_guard lock(*mu);
  return *threads;
}

// RocksDB writes a few deferred batches on the thread that calls WriteHere
// (a firing's write on the thread that fired it); the others write them on
// their writer as any other.
TEST_P(StoreSync, WriteHereWritesAFewDeferredBatchesOnTheCallersThread) {
  const auto threads = DeferThenWriteHere(*store_, 1, 2);
  ASSERT_EQ(threads.size(), 2u) << "a deferred batch was not written";
  for (const auto& t : threads) {
    EXPECT_EQ(t == std::this_thread::get_id(), GetParam() == Kind::kRocksDb);
  }
  std::vector<std::string> payloads;
  std::vector<bool> readable;
  const std::uint64_t ids[] = {1, 2};
  ASSERT_TRUE(store_->GetPayloads(ids, &payloads, &readable).ok());
  EXPECT_EQ(payloads, (std::vector<std::string>{"p", "p"}));
}

// A longer queue is the writer's: the caller goes on (a burst's firings).
TEST_P(StoreSync, WriteHereLeavesALongQueueToTheWriter) {
  const auto threads = DeferThenWriteHere(*store_, 1, 8);
  ASSERT_EQ(threads.size(), 8u) << "a deferred batch was not written";
  for (const auto& t : threads) EXPECT_NE(t, std::this_thread::get_id());
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreSync,
                         ::testing::Values(Kind::kMemory, Kind::kRocksDb,
                                           Kind::kPostgres),
                         KindName);

}  // namespace
}  // namespace delayd::testing
