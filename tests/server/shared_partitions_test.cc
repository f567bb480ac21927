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

Status Take(Scheduler& s, std::uint32_t part, std::int64_t epoch) {
  std::promise<Status> taken;
  s.TakePartition(part, epoch, [&](Status st) { taken.set_value(st); });
  return taken.get_future().get();
}

void Drop(Scheduler& s, std::uint32_t part) {
  std::promise<void> dropped;
  s.DropPartition(part, [&] { dropped.set_value(); });
  dropped.get_future().wait();
}

// A node's core over the shared `disk`.
Scheduler::Options SharedOn(const std::shared_ptr<MemoryStore::Disk>& disk) {
  Scheduler::Options o;
  o.threads = 2;
  o.store = MemoryStore::Opener(disk);
  return o;
}

OpResult ApplyOn(Scheduler& s, Op op) {
  std::promise<OpResult> r;
  s.Submit(std::move(op), [&](OpResult res) { r.set_value(res); });
  return r.get_future().get();
}

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
    for (std::uint32_t p = 0; p < kShared; ++p) {
      EXPECT_TRUE(Take(scheduler_, p, 1).ok());
    }
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
    scheduler_.SetPolicy(
        "orders",
        [&](const Policy&, Policy* next) {
          *next = policy;
          return Status::Ok();
        },
        [&](Status s, const Policy&) { p.set_value(std::move(s)); });
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

// Two nodes on one store: a partition moves from a to b. a stops acting for
// it at once (its calls refused, its events forgotten, its writes refused
// by the store); b loads its timers and its events in flight (delivered
// again: at least once), and its versions go on past a's.
TEST(SharedPartitions, APartitionMovesBetweenNodes) {
  auto disk = std::make_shared<MemoryStore::Disk>();
  disk->SharePartitions(kShared);
  Scheduler a(SharedOn(disk)), b(SharedOn(disk));
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  for (std::uint32_t p = 0; p < kShared; ++p) ASSERT_TRUE(Take(a, p, 1).ok());
  NamespacePin pa, pb;
  ASSERT_TRUE(a.Intern("orders", &pa).ok());
  ASSERT_TRUE(b.Intern("orders", &pb).ok());
  auto apply = ApplyOn;
  auto worker = [](Scheduler& s, NamespaceId ns) {
    auto sub = std::make_shared<FakeSubscriber>();
    std::promise<void> registered;
    SubscribeOptions o;
    o.max_in_flight = 1000;
    s.dispatcher(ns).Subscribe(s.NewSubscriberId(), sub, o,
                               [&] { registered.set_value(); });
    registered.get_future().wait();
    return sub;
  };
  // Partition 3 gets 3 timers: 2 pending, 1 fired and in flight at a.
  const WallNanos later = WallNow() + 3'600'000'000'000;
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 3; ++i) {
    std::string key = "order-" + std::to_string(i);
    if (StablePartition("orders", key, kShared) == 3) keys.push_back(key);
  }
  std::uint64_t old_version = 0;
  for (const std::string& key : keys) {
    const OpResult r = apply(a, SetOp{pa.id(), Blob(key, "p-" + key), later});
    ASSERT_TRUE(r.status.ok());
    old_version = std::max(old_version, r.version);
  }
  ASSERT_TRUE(
      apply(a, SetOp{pa.id(), Blob("elsewhere", "p"), later}).status.ok());
  ASSERT_NE(StablePartition("orders", "elsewhere", kShared), 3u);
  auto at_a = worker(a, pa.id());
  ASSERT_TRUE(apply(a, MoveOp{pa.id(), keys[0], WallNow() - 1}).status.ok());
  ASSERT_EQ(at_a->WaitFor(1, 10s).size(), 1u);
  // b does not own it yet.
  EXPECT_EQ(apply(b, RemoveOp{pb.id(), keys[1]}).status.code(),
            Code::kUnavailable);

  Drop(a, 3);
  const OpResult refused = apply(a, RemoveOp{pa.id(), keys[1]});
  EXPECT_EQ(refused.status.code(), Code::kUnavailable);
  EXPECT_NE(refused.status.message().find("partition 3"), std::string::npos);
  std::promise<AckResult> acked;
  a.dispatcher(pa.id()).Ack({at_a->WaitFor(1, 0ms)[0].id},
                            [&](AckResult r) { acked.set_value(r); });
  EXPECT_EQ(acked.get_future().get().unknown.size(), 1u);  // Forgotten.
  EXPECT_EQ(disk->events(), 1u);                           // Kept for b.
  EXPECT_EQ(a.counters().pending.load(), 1u);              // "elsewhere"

  auto at_b = worker(b, pb.id());
  ASSERT_TRUE(Take(b, 3, 2).ok());
  // The event in flight at a is delivered again, from b.
  const auto again = at_b->WaitFor(1, 10s);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].key, keys[0]);
  EXPECT_EQ(again[0].payload, "p-" + keys[0]);
  std::promise<AckResult> acked_b;
  b.dispatcher(pb.id()).Ack({again[0].id},
                            [&](AckResult r) { acked_b.set_value(r); });
  const AckResult ab = acked_b.get_future().get();
  EXPECT_TRUE(ab.error.ok());
  EXPECT_EQ(ab.acked, 1u);
  EXPECT_EQ(b.counters().pending.load(), 2u);
  const OpResult moved = apply(b, SetOp{pb.id(), Blob(keys[1], "q"), later});
  ASSERT_TRUE(moved.status.ok());
  EXPECT_TRUE(moved.replaced);
  EXPECT_GT(moved.version, old_version);
  EXPECT_TRUE(apply(b, RemoveOp{pb.id(), keys[2]}).status.ok());
  EXPECT_EQ(disk->timers(), 2u);  // keys[1] and "elsewhere"
  EXPECT_EQ(disk->events(), 0u);
}

