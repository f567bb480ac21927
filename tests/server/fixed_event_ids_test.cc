// Event ids fixed by versions (Store::FixedEventIdsFrom; the daemon's
// --fixed-event-ids), over the memory store: a fired timer's event id is its
// version; its event leaves once its firing is queued, and if that firing never
// reaches the disk (a crash) the timer fires again after the restart under the
// same id. A store made before ids were fixed keeps counter ids for the timers
// it held, and those meet no fixed one; a store without fixed ids publishes
// only what is written.
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <set>
#include <string>

#include "server/core/scheduler.h"
#include "server/store/memory/memory_store.h"
#include "tests/server/fake_subscriber.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::FakeSubscriber;

constexpr WallNanos kHour = 3'600'000'000'000;

// One daemon's core over `disk`, with namespaces pinned by name.
class Node {
 public:
  explicit Node(std::shared_ptr<MemoryStore::Disk> disk)
      : scheduler_([&] {
          Scheduler::Options o;
          o.partitions = 4;
          o.threads = 2;
          o.store = MemoryStore::Opener(std::move(disk));
          return o;
        }()) {}
  Status Start() { return scheduler_.Start(); }
  NamespaceId Ns(const std::string& name) {
    auto it = pins_.find(name);
    if (it == pins_.end()) {
      it = pins_.emplace(name, NamespacePin()).first;
      EXPECT_TRUE(scheduler_.Intern(name, &it->second).ok());
    }
    return it->second.id();
  }
  // Sets `key` an hour ahead; its version (0 if refused).
  std::uint64_t Set(const std::string& ns, const std::string& key) {
    std::promise<OpResult> r;
    scheduler_.Submit(SetOp{Ns(ns), Blob(key, "p"), WallNow() + kHour},
                      [&](OpResult res) { r.set_value(std::move(res)); });
    const OpResult res = r.get_future().get();
    EXPECT_TRUE(res.status.ok()) << res.status.message();
    return res.status.ok() ? res.version : 0;
  }
  // Drains `ns`; its answer's future (it waits for the firing's sync).
  std::future<Status> Drain(const std::string& ns) {
    auto done = std::make_shared<std::promise<Status>>();
    scheduler_.Drain(Ns(ns), [done](Status s, std::uint64_t) {
      done->set_value(std::move(s));
    });
    return done->get_future();
  }
  std::shared_ptr<FakeSubscriber> Worker(const std::string& ns) {
    auto sub = std::make_shared<FakeSubscriber>();
    std::promise<void> registered;
    SubscribeOptions options;
    options.max_in_flight = 1000;
    scheduler_.dispatcher(Ns(ns)).Subscribe(scheduler_.NewSubscriberId(), sub,
                                            options,
                                            [&] { registered.set_value(); });
    registered.get_future().wait();
    return sub;
  }

 private:
  Scheduler scheduler_;
  std::map<std::string, NamespacePin> pins_;
};

TEST(FixedEventIds, AnEventsIdIsItsTimersVersion) {
  auto disk = std::make_shared<MemoryStore::Disk>();
  disk->FixEventIdsFrom(0);
  Node node(disk);
  ASSERT_TRUE(node.Start().ok());
  std::map<std::string, std::uint64_t> versions;
  for (int i = 0; i < 20; ++i) {
    const std::string key = "order-" + std::to_string(i);
    versions[key] = node.Set("shop", key);
  }
  auto worker = node.Worker("shop");
  ASSERT_TRUE(node.Drain("shop").get().ok());
  const auto got = worker->WaitFor(20, 10s);
  ASSERT_EQ(got.size(), 20u);
  for (const auto& e : got) EXPECT_EQ(e.id, versions[e.key]) << e.key;
}

