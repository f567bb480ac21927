// One partition on its own, over the in-memory fake store and a fake
// clock: operations, versions, firing at the right instant, drains, the
// store's completions and failures, and stopping.
#include "server/core/partition.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "server/store/memory/memory_store.h"
#include "tests/common/fake_clock.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::FakeClock;

constexpr std::uint32_t kIndex = 7;
constexpr WallNanos kSecond = 1'000'000'000;

class PartitionTest : public ::testing::TestWithParam<bool> {
 protected:
  PartitionTest() : counters_(4), refs_(4, [](NamespaceId) {}) {
    if (GetParam()) {
      disk_ = std::make_shared<MemoryStore::Disk>();
      store_ = std::make_unique<MemoryStore>(disk_, StoreHooks());
      // Completions run on the pool, as the scheduler has them.
      store_->SetExecutor([this](std::function<void()> run) {
        asio::post(io_, std::move(run));
      });
    }
    partition_ = std::make_unique<Partition>(
        LoopExecutor(io_.get_executor(), nullptr), io_.get_executor(), kIndex,
        clock_, std::chrono::microseconds(1), clock_.Steady(), limits_,
        counters_, store_.get(), &refs_,
        [this](NamespaceId ns, std::vector<Event> events) {
          std::lock_guard lock(mu_);
          for (Event& e : events) published_[ns].push_back(std::move(e));
          cv_.notify_all();
        });
    // With a store, versions and event ids come from reserved blocks.
    if (store_) {
      EXPECT_TRUE(
          partition_->RestoreCounters(1, 1, store_->FixedEventIdsFrom()).ok());
    }
    for (int t = 0; t < 2; ++t) threads_.emplace_back([this] { io_.run(); });
  }
  ~PartitionTest() override {
    partition_->Stop();
    if (store_) store_->Close();
    work_.reset();
    io_.stop();
    for (auto& t : threads_) t.join();
  }

  // Applies `op` and waits for its answer (at once, or once durable).
  OpResult Apply(Op op) {
    std::promise<OpResult> answer;
    Partition::Done durable = [&](OpResult r) {
      answer.set_value(std::move(r));
    };
    if (auto r = partition_->Apply(op, durable)) return *r;
    auto f = answer.get_future();
    EXPECT_EQ(f.wait_for(10s), std::future_status::ready);
    return f.get();
  }
  OpResult Set(const std::string& key, WallNanos at,
               const std::string& payload = "p") {
    return Apply(SetOp{0, Blob(key, payload), at});
  }
  // Tells the partition that the fake clock moved.
  void Advance(std::chrono::nanoseconds d) {
    clock_.Advance(d);
    partition_->ClockChanged(false);
  }
  // Waits (up to 10 s) until `n` events of namespace 0 were published.
  std::vector<Event> WaitPublished(std::size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 10s, [&] { return published_[0].size() >= n; });
    std::vector<Event> out;
    for (const Event& e : published_[0]) {
      out.push_back(CopyWithPayload(e, e.blob.payload()));
    }
    return out;
  }
  std::size_t Published() {
    std::lock_guard lock(mu_);
    return published_[0].size();
  }

  FakeClock clock_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{
      io_.get_executor()};
  Limits limits_;
  Counters counters_;
  NamespaceRefs refs_;
  std::shared_ptr<MemoryStore::Disk> disk_;
  std::unique_ptr<MemoryStore> store_;
  std::unique_ptr<Partition> partition_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<NamespaceId, std::vector<Event>> published_;
};

