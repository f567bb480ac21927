// A watcher gets a copy of every event, on every store, even of one a
// worker acknowledged (and so deleted from the store) before the watchers'
// read of its payload.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "tests/server/hung_disk.h"
#include "tests/server/test_stores.h"

namespace delayd::testing {
namespace {

// A worker that acknowledges every event the moment it arrives.
class AckingWorker {
 public:
  AckingWorker(v1::Delayd::Stub& stub, const std::string& ns) : stub_(stub) {
    reader_ = stub.Subscribe(&ctx_, TestStream::Worker(ns, 1000));
    thread_ = std::thread([this, ns] {
      v1::SubscribeResponse msg;
      while (reader_->Read(&msg)) {
        registered_ = true;
        std::vector<std::uint64_t> ids;
        for (const auto& e : msg.events()) ids.push_back(e.id());
        if (ids.empty()) continue;
        if (Ack(stub_, ns, ids).ok()) acked_ += ids.size();
      }
      reader_->Finish();
    });
  }
  ~AckingWorker() {
    ctx_.TryCancel();
    thread_.join();
  }
  bool registered() const { return registered_; }
  std::size_t acked() const { return acked_; }

 private:
  v1::Delayd::Stub& stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader_;
  std::thread thread_;
  std::atomic<bool> registered_{false};
  std::atomic<std::size_t> acked_{0};
};

std::set<std::string> Keys(const std::vector<v1::Event>& events) {
  std::set<std::string> keys;
  for (const auto& e : events) keys.insert(e.key());
  return keys;
}

class WatcherCopies : public ::testing::TestWithParam<Backend> {};

TEST_P(WatcherCopies, AWatcherGetsEveryEventThatAWorkerAcksAtOnce) {
  constexpr int kEvents = 300;
  TestStore store(GetParam());
  TestDaemon d(store.On(TestDaemon::DefaultOptions()));
  ASSERT_TRUE(d.started());
  TestStream watcher(d.stub(), TestStream::Watcher("jobs"));
  ASSERT_TRUE(watcher.WaitRegistered());
  AckingWorker worker(d.stub(), "jobs");
  ASSERT_TRUE(Eventually([&] { return worker.registered(); }));
  for (int round = 0; round < 3; ++round) {
    v1::BatchRequest req;
    for (int i = 0; i < kEvents / 3; ++i) {
      auto* set = req.add_operations()->mutable_set();
      set->set_namespace_("jobs");
      set->set_key("k" + std::to_string(round * 1000 + i));
      set->set_payload("payload of " + set->key());
      // Due one after another, each fired (and read) on its own.
      *set->mutable_delay() = Millis(50 + i);
    }
    v1::BatchResponse resp;
    ASSERT_TRUE(d.stub().Batch(Within().get(), req, &resp).ok());
  }
  ASSERT_TRUE(Eventually([&] { return worker.acked() == kEvents; }))
      << worker.acked();
  const auto copies = watcher.WaitFor(kEvents, 10s);
  EXPECT_EQ(Keys(copies).size(), static_cast<std::size_t>(kEvents));
  for (const auto& e : copies) EXPECT_EQ(e.payload(), "payload of " + e.key());
}

// The watchers' read held (a slow disk or database) while the worker's
// events come from memory and are acknowledged: once the read goes on, the
// watcher still gets every copy, with its payload.
TEST_P(WatcherCopies, AReadHeldPastTheAckStillGivesTheWatcherItsCopy) {
  ReadGate gate;
  TestStore store(GetParam());
  DelaydServer::Options options = store.On(TestDaemon::DefaultOptions());
  if (GetParam() == Backend::kPostgres) {
    PgOptions pg = store.Postgres();
    pg.before_payload_read = [&gate] { gate.Pass(); };
    options.scheduler.store = PgStoreOpener(pg);
  } else {
    options =
        GatedDaemon::Options(store.dir(), gate, /*cached_reads=*/true, nullptr);
  }
  struct Open {
    ReadGate& gate;
    ~Open() { gate.Release(); }
  } open{gate};
  TestDaemon d(options);
  ASSERT_TRUE(d.started());
  TestStream watcher(d.stub(), TestStream::Watcher("jobs"));
  ASSERT_TRUE(watcher.WaitRegistered());
  AckingWorker worker(d.stub(), "jobs");
  ASSERT_TRUE(Eventually([&] { return worker.registered(); }));
  gate.Hold();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(Set(d.stub(), "jobs", "k" + std::to_string(i), 0,
                    "p" + std::to_string(i))
                    .ok());
  }
  ASSERT_TRUE(Eventually([&] { return worker.acked() == 5; }));
  ASSERT_TRUE(Eventually([&] { return gate.waiting() > 0; }))
      << "the watchers' read did not reach the disk";
  EXPECT_EQ(watcher.Events().size(), 0u);
  gate.Release();
  const auto copies = watcher.WaitFor(5);
  ASSERT_EQ(Keys(copies).size(), 5u);
  for (const auto& e : copies) {
    EXPECT_EQ(e.payload(), "p" + e.key().substr(1));
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, WatcherCopies, AllBackends(), BackendName);

}  // namespace
}  // namespace delayd::testing
