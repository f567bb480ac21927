// Namespaces are created by writes only: reads and refused calls on names
// that do not exist change nothing, so they cannot use up the namespace
// limit; a subscriber may wait for a namespace that does not exist yet; a
// namespace left with no timers, events or subscribers is freed, in memory
// and in the store.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "tests/common/temp_dir.h"
#include "tests/server/test_client.h"
#include "tests/server/test_stores.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::Millis;
using testing::TestDaemon;
using testing::TestStream;

DelaydServer::Options FewNamespaces(const testing::TestStore* store = nullptr) {
  auto o = TestDaemon::DefaultOptions();
  o.scheduler.limits.max_namespaces = 2;
  return store != nullptr ? store->On(o) : o;
}

grpc::StatusCode Set(v1::Delayd::Stub& stub, const std::string& ns,
                     const std::string& key, std::int64_t delay_ms = 3600000) {
  grpc::ClientContext ctx;
  v1::SetTimerRequest r;
  r.set_namespace_(ns);
  r.set_key(key);
  *r.mutable_delay() = Millis(delay_ms);
  v1::SetTimerResponse resp;
  return stub.SetTimer(&ctx, r, &resp).error_code();
}

// Every kind of call that does not write, on 100 names that do not exist.
void ReadEverywhere(v1::Delayd::Stub& stub) {
  for (int i = 0; i < 100; ++i) {
    const std::string ns = "probe-" + std::to_string(i);
    {
      grpc::ClientContext ctx;
      v1::GetTimerRequest r;
      r.set_namespace_(ns);
      r.set_key("k");
      v1::Timer t;
      EXPECT_EQ(stub.GetTimer(&ctx, r, &t).error_code(),
                grpc::StatusCode::NOT_FOUND);
    }
    {
      grpc::ClientContext ctx;
      v1::ListTimersRequest r;
      r.set_namespace_(ns);
      v1::ListTimersResponse resp;
      EXPECT_TRUE(stub.ListTimers(&ctx, r, &resp).ok());
      EXPECT_EQ(resp.timers_size(), 0);
    }
    {
      grpc::ClientContext ctx;
      v1::AckRequest r;
      r.set_namespace_(ns);
      r.add_event_ids(7);
      v1::AckResponse resp;
      EXPECT_TRUE(stub.Ack(&ctx, r, &resp).ok());
      EXPECT_EQ(resp.unknown_ids_size(), 1);
    }
    {
      grpc::ClientContext ctx;
      v1::DrainRequest r;
      r.set_namespace_(ns);
      v1::DrainResponse resp;
      EXPECT_TRUE(stub.Drain(&ctx, r, &resp).ok());
      EXPECT_EQ(resp.drained(), 0u);
    }
    {
      grpc::ClientContext ctx;
      v1::MoveTimerRequest r;
      r.set_namespace_(ns);
      r.set_key("k");
      *r.mutable_delay() = Millis(1000);
      v1::MoveTimerResponse resp;
      EXPECT_EQ(stub.MoveTimer(&ctx, r, &resp).error_code(),
                grpc::StatusCode::NOT_FOUND);
    }
    {
      grpc::ClientContext ctx;
      v1::RemoveTimerRequest r;
      r.set_namespace_(ns);
      r.set_key("k");
      v1::RemoveTimerResponse resp;
      EXPECT_EQ(stub.RemoveTimer(&ctx, r, &resp).error_code(),
                grpc::StatusCode::NOT_FOUND);
    }
    {
      // A refused set (no fire time).
      grpc::ClientContext ctx;
      v1::SetTimerRequest r;
      r.set_namespace_(ns);
      r.set_key("k");
      v1::SetTimerResponse resp;
      EXPECT_EQ(stub.SetTimer(&ctx, r, &resp).error_code(),
                grpc::StatusCode::INVALID_ARGUMENT);
    }
  }
}