TEST_P(PartitionTest, VersionsGrowPerKeyAndNameThePartition) {
  const WallNanos at = clock_.Wall() + 60 * kSecond;
  const OpResult a = Set("k", at);
  ASSERT_TRUE(a.status.ok()) << a.status.message();
  EXPECT_FALSE(a.replaced);
  EXPECT_EQ(a.version & 1023, kIndex);
  const OpResult b = Set("k", at + kSecond);
  ASSERT_TRUE(b.status.ok());
  EXPECT_TRUE(b.replaced);
  EXPECT_GT(b.version, a.version);
  const OpResult m = Apply(MoveOp{0, "k", at + 2 * kSecond, b.version});
  ASSERT_TRUE(m.status.ok());
  EXPECT_GT(m.version, b.version);
  // A move or remove naming an old version is refused and changes nothing.
  EXPECT_EQ(Apply(MoveOp{0, "k", at, a.version}).status.code(), Code::kAborted);
  EXPECT_EQ(Apply(RemoveOp{0, "k", b.version}).status.code(), Code::kAborted);
  EXPECT_EQ(Apply(RemoveOp{0, "other"}).status.code(), Code::kNotFound);
  EXPECT_EQ(Set("k", at, "x").version > m.version, true);
  EXPECT_EQ(
      Apply(SetOp{0, Blob("k", "y"), at, /*if_absent=*/true}).status.code(),
      Code::kAlreadyExists);
}

TEST_P(PartitionTest, TimerFiresAtItsTimeNeverBefore) {
  ASSERT_TRUE(Set("k", clock_.Wall() + 10 * kSecond, "payload").status.ok());
  Advance(10s - 1us);
  EXPECT_EQ(Published(), 0u);
  Advance(1us);
  const auto events = WaitPublished(1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].blob.key(), "k");
  EXPECT_EQ(events[0].reason, Reason::kExpired);
  EXPECT_EQ(events[0].id & 1023, kIndex);
  if (GetParam()) {
    // The firing is written (the event stored) before it is published.
    EXPECT_EQ(disk_->events(), 1u);
    EXPECT_EQ(disk_->timers(), 0u);
  } else {
    EXPECT_EQ(events[0].blob.payload(), "payload");
  }
}

TEST_P(PartitionTest, RemovedAndMovedTimersFireOnlyAsTheyNowStand) {
  const WallNanos at = clock_.Wall() + kSecond;
  ASSERT_TRUE(Set("gone", at).status.ok());
  ASSERT_TRUE(Set("later", at).status.ok());
  ASSERT_TRUE(Apply(RemoveOp{0, "gone"}).status.ok());
  ASSERT_TRUE(Apply(MoveOp{0, "later", at + 5 * kSecond}).status.ok());
  Advance(1s);
  EXPECT_EQ(Published(), 0u);
  Advance(5s);
  const auto events = WaitPublished(1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].blob.key(), "later");
}

TEST_P(PartitionTest, DrainFiresEverythingInFireTimeOrder) {
  const WallNanos now = clock_.Wall();
  ASSERT_TRUE(Set("c", now + 30 * kSecond).status.ok());
  ASSERT_TRUE(Set("a", now + 10 * kSecond).status.ok());
  ASSERT_TRUE(Set("b", now + 20 * kSecond).status.ok());
  ASSERT_TRUE(
      Apply(SetOp{1, Blob("other-namespace", "p"), now + kSecond}).status.ok());
  std::promise<std::pair<Status, std::uint64_t>> drained;
  partition_->Drain(0, [&](Status s, std::uint64_t n) {
    drained.set_value({s, n});
  });
  const auto [status, n] = drained.get_future().get();
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(n, 3u);
  const auto events = WaitPublished(3);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].blob.key(), "a");
  EXPECT_EQ(events[1].blob.key(), "b");
  EXPECT_EQ(events[2].blob.key(), "c");
  for (const Event& e : events) EXPECT_EQ(e.reason, Reason::kDrained);
}

TEST_P(PartitionTest, GetFindsTheTimerAndItsPayload) {
  ASSERT_TRUE(Set("k", clock_.Wall() + kSecond, "the payload").status.ok());
  Partition::Found found;
  partition_->Get(0, "k", found);
  ASSERT_EQ(found.timers.size(), 1u);
  Status error;
  ASSERT_TRUE(partition_->ReadPayloads(found, &error)) << error.message();
  EXPECT_EQ(found.timers[0].payload, "the payload");
  Partition::Found none;
  partition_->Get(0, "missing", none);
  EXPECT_TRUE(none.timers.empty());
}

