// The PostgreSQL store shared by several nodes (PgOptions::shared), against
// a real server the test starts: no node takes the database for itself; a
// node writes only partitions it holds a lease on; a node whose lease moved
// on has its writes, deletes included, refused by the database (the fence),
// and goes on writing the partitions it still holds; the recovery scans see
// only the partitions held.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "server/common/stable_hash.h"
#include "server/store/postgres/pg_lease.h"
#include "server/store/postgres/pg_store.h"
#include "tests/server/test_stores.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::PostgresServer;

constexpr int kParts = 8;

class PgFenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pg_ = testing::SharedPostgres();
    ASSERT_NE(pg_, nullptr);
    db_ = pg_->NewDatabase();
    leases_ = pg::Conn(PQconnectdb(pg_->Url(db_).c_str()));
  }
  std::unique_ptr<PgStore> Open(
      const std::string& node,
      std::function<void(PGconn*)> after_group_sent = nullptr) {
    PgOptions o;
    o.after_group_sent = std::move(after_group_sent);
    o.conninfo = pg_->Url(db_);
    o.node = node;
    o.shared = true;
    o.partitions = kParts;
    o.reconnect_first = 20ms;
    o.reconnect_last = 200ms;
    std::unique_ptr<PgStore> store;
    const Status s = PgStore::Open(o, StoreHooks{}, &store);
    EXPECT_TRUE(s.ok()) << s.message();
    return store;
  }
  // Takes `parts` for `node` (free ones only).
  std::vector<pg::Lease> Take(const std::string& node,
                              const std::vector<int>& parts,
                              pg::LeaseTerms terms = {60s, 1s}) {
    std::vector<pg::Lease> got;
    EXPECT_TRUE(pg::Acquire(leases_.get(), node, parts, terms, &got).ok());
    return got;
  }
  // `node` takes `part` once its lease expired (within 10 s).
  std::vector<pg::Lease> TakeOver(const std::string& node, int part) {
    std::vector<pg::Lease> got;
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (got.empty() && std::chrono::steady_clock::now() < end) {
      got = Take(node, {part});
      std::this_thread::sleep_for(10ms);  // (Polling the lease's expiry.)
    }
    return got;
  }
  static Store::Held Held(const std::vector<pg::Lease>& leases) {
    Store::Held held;
    for (const pg::Lease& l : leases) held[l.part] = l.epoch;
    return held;
  }
  // A key of namespace "orders" in partition `part`.
  static std::string KeyIn(int part, int n = 0) {
    for (int i = 0;; ++i) {
      std::string key = "k" + std::to_string(i);
      if (StablePartition("orders", key, kParts) ==
              static_cast<std::uint32_t>(part) &&
          n-- == 0) {
        return key;
      }
    }
  }
  // Adds timer `key` (payload id `id`), naming its partition.
  static Batch Add(const std::string& key, std::uint64_t id) {
    Batch b;
    b.PutNamespace(0, "orders");
    b.AddTimer(StoredTimer{0, key, WallNow() + 3'600'000'000'000, id, id}, "p");
    b.Touch(StablePartition("orders", key, kParts));
    return b;
  }
  static Status CommitNow(PgStore& store, Batch batch) {
    std::promise<Status> done;
    store.Commit(batch, [&](Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  }
  std::string Rows(const std::string& key) {
    return pg_->Exec(db_, "SELECT count(*) FROM delayd_jobs WHERE key = '" +
                              key + "'::bytea");
  }

  PostgresServer* pg_ = nullptr;
  std::string db_;
  pg::Conn leases_;
};

TEST_F(PgFenceTest, NodesShareTheDatabaseAndWriteOnlyWhatTheyHold) {
  auto a = Open("a"), b = Open("b");  // Neither waits for the other.
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->SharedPartitions(), static_cast<std::uint32_t>(kParts));
  a->SetHeld(Held(Take("a", {0, 1, 2, 3})));
  b->SetHeld(Held(Take("b", {4, 5, 6, 7})));
  EXPECT_TRUE(CommitNow(*a, Add(KeyIn(1), 1)).ok());
  EXPECT_EQ(Rows(KeyIn(1)), "1");
  // A partition held by another node: not written, and retryable.
  Status s = CommitNow(*a, Add(KeyIn(5), 2));
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("partition 5 is not held by node 'a'"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(Rows(KeyIn(5)), "0");
  // A batch touching one held and one not: none of it.
  Batch both = Add(KeyIn(2), 3);
  both.Append(Add(KeyIn(6), 4));
  EXPECT_EQ(CommitNow(*a, std::move(both)).code(), Code::kUnavailable);
  EXPECT_EQ(Rows(KeyIn(2)), "0");
  EXPECT_EQ(Rows(KeyIn(6)), "0");
  EXPECT_TRUE(CommitNow(*b, Add(KeyIn(5), 5)).ok());
  // A node taking a partition reads its records (and its id limits).
  Batch fire;  // (A second timer, fired, with a failed delivery.)
  fire.Append(Add(KeyIn(5, 1), 6));
  fire.FireTimer(StoredEvent{77, 0, KeyIn(5, 1), 6, 1, 2, Reason::kExpired, 6});
  fire.PutFate(77, 6, StoredFate{2, false, "busy", 123});
  EXPECT_TRUE(CommitNow(*b, std::move(fire)).ok());
  Batch reserve;
  reserve.ReserveIds(5, 100, 200);
  reserve.Touch(5);
  EXPECT_TRUE(CommitNow(*b, std::move(reserve)).ok());
  std::uint64_t versions = 0, events = 0;
  std::vector<std::string> seen;
  Store::PartitionVisitor visit;
  visit.timer = [&](std::string_view ns, const StoredTimer& t) {
    seen.push_back(std::string(ns) + "/" + std::string(t.key));
  };
  std::vector<std::string> fired;
  visit.event = [&](std::string_view ns, const StoredEvent& e,
                    const StoredFate* f) {
    fired.push_back(std::string(ns) + "/" + std::string(e.key) + " " +
                    std::to_string(e.id) + " payload " +
                    std::to_string(e.payload_id) + " attempts " +
                    (f ? std::to_string(f->attempts) + " " +
                             std::string(f->error) + " " +
                             std::to_string(f->retry_at)
                       : "none"));
  };
  visit.schedule = [&](std::string_view, std::string_view, std::string_view) {
    ADD_FAILURE() << "no schedule was written";
  };
  ASSERT_TRUE(a->LoadPartition(5, &versions, &events, visit).ok());
  EXPECT_EQ(seen, std::vector<std::string>{"orders/" + KeyIn(5)});
  EXPECT_EQ(fired,
            std::vector<std::string>{"orders/" + KeyIn(5, 1) +
                                     " 77 payload 6 attempts 2 busy 123"});
  EXPECT_EQ(versions, 100u);
  EXPECT_EQ(events, 200u);
  seen.clear();
  ASSERT_TRUE(a->LoadPartition(1, &versions, &events, visit).ok());
  EXPECT_EQ(seen, std::vector<std::string>{"orders/" + KeyIn(1)});
  EXPECT_EQ(versions, 0u);
}

// Temporal's lesson (their PR #12016): a deposed owner's delete must not
// remove its successor's timer. Node a's lease on partition 2 expires and b
// takes it while a still believes it holds it: a's delete and a's add fail
// in the database, the row stays for b, and a goes on writing the partition
// it still holds.
TEST_F(PgFenceTest, ADeposedNodesWritesAndDeletesAreFenced) {
  auto a = Open("a"), b = Open("b");
  ASSERT_TRUE(a && b);
  const std::vector<pg::Lease> mine = Take("a", {2}, {300ms, 100ms});
  ASSERT_EQ(mine.size(), 1u);
  a->SetHeld(Held(mine));
  ASSERT_TRUE(CommitNow(*a, Add(KeyIn(2), 1)).ok());
  const std::vector<pg::Lease> theirs = TakeOver("b", 2);
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(theirs[0].epoch, mine[0].epoch + 1);
  b->SetHeld(Held(theirs));
  // a's delete: refused by the fence, the row kept (a reads its leases
  // again then: the partition is not a's).
  Batch remove;
  remove.RemoveTimer(1);
  remove.Touch(2);
  Status s = CommitNow(*a, std::move(remove));
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("partition 2 is not held by node 'a'"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(Rows(KeyIn(2)), "1");
  // a now knows it lost partition 2: refused before it is sent.
  s = CommitNow(*a, Add(KeyIn(2, 1), 2));
  EXPECT_NE(s.message().find("partition 2 is not held"), std::string::npos)
      << s.message();
  EXPECT_EQ(Rows(KeyIn(2, 1)), "0");
  // b owns the row now.
  Batch taken;
  taken.RemoveTimer(1);
  taken.Touch(2);
  EXPECT_TRUE(CommitNow(*b, std::move(taken)).ok());
  EXPECT_EQ(Rows(KeyIn(2)), "0");
  // a's writer goes on with what it holds.
  a->SetHeld(Held(Take("a", {3})));
  EXPECT_TRUE(CommitNow(*a, Add(KeyIn(3), 3)).ok());
  EXPECT_EQ(Rows(KeyIn(3)), "1");
}

// A firing's events leave (Write's `written`) only once its group
// committed: a group the fence refuses publishes nothing, since the
// partition's next owner fires the same timers again, as other events.
TEST_F(PgFenceTest, AFiringTheFenceRefusesPublishesNothing) {
  auto a = Open("a"), b = Open("b");
  ASSERT_TRUE(a && b);
  const std::vector<pg::Lease> mine = Take("a", {2, 3}, {300ms, 100ms});
  ASSERT_EQ(mine.size(), 2u);
  a->SetHeld(Held(mine));
  ASSERT_TRUE(CommitNow(*a, Add(KeyIn(2), 1)).ok());
  auto write = [&](Batch batch, bool* published) {
    std::promise<Status> done;
    a->Write(
        batch, [published] { *published = true; },
        [&](Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  };
  bool published = false;
  ASSERT_TRUE(write(Add(KeyIn(3), 2), &published).ok());
  EXPECT_TRUE(published);
  const std::vector<pg::Lease> theirs = TakeOver("b", 2);
  ASSERT_EQ(theirs.size(), 1u);
  Batch fire;
  fire.RemoveTimer(1);
  fire.Touch(2);
  published = false;
  const Status s = write(std::move(fire), &published);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.message();
  EXPECT_FALSE(published);
  EXPECT_EQ(Rows(KeyIn(2)), "1");
}

// A group the fence refuses holds the batches of several partitions: those
// of partitions still held are written when it goes again; only those of
// the partition lost are refused. (A firing refused for another
// partition's loss would leave its timers stored and fired by no one.)
TEST_F(PgFenceTest, APartitionLostCostsTheOthersInItsGroupNothing) {
  std::unique_ptr<PgStore> a;
  // While the writer awaits a group's answers, two batches are queued:
  // they form the next group together.
  std::promise<Status> lost_done, held_done;
  std::atomic<bool> armed{false};
  a = Open("a", [&](PGconn*) {
    if (!armed.exchange(false)) return;
    Batch lost = Add(KeyIn(2, 1), 2), held = Add(KeyIn(3), 3);
    a->Commit(lost, [&](Status s) { lost_done.set_value(std::move(s)); });
    a->Commit(held, [&](Status s) { held_done.set_value(std::move(s)); });
  });
  auto b = Open("b");
  ASSERT_TRUE(a && b);
  const std::vector<pg::Lease> short_lease = Take("a", {2}, {300ms, 100ms});
  const std::vector<pg::Lease> long_lease = Take("a", {3});
  ASSERT_EQ(short_lease.size() + long_lease.size(), 2u);
  Store::Held held = Held(short_lease);
  held.merge(Held(long_lease));
  a->SetHeld(held);
  ASSERT_EQ(TakeOver("b", 2).size(), 1u);
  armed = true;
  EXPECT_TRUE(CommitNow(*a, Add(KeyIn(3, 1), 1)).ok());
  const Status lost = lost_done.get_future().get();
  const Status kept = held_done.get_future().get();
  EXPECT_EQ(lost.code(), Code::kUnavailable) << lost.message();
  EXPECT_TRUE(kept.ok()) << kept.message();
  EXPECT_EQ(Rows(KeyIn(2, 1)), "0");
  EXPECT_EQ(Rows(KeyIn(3)), "1");
}

// A partition read whose connection the database dropped (a fail-over, an
// operator, a restart) is not reported as a store error (which the daemon
// takes for damage and keeps NOT_SERVING until a restart): it reads on a
// new connection, or fails UNAVAILABLE to be tried again.
TEST(PgStoreRead, AReadOnALostConnectionIsUnavailableNotDamage) {
  std::string error;
  auto own = PostgresServer::Start(&error);
  ASSERT_NE(own, nullptr) << error;
  const std::string db = own->NewDatabase();
  PgOptions o;
  o.conninfo = own->Url(db);
  o.node = "a";
  o.shared = true;
  o.partitions = kParts;
  o.readers = 1;
  o.reconnect_first = 20ms;
  o.reconnect_last = 200ms;
  std::atomic<int> errors{0};
  StoreHooks hooks;
  hooks.on_error = [&](const Status&) { errors.fetch_add(1); };
  std::unique_ptr<PgStore> store;
  ASSERT_TRUE(PgStore::Open(o, std::move(hooks), &store).ok());
  std::uint64_t versions = 0, events = 0;
  Store::PartitionVisitor visit;
  visit.timer = [](std::string_view, const StoredTimer&) {};
  visit.event = [](std::string_view, const StoredEvent&, const StoredFate*) {};
  visit.schedule = [](std::string_view, std::string_view, std::string_view) {};
  ASSERT_TRUE(store->LoadPartition(0, &versions, &events, visit).ok());
  own->Exec(db,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()");
  const Status s = store->LoadPartition(1, &versions, &events, visit);
  EXPECT_TRUE(s.ok() || s.code() == Code::kUnavailable) << s.message();
  EXPECT_EQ(errors.load(), 0);
  Status again;
  for (int i = 0; i < 50; ++i) {
    again = store->LoadPartition(1, &versions, &events, visit);
    if (again.ok()) break;
    std::this_thread::sleep_for(100ms);  // The pool reconnects.
  }
  EXPECT_TRUE(again.ok()) << again.message();
  EXPECT_EQ(errors.load(), 0);
}

}  // namespace
}  // namespace delayd