// A key's fate in a dedup window moves with its partition: the node that
// takes it refuses a create-only set of the key as the one before did.
TEST(SharedPartitions, DedupEntriesMoveWithTheirPartition) {
  auto disk = std::make_shared<MemoryStore::Disk>();
  disk->SharePartitions(kShared);
  Scheduler a(SharedOn(disk)), b(SharedOn(disk));
  ASSERT_TRUE(a.Start().ok());
  ASSERT_TRUE(b.Start().ok());
  for (std::uint32_t p = 0; p < kShared; ++p) ASSERT_TRUE(Take(a, p, 1).ok());
  std::promise<Status> set;
  a.SetPolicy(
      "orders",
      [](const Policy& current, Policy* next) {
        *next = current;
        next->dedup_window = std::chrono::hours(1);
        return Status::Ok();
      },
      [&](Status s, const Policy&) { set.set_value(s); });
  ASSERT_TRUE(set.get_future().get().ok());
  std::promise<Status> reloaded;
  b.ReloadPolicies([&](Status s) { reloaded.set_value(s); });
  ASSERT_TRUE(reloaded.get_future().get().ok());
  NamespacePin pa, pb;
  ASSERT_TRUE(a.Intern("orders", &pa).ok());
  ASSERT_TRUE(b.Intern("orders", &pb).ok());
  auto apply = ApplyOn;
  std::string key;
  for (int i = 0; key.empty(); ++i) {
    std::string k = "order-" + std::to_string(i);
    if (StablePartition("orders", k, kShared) == 3) key = k;
  }
  const WallNanos later = WallNow() + 3'600'000'000'000;
  ASSERT_TRUE(apply(a, SetOp{pa.id(), Blob(key, "p"), later}).status.ok());
  ASSERT_TRUE(apply(a, RemoveOp{pa.id(), key}).status.ok());
  EXPECT_EQ(apply(a, SetOp{pa.id(), Blob(key, "p"), later, true}).status.code(),
            Code::kAlreadyExists);
  Drop(a, 3);
  ASSERT_TRUE(Take(b, 3, 2).ok());
  const OpResult again = apply(b, SetOp{pb.id(), Blob(key, "p"), later, true});
  EXPECT_EQ(again.status.code(), Code::kAlreadyExists);
  EXPECT_NE(again.status.message().find("was removed"), std::string::npos)
      << again.status.message();
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