TEST_P(PartitionTest, StoppedPartitionRefusesAndFiresNothing) {
  ASSERT_TRUE(Set("k", clock_.Wall() + kSecond).status.ok());
  partition_->Stop();
  EXPECT_EQ(Set("other", clock_.Wall() + kSecond).status.code(),
            Code::kUnavailable);
  Advance(2s);
  EXPECT_EQ(Published(), 0u);
}

// A schedule's run fires in the same pass as the wake-up that set it, not
// after another alarm: with both pool threads held, no alarm can run, and
// the clock's change alone must publish the run.
TEST_P(PartitionTest, AScheduleRunFiresWithTheWakeUpThatSetIt) {
  if (GetParam())
    GTEST_SKIP() << "a store publishes once the firing is written";
  ScheduleRecord rec;
  rec.every = 60 * kSecond;
  rec.anchor = clock_.Wall() + 60 * kSecond;
  rec.payload = "p";
  Partition::ScheduleDone durable = [](Partition::ScheduleResult) {};
  const auto set = partition_->SetSchedule(0, "s", rec, false, 0, durable);
  ASSERT_TRUE(set.has_value() && set->status.ok());
  std::mutex hold_mu;
  std::condition_variable hold_cv;
  int held = 0;
  int left = 0;
  bool release = false;
  for (int t = 0; t < 2; ++t) {
    asio::post(io_, [&] {
      std::unique_lock lock(hold_mu);
      ++held;
      hold_cv.notify_all();
      hold_cv.wait(lock, [&] { return release; });
      ++left;
      hold_cv.notify_all();
    });
  }
  bool all_held = false;
  {
    std::unique_lock lock(hold_mu);
    all_held = hold_cv.wait_for(lock, 10s, [&] { return held == 2; });
  }
  if (all_held) Advance(60s);
  const std::size_t published = Published();
  {
    std::unique_lock lock(hold_mu);
    release = true;
    hold_cv.notify_all();
    // The handlers use this frame's mutex and condition: they must be done
    // with them before it ends.
    hold_cv.wait(lock, [&] { return left == 2; });
  }
  ASSERT_TRUE(all_held);
  EXPECT_EQ(published, 1u);
}

INSTANTIATE_TEST_SUITE_P(Store, PartitionTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "MemoryStore" : "NoStore";
                         });

// With a store: an operation is answered only once its change is durable,
// and one the store cannot write is answered with the store's error.
class PartitionStoreTest : public PartitionTest {};

TEST_P(PartitionStoreTest, AnswersWaitForTheStore) {
  disk_->Hold();
  std::promise<OpResult> answer;
  Partition::Done durable = [&](OpResult r) { answer.set_value(std::move(r)); };
  Op op = SetOp{0, Blob("k", "p"), clock_.Wall() + kSecond};
  ASSERT_FALSE(partition_->Apply(op, durable).has_value());
  auto f = answer.get_future();
  EXPECT_EQ(f.wait_for(50ms), std::future_status::timeout);
  disk_->Release();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(f.get().status.ok());
  EXPECT_EQ(disk_->timers(), 1u);
}

TEST_P(PartitionStoreTest, AFailedWriteAnswersWithTheStoresError) {
  disk_->FailWrites(Status::Internal("disk full"));
  const OpResult r = Set("k", clock_.Wall() + kSecond);
  EXPECT_EQ(r.status.code(), Code::kInternal);
  EXPECT_NE(r.status.message().find("disk full"), std::string::npos);
  // Every later change is refused by the failed store, and answered.
  EXPECT_FALSE(Set("k2", clock_.Wall() + kSecond).status.ok());
}

INSTANTIATE_TEST_SUITE_P(Store, PartitionStoreTest, ::testing::Values(true),
                         [](const auto&) { return "MemoryStore"; });

}  // namespace
}  // namespace delayd