TEST(FixedEventIds, AnEventLeavesBeforeItsFiringIsWrittenAndAgainUnderItsId) {
  auto disk = std::make_shared<MemoryStore::Disk>();
  disk->FixEventIdsFrom(0);
  std::uint64_t first_id = 0;
  std::uint64_t version = 0;
  {
    Node node(disk);
    ASSERT_TRUE(node.Start().ok());
    version = node.Set("shop", "order-1");
    auto worker = node.Worker("shop");
    disk->Hold();  // Nothing reaches the disk from here.
    auto drained = node.Drain("shop");
    const auto got = worker->WaitFor(1, 10s);
    EXPECT_EQ(disk->events(), 0u);  // (Still held: not written.)
    // The machine is lost before the firing is written.
    disk->FailWrites(Status::Internal("the machine was lost"));
    disk->Release();
    ASSERT_EQ(got.size(), 1u) << "the event waited for its firing's write";
    first_id = got[0].id;
    EXPECT_EQ(first_id, version);
    EXPECT_FALSE(drained.get().ok());
  }
  disk->FailWrites(Status::Ok());
  EXPECT_EQ(disk->timers(), 1u);
  EXPECT_EQ(disk->events(), 0u);
  Node restarted(disk);
  ASSERT_TRUE(restarted.Start().ok());
  auto worker = restarted.Worker("shop");
  ASSERT_TRUE(restarted.Drain("shop").get().ok());
  const auto again = worker->WaitFor(1, 10s);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].key, "order-1");
  EXPECT_EQ(again[0].id, first_id) << "fired again under another id";
}

TEST(FixedEventIds, AnEventWithACountersIdWaitsForItsFiringsWrite) {
  auto disk = std::make_shared<MemoryStore::Disk>();  // (Ids not fixed.)
  Node node(disk);
  ASSERT_TRUE(node.Start().ok());
  node.Set("shop", "order-1");
  auto worker = node.Worker("shop");
  disk->Hold();
  auto drained = node.Drain("shop");
  // (No condition says "not published": a bounded wait for one.)
  const std::size_t early = worker->WaitFor(1, 200ms).size();
  disk->Release();
  EXPECT_EQ(early, 0u) << "an event left before its firing was written";
  ASSERT_TRUE(drained.get().ok());
  EXPECT_EQ(worker->WaitFor(1, 10s).size(), 1u);
}

// A store that held timers before its ids were fixed: its pending events
// and timers have counter ids; opened again with ids fixed from far past
// its counters (as RocksStore records them), its
// old timers still take counter ids, new ones their versions, and no two
// events share an id.
TEST(FixedEventIds, AStoreFromBeforeKeepsCounterIdsThatMeetNoFixedOne) {
  auto disk = std::make_shared<MemoryStore::Disk>();  // (Ids not fixed.)
  std::map<std::string, std::uint64_t> old_versions;
  std::set<std::uint64_t> old_ids;
  {
    Node node(disk);
    ASSERT_TRUE(node.Start().ok());
    for (int i = 0; i < 8; ++i) {
      const std::string n = std::to_string(i);
      node.Set("fired", "fired-" + n);
      old_versions["kept-" + n] = node.Set("kept", "kept-" + n);
    }
    auto worker = node.Worker("fired");
    ASSERT_TRUE(node.Drain("fired").get().ok());
    for (const auto& e : worker->WaitFor(8, 10s)) old_ids.insert(e.id);
    ASSERT_EQ(old_ids.size(), 8u);  // (Left unacknowledged.)
  }
  constexpr std::uint64_t kFixedFrom = std::uint64_t{1} << 40;
  disk->FixEventIdsFrom(kFixedFrom);
  Node node(disk);
  ASSERT_TRUE(node.Start().ok());
  std::map<std::string, std::uint64_t> new_versions;
  for (int i = 0; i < 8; ++i) {
    const std::string key = "new-" + std::to_string(i);
    new_versions[key] = node.Set("kept", key);
    EXPECT_GE(new_versions[key] >> 10, kFixedFrom);
  }
  auto fired = node.Worker("fired");
  auto kept = node.Worker("kept");
  ASSERT_TRUE(node.Drain("kept").get().ok());
  std::set<std::uint64_t> ids;
  for (const auto& e : fired->WaitFor(8, 10s)) {
    EXPECT_TRUE(old_ids.count(e.id)) << "redelivered under another id";
    ids.insert(e.id);
  }
  for (const auto& e : kept->WaitFor(16, 10s)) {
    if (new_versions.count(e.key)) {
      EXPECT_EQ(e.id, new_versions[e.key]) << e.key;
    } else {
      ASSERT_TRUE(old_versions.count(e.key)) << e.key;
      EXPECT_LT(e.id >> 10, kFixedFrom) << e.key;
    }
    ids.insert(e.id);
  }
  EXPECT_EQ(ids.size(), 24u) << "two events share an id";
}

}  // namespace
}  // namespace delayd
