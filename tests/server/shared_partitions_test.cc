// The core over a store whose partitions are shared by several daemons
// (Store::SharedPartitions): it uses the store's partition count, puts each
// key where StablePartition says, and every batch it writes names the
// partitions it changes, whoever writes it (a partition, or a namespace's
// dispatcher acknowledging, failing, burying, requeueing or purging
// events). The memory store checks each change against its batch.
#include <gtest/gtest.h>

#include <future>
#include <set>
#include <string>

#include "server/common/stable_hash.h"
#include "server/core/scheduler.h"
#include "server/store/memory/memory_store.h"
#include "tests/server/fake_subscriber.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::FakeSubscriber;

constexpr std::uint32_t kShared = 8;

class SharedPartitionsTest : public ::testing::Test {
 protected:
  SharedPartitionsTest()
      : disk_(std::make_shared<MemoryStore::Disk>()), scheduler_([this] {
          disk_->SharePartitions(kShared);
          Scheduler::Options o;
          o.partitions = 2;  // The store's count wins.
          o.threads = 2;
          o.store = MemoryStore::Opener(disk_);
          return o;
        }()) {
    EXPECT_TRUE(scheduler_.Start().ok());
    EXPECT_TRUE(scheduler_.Intern("orders", &pin_).ok());
    ns_ = pin_.id();
  }
  OpResult Apply(Op op) {
    std::promise<OpResult> p;
    scheduler_.Submit(std::move(op), [&](OpResult r) { p.set_value(r); });
    return p.get_future().get();
  }
  std::shared_ptr<FakeSubscriber> Worker() {
    auto sub = std::make_shared<FakeSubscriber>();
    std::promise<void> registered;
    SubscribeOptions options;
    options.max_in_flight = 1000;
    scheduler_.dispatcher(ns_).Subscribe(scheduler_.NewSubscriberId(), sub,
                                         options,
                                         [&] { registered.set_value(); });
    registered.get_future().wait();
    return sub;
  }
  Status SetPolicy(const Policy& policy) {
    std::promise<Status> p;
    scheduler_.SetPolicy("orders", policy,
                         [&](Status s) { p.set_value(std::move(s)); });
    return p.get_future().get();
  }

  std::shared_ptr<MemoryStore::Disk> disk_;
  Scheduler scheduler_;
  NamespacePin pin_;
  NamespaceId ns_ = 0;
};

TEST_F(SharedPartitionsTest, KeysGoWhereTheStoreSaysAndBatchesNameThem) {
  EXPECT_EQ(scheduler_.partitions(), kShared);
  // Every change a timer goes through.
  const WallNanos later = WallNow() + 3'600'000'000'000;
  std::set<std::uint32_t> parts;
  for (int i = 0; i < 64; ++i) {
    const std::string key = "order-" + std::to_string(i);
    parts.insert(StablePartition("orders", key, kShared));
    ASSERT_TRUE(Apply(SetOp{ns_, Blob(key, "p"), later}).status.ok());
  }
  EXPECT_EQ(parts.size(), kShared) << "64 keys should reach every partition";
  for (int i = 0; i < 8; ++i) {
    const std::string key = "order-" + std::to_string(i);
    ASSERT_TRUE(Apply(MoveOp{ns_, key, later + 1'000'000'000}).status.ok());
    ASSERT_TRUE(
        Apply(RemoveOp{ns_, "order-" + std::to_string(i + 8)}).status.ok());
  }
  // Every change an event goes through: acked, failed and retried, a dead
  // letter requeued, a dead letter purged.
  Policy once;
  once.max_attempts = 1;
  ASSERT_TRUE(SetPolicy(once).ok());
  auto worker = Worker();
  std::promise<std::uint64_t> drained;
  scheduler_.Drain(ns_, [&](Status s, std::uint64_t n) {
    EXPECT_TRUE(s.ok());
    drained.set_value(n);
  });
  ASSERT_EQ(drained.get_future().get(), 56u);
  const auto got = worker->WaitFor(56, 10s);
  ASSERT_EQ(got.size(), 56u);
  std::vector<std::uint64_t> ack, nack;
  for (std::size_t i = 0; i < got.size(); ++i) {
    (i % 2 == 0 ? ack : nack).push_back(got[i].id);
  }
  Dispatcher& d = scheduler_.dispatcher(ns_);
  std::promise<AckResult> acked;
  d.Ack(ack, [&](AckResult r) { acked.set_value(std::move(r)); });
  const AckResult a = acked.get_future().get();
  EXPECT_TRUE(a.error.ok());
  EXPECT_EQ(a.acked, ack.size());
  std::promise<LeaseResult> nacked;
  d.Nack(nack, 0ns, "declined",
         [&](LeaseResult r) { nacked.set_value(std::move(r)); });
  EXPECT_EQ(nacked.get_future().get().done, nack.size());  // Dead letters.
  std::promise<Status> requeued;
  d.RequeueDeadLetters({nack[0]}, [&](Status s, LeaseResult) {
    requeued.set_value(std::move(s));
  });
  EXPECT_TRUE(requeued.get_future().get().ok());
  std::promise<Status> purged;
  d.PurgeDeadLetters({nack[1], nack[2]}, [&](Status s, LeaseResult) {
    purged.set_value(std::move(s));
  });
  EXPECT_TRUE(purged.get_future().get().ok());
  // (The store writes in order: the purge durable, all before it is too.)
  EXPECT_EQ(disk_->untouched(), 0u);
  // Sets, moves, removes, firings, acks, fates, a requeue and a purge.
  EXPECT_GE(disk_->touched(), 64u + 16u + 56u + 28u + 28u + 3u);
}

// Without a shared store the core keeps its own partition count and the
// batches name nothing (the disk checks nothing either).
TEST(SharedPartitions, OtherStoresKeepTheCoresOwnCount) {
  auto disk = std::make_shared<MemoryStore::Disk>();
  Scheduler::Options o;
  o.partitions = 3;
  o.store = MemoryStore::Opener(disk);
  Scheduler scheduler(o);
  ASSERT_TRUE(scheduler.Start().ok());
  EXPECT_EQ(scheduler.partitions(), 3u);
}

}  // namespace
}  // namespace delayd