TEST(Namespaces, ReadsAndRefusedCallsCreateNone) {
  TestDaemon d(FewNamespaces());
  ReadEverywhere(d.stub());
  // Both namespaces the limit allows are still free.
  EXPECT_EQ(Set(d.stub(), "a", "k"), grpc::StatusCode::OK);
  EXPECT_EQ(Set(d.stub(), "b", "k"), grpc::StatusCode::OK);
  EXPECT_EQ(Set(d.stub(), "c", "k"), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

class NamespacesStored : public ::testing::TestWithParam<testing::Backend> {};

TEST_P(NamespacesStored, ReadsCreateNoneInTheStoreEither) {
  testing::TestStore store(GetParam());
  {
    TestDaemon d(FewNamespaces(&store));
    ReadEverywhere(d.stub());
    EXPECT_EQ(Set(d.stub(), "a", "k"), grpc::StatusCode::OK);
    d.Shutdown();
  }
  // After a restart with the same limit: one namespace came back, one free.
  TestDaemon d(FewNamespaces(&store));
  EXPECT_EQ(d.server().recovery().namespaces, 1u);
  EXPECT_EQ(Set(d.stub(), "b", "k"), grpc::StatusCode::OK);
}

TEST(Namespaces, SubscribersWaitForANamespaceWithoutUsingTheLimit) {
  TestDaemon d(FewNamespaces());
  // More subscribers of names that do not exist than the namespace limit.
  std::vector<std::unique_ptr<TestStream>> waiting;
  for (int i = 0; i < 5; ++i) {
    waiting.push_back(std::make_unique<TestStream>(
        d.stub(), TestStream::Watcher("later-" + std::to_string(i))));
    ASSERT_TRUE(waiting.back()->WaitRegistered());
  }
  TestStream worker(d.stub(), TestStream::Worker("later-0"));
  ASSERT_TRUE(worker.WaitRegistered());
  // The first write creates the namespace; its subscribers get its events.
  EXPECT_EQ(Set(d.stub(), "later-0", "k", 1), grpc::StatusCode::OK);
  EXPECT_EQ(waiting[0]->WaitFor(1).size(), 1u);
  EXPECT_EQ(worker.WaitFor(1).size(), 1u);
  EXPECT_EQ(Set(d.stub(), "other", "k"), grpc::StatusCode::OK);
  EXPECT_EQ(Set(d.stub(), "third", "k"), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // A waiting subscriber that leaves is forgotten; shutdown ends the rest.
  waiting[1]->Cancel();
  d.Shutdown();
  for (int i = 2; i < 5; ++i) {
    EXPECT_EQ(waiting[i]->WaitDone().error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }
}

grpc::StatusCode Remove(v1::Delayd::Stub& stub, const std::string& ns,
                        const std::string& key) {
  grpc::ClientContext ctx;
  v1::RemoveTimerRequest r;
  r.set_namespace_(ns);
  r.set_key(key);
  v1::RemoveTimerResponse resp;
  return stub.RemoveTimer(&ctx, r, &resp).error_code();
}

// Sets (ns, key) until the namespace limit lets it in, up to 5 s: a freed
// namespace is released asynchronously, just after the call that emptied it.
grpc::StatusCode SetWhenFreed(v1::Delayd::Stub& stub, const std::string& ns) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  grpc::StatusCode code;
  while ((code = Set(stub, ns, "k")) == grpc::StatusCode::RESOURCE_EXHAUSTED &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);  // Polls the condition, bounded.
  }
  return code;
}

TEST(Namespaces, AnEmptiedNamespaceIsFreed) {
  TestDaemon d(FewNamespaces());
  ASSERT_EQ(Set(d.stub(), "a", "k"), grpc::StatusCode::OK);
  ASSERT_EQ(Set(d.stub(), "b", "k"), grpc::StatusCode::OK);
  ASSERT_EQ(Set(d.stub(), "c", "k"), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_EQ(Remove(d.stub(), "a", "k"), grpc::StatusCode::OK);
  EXPECT_EQ(SetWhenFreed(d.stub(), "c"), grpc::StatusCode::OK);
  // "c" took a's place; b is untouched, a is gone.
  EXPECT_EQ(Set(d.stub(), "a", "k"), grpc::StatusCode::RESOURCE_EXHAUSTED);
  grpc::ClientContext ctx;
  v1::GetTimerRequest get;
  get.set_namespace_("b");
  get.set_key("k");
  v1::Timer t;
  EXPECT_TRUE(d.stub().GetTimer(&ctx, get, &t).ok());
  EXPECT_EQ(t.namespace_(), "b");
}

TEST(Namespaces, EventsAndSubscribersKeepANamespace) {
  TestDaemon d(FewNamespaces());
  ASSERT_EQ(Set(d.stub(), "b", "k"), grpc::StatusCode::OK);
  auto watcher =
      std::make_unique<TestStream>(d.stub(), TestStream::Watcher("a"));
  ASSERT_TRUE(watcher->WaitRegistered());
  ASSERT_EQ(Set(d.stub(), "a", "k", 1), grpc::StatusCode::OK);
  ASSERT_EQ(watcher->WaitFor(1).size(), 1u);
  // Fired but not acknowledged: the event keeps "a".
  auto worker = std::make_unique<TestStream>(d.stub(), TestStream::Worker("a"));
  const auto events = worker->WaitFor(1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(Set(d.stub(), "c", "k"), grpc::StatusCode::RESOURCE_EXHAUSTED);
  {
    grpc::ClientContext ctx;
    v1::AckRequest ack;
    ack.set_namespace_("a");
    ack.add_event_ids(events[0].id());
    v1::AckResponse resp;
    ASSERT_TRUE(d.stub().Ack(&ctx, ack, &resp).ok());
    EXPECT_EQ(resp.acked(), 1u);
  }
  // Acknowledged; the subscribers still keep it.
  worker.reset();
  EXPECT_EQ(Set(d.stub(), "c", "k"), grpc::StatusCode::RESOURCE_EXHAUSTED);
  watcher.reset();
  EXPECT_EQ(SetWhenFreed(d.stub(), "c"), grpc::StatusCode::OK);
}

TEST_P(NamespacesStored, AFreedIdIsReusedAcrossARestart) {
  testing::TestStore store(GetParam());
  {
    TestDaemon d(FewNamespaces(&store));
    ASSERT_EQ(Set(d.stub(), "a", "k"), grpc::StatusCode::OK);
    ASSERT_EQ(Set(d.stub(), "b", "k"), grpc::StatusCode::OK);
    ASSERT_EQ(Remove(d.stub(), "a", "k"), grpc::StatusCode::OK);
    ASSERT_EQ(SetWhenFreed(d.stub(), "c"), grpc::StatusCode::OK);
    d.Shutdown();
  }
  TestDaemon d(FewNamespaces(&store));
  EXPECT_EQ(d.server().recovery().namespaces, 2u);
  for (const std::string ns : {"b", "c"}) {
    grpc::ClientContext ctx;
    v1::GetTimerRequest get;
    get.set_namespace_(ns);
    get.set_key("k");
    v1::Timer t;
    EXPECT_TRUE(d.stub().GetTimer(&ctx, get, &t).ok()) << ns;
    EXPECT_EQ(t.namespace_(), ns);
  }
  EXPECT_EQ(Set(d.stub(), "a", "k"), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_EQ(Remove(d.stub(), "b", "k"), grpc::StatusCode::OK);
  EXPECT_EQ(SetWhenFreed(d.stub(), "a"), grpc::StatusCode::OK);
}

// What namespace `ns` holds in the test below: a pending timer "k" with
// payload "p-NS", and a fired, unacknowledged event of key "e" with payload
// "q-NS" (the survivors only).
void Fill(v1::Delayd::Stub& stub, const std::string& ns, bool with_event) {
  grpc::ClientContext ctx;
  v1::SetTimerRequest r;
  r.set_namespace_(ns);
  r.set_key("k");
  r.set_payload("p-" + ns);
  *r.mutable_delay() = Millis(3600000);
  v1::SetTimerResponse resp;
  ASSERT_TRUE(stub.SetTimer(&ctx, r, &resp).ok()) << ns;
  if (!with_event) return;
  grpc::ClientContext ctx2;
  r.set_key("e");
  r.set_payload("q-" + ns);
  *r.mutable_delay() = Millis(1);
  ASSERT_TRUE(stub.SetTimer(&ctx2, r, &resp).ok()) << ns;
}

grpc::StatusCode GetCode(v1::Delayd::Stub& stub, const std::string& ns,
                         const std::string& key, v1::Timer* t) {
  grpc::ClientContext ctx;
  v1::GetTimerRequest get;
  get.set_namespace_(ns);
  get.set_key(key);
  return stub.GetTimer(&ctx, get, t).error_code();
}

// Every live namespace holds its own timer and event, under its own name;
// the emptied ones hold nothing.
void ExpectEachInItsOwn(v1::Delayd::Stub& stub,
                        const std::vector<std::string>& live,
                        const std::vector<std::string>& emptied) {
  for (const std::string& ns : live) {
    v1::Timer t;
    ASSERT_EQ(GetCode(stub, ns, "k", &t), grpc::StatusCode::OK) << ns;
    EXPECT_EQ(t.namespace_(), ns);
    EXPECT_EQ(t.payload(), "p-" + ns);
    grpc::ClientContext ctx;
    v1::ListTimersRequest list;
    list.set_namespace_(ns);
    v1::ListTimersResponse page;
    ASSERT_TRUE(stub.ListTimers(&ctx, list, &page).ok());
    ASSERT_EQ(page.timers_size(), 1) << ns;
    EXPECT_EQ(page.timers(0).payload(), "p-" + ns);
    // A watcher sees nothing of what waits; a worker gets the event.
    TestStream worker(stub, TestStream::Worker(ns));
    const auto events = worker.WaitFor(1);
    ASSERT_EQ(events.size(), 1u) << ns;
    EXPECT_EQ(events[0].namespace_(), ns);
    EXPECT_EQ(events[0].key(), "e");
    EXPECT_EQ(events[0].payload(), "q-" + ns);
  }
  for (const std::string& ns : emptied) {
    v1::Timer t;
    EXPECT_EQ(GetCode(stub, ns, "k", &t), grpc::StatusCode::NOT_FOUND) << ns;
  }
}

// Namespaces emptied first, in the middle, last, and several at once:
// after each of three restarts every record is read back under the
// namespace it was written under, and a new namespace (taking a freed id)
// keeps its own too.
TEST_P(NamespacesStored, RecordsComeBackUnderTheirNamespaceWhateverWasFreed) {
  const std::vector<std::vector<int>> emptied_sets = {
      {0}, {2}, {5}, {0, 2, 3}, {1, 4, 5}};
  for (const auto& emptied_set : emptied_sets) {
    SCOPED_TRACE("emptied: " + ::testing::PrintToString(emptied_set));
    testing::TestStore store(GetParam());
    std::vector<std::string> live, emptied;
    {
      TestDaemon d(store.On(TestDaemon::DefaultOptions()));
      for (int i = 0; i < 6; ++i) {
        const std::string ns = "n" + std::to_string(i);
        const bool empties =
            std::count(emptied_set.begin(), emptied_set.end(), i) > 0;
        (empties ? emptied : live).push_back(ns);
        Fill(d.stub(), ns, !empties);
      }
      for (const std::string& ns : live) {  // Each event fired.
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        v1::Timer t;
        while (GetCode(d.stub(), ns, "e", &t) == grpc::StatusCode::OK &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(2ms);  // Polls the condition, bounded.
        }
      }
      for (const std::string& ns : emptied) {
        ASSERT_EQ(Remove(d.stub(), ns, "k"), grpc::StatusCode::OK);
      }
      d.Shutdown();
    }
    for (int restart = 0; restart < 3; ++restart) {
      TestDaemon d(store.On(TestDaemon::DefaultOptions()));
      ASSERT_TRUE(d.started());
      EXPECT_EQ(d.server().recovery().namespaces, live.size());
      ExpectEachInItsOwn(d.stub(), live, emptied);
      if (restart == 1) {
        // A new namespace after the restart takes a freed id.
        Fill(d.stub(), "fresh", /*with_event=*/true);
        live.push_back("fresh");
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        v1::Timer t;
        while (GetCode(d.stub(), "fresh", "e", &t) == grpc::StatusCode::OK &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(2ms);  // Polls the condition, bounded.
        }
      }
      d.Shutdown();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, NamespacesStored, testing::AllBackends(),
                         testing::BackendName);

}  // namespace
}  // namespace delayd
