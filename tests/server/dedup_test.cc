// The dedup window (Policy::dedup_window): its stored record and table,
// and against an in-process daemon on each store: a create-only set of a
// key that fired or was removed is refused, naming that fate, through the
// window and across restarts; then accepted, and the record deleted; the
// bound on keys; namespaces emptied around entries.
#include <gtest/gtest.h>

#include "server/core/dedup_table.h"
#include "tests/common/fake_clock.h"
#include "tests/server/calls.h"
#include "tests/server/test_stores.h"

namespace delayd::testing {
namespace {

TEST(DedupRecord, RoundTripsAndRefusesDamage) {
  const DedupEntry e{DedupEntry::Fate::kRemoved, 12345, 1'000, 61'000};
  const std::string bytes = EncodeDedup(e);
  EXPECT_EQ(DecodeDedup(bytes), e);
  EXPECT_FALSE(DecodeDedup(bytes.substr(1)).has_value());
  EXPECT_FALSE(DecodeDedup(bytes + "x").has_value());
  std::string bad = bytes;
  bad[0] = 2;  // A version this build did not write.
  EXPECT_FALSE(DecodeDedup(bad).has_value());
  bad = bytes;
  bad[1] = 4;  // No such fate.
  EXPECT_FALSE(DecodeDedup(bad).has_value());
  const DedupEntry backwards{DedupEntry::Fate::kFired, 1, 5'000, 4'000};
  EXPECT_FALSE(DecodeDedup(EncodeDedup(backwards)).has_value());
}

TEST(DedupTable, FindsWithinTheWindowAndLetsTheSoonestEndingGoAtTheBound) {
  DedupWindows windows(4, /*max_entries=*/2);
  DedupTable t;
  std::optional<std::pair<NamespaceId, std::string>> evicted;
  using Fate = DedupEntry::Fate;
  EXPECT_EQ(t.Put(1, "a", {Fate::kFired, 1, 0, 100}, windows, &evicted), true);
  EXPECT_EQ(t.Put(1, "b", {Fate::kFired, 2, 0, 50}, windows, &evicted), true);
  EXPECT_FALSE(evicted);
  EXPECT_NE(t.Find(1, "a", 99), nullptr);
  EXPECT_EQ(t.Find(1, "a", 100), nullptr);  // The window has ended.
  EXPECT_EQ(t.Find(2, "a", 0), nullptr);    // Another namespace's key.
  // Replacing is no new entry.
  EXPECT_EQ(t.Put(1, "a", {Fate::kRemoved, 3, 10, 110}, windows, &evicted),
            false);
  EXPECT_EQ(t.Find(1, "a", 0)->version, 3u);
  // At the bound, the one ending soonest ("b") goes.
  EXPECT_EQ(t.Put(1, "c", {Fate::kFired, 4, 0, 200}, windows, &evicted), true);
  ASSERT_TRUE(evicted);
  EXPECT_EQ(evicted->second, "b");
  EXPECT_EQ(windows.entries.load(), 2u);
  EXPECT_EQ(windows.evicted.load(), 1u);
  auto gone = t.TakeExpired(150, 10, windows);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0], (std::pair<NamespaceId, std::string>{1, "a"}));
  EXPECT_EQ(windows.entries.load(), 1u);
}

class DedupWindow : public ::testing::TestWithParam<Backend> {
 protected:
  DelaydServer::Options Options(std::uint64_t max_keys = 1'000'000,
                                std::uint32_t partitions = 2) {
    DelaydServer::Options o = TestDaemon::DefaultOptions();
    o.scheduler.partitions = partitions;
    o.scheduler.clock = &clock_;
    o.scheduler.clock_poll = 5ms;  // (Real time: the purge's pace.)
    o.scheduler.limits.max_dedup_keys = max_keys;
    return store_.On(o);
  }
  static void SetWindow(TestDaemon& d, const std::string& ns,
                        std::int64_t window_ms) {
    v1::SetPolicyRequest req;
    req.set_namespace_(ns);
    *req.mutable_policy()->mutable_dedup_window() = Millis(window_ms);
    req.mutable_update_mask()->add_paths("dedup_window");
    v1::Policy out;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().SetPolicy(&ctx, req, &out).ok());
    EXPECT_EQ(out.dedup_window().seconds() * 1000 +
                  out.dedup_window().nanos() / 1'000'000,
              window_ms);
  }
  static grpc::Status CreateOnly(TestDaemon& d, const std::string& ns,
                                 const std::string& key,
                                 v1::SetTimerResponse* out = nullptr) {
    return Set(d.stub(), ns, key, 3'600'000, "again", out, /*if_absent=*/true);
  }
  static grpc::Status Remove(TestDaemon& d, const std::string& ns,
                             const std::string& key) {
    v1::RemoveTimerRequest req;
    req.set_namespace_(ns);
    req.set_key(key);
    v1::RemoveTimerResponse resp;
    grpc::ClientContext ctx;
    return d.stub().RemoveTimer(&ctx, req, &resp);
  }
  // Waits (5 s at most) until the daemon remembers `n` keys.
  static bool WaitEntries(TestDaemon& d, std::uint64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    const DedupWindows& w = d.server().scheduler().dedup_windows();
    while (w.entries.load() != n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  TestStore store_{GetParam()};
  FakeClock clock_;
};

TEST_P(DedupWindow, AKeyThatFiredOrWasRemovedIsRefusedThroughTheWindow) {
  std::uint64_t fired_version = 0;
  {
    TestDaemon d(Options());
    SetWindow(d, "jobs", 60'000);
    TestStream worker(d.stub(), TestStream::Worker("jobs"));
    ASSERT_TRUE(worker.WaitRegistered());
    ASSERT_TRUE(Set(d.stub(), "jobs", "fired", 0).ok());
    const auto got = worker.WaitFor(1);
    ASSERT_EQ(got.size(), 1u);
    fired_version = got[0].version();
    ASSERT_TRUE(AckEvents(d.stub(), "jobs", got).ok());
    ASSERT_TRUE(Set(d.stub(), "jobs", "removed", 3'600'000).ok());
    ASSERT_TRUE(Remove(d, "jobs", "removed").ok());
    // A namespace without a window remembers nothing.
    TestStream other(d.stub(), TestStream::Worker("other"));
    ASSERT_TRUE(other.WaitRegistered());
    ASSERT_TRUE(Set(d.stub(), "other", "fired", 0).ok());
    ASSERT_TRUE(AckEvents(d.stub(), "other", other.WaitFor(1)).ok());
    EXPECT_TRUE(CreateOnly(d, "other", "fired").ok());

    grpc::Status s = CreateOnly(d, "jobs", "fired");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    EXPECT_NE(s.error_message().find("'fired' fired and was acknowledged at"),
              std::string::npos)
        << s.error_message();
    EXPECT_NE(
        s.error_message().find("version " + std::to_string(fired_version)),
        std::string::npos)
        << s.error_message();
    s = CreateOnly(d, "jobs", "removed");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    EXPECT_NE(s.error_message().find("was removed"), std::string::npos)
        << s.error_message();
    // Only create-only sets are refused; nothing of the refusal is set.
    v1::Timer none;
    EXPECT_EQ(Get(d.stub(), "jobs", "removed", &none).error_code(),
              grpc::StatusCode::NOT_FOUND);
    EXPECT_TRUE(CreateOnly(d, "jobs", "never-set").ok());
    EXPECT_EQ(d.server().scheduler().dedup_windows().entries.load(), 2u);
    d.Shutdown();
  }
  clock_.Advance(30s);  // Down for half the window.
  {
    TestDaemon d(Options());
    ASSERT_TRUE(WaitEntries(d, 2));
    grpc::Status s = CreateOnly(d, "jobs", "fired");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    EXPECT_NE(
        s.error_message().find("version " + std::to_string(fired_version)),
        std::string::npos)
        << s.error_message();
    EXPECT_EQ(CreateOnly(d, "jobs", "removed").error_code(),
              grpc::StatusCode::ALREADY_EXISTS);
    clock_.Advance(29'999ms);  // 1 ms before the window ends.
    EXPECT_EQ(CreateOnly(d, "jobs", "removed").error_code(),
              grpc::StatusCode::ALREADY_EXISTS);
    clock_.Advance(1ms);
    v1::SetTimerResponse set;
    EXPECT_TRUE(CreateOnly(d, "jobs", "fired", &set).ok());
    EXPECT_GT(set.version(), fired_version);
    // The ended entries are deleted (in memory, then in the store).
    ASSERT_TRUE(WaitEntries(d, 0));
    d.Shutdown();
  }
  TestDaemon d(Options());
  EXPECT_EQ(d.server().scheduler().dedup_windows().entries.load(), 0u);
  EXPECT_TRUE(CreateOnly(d, "jobs", "removed").ok());
}

// At --max-dedup-keys, the keys whose windows end soonest go first; the
// store keeps no more than the bound either. (One partition: each lets its
// own soonest go.)
TEST_P(DedupWindow, KeysAreBounded) {
  {
    TestDaemon d(Options(/*max_keys=*/3, /*partitions=*/1));
    SetWindow(d, "jobs", 60'000);
    for (int i = 0; i < 5; ++i) {
      const std::string key = "k" + std::to_string(i);
      ASSERT_TRUE(Set(d.stub(), "jobs", key, 3'600'000).ok());
      ASSERT_TRUE(Remove(d, "jobs", key).ok());
      clock_.Advance(1s);
    }
    EXPECT_EQ(d.server().scheduler().dedup_windows().entries.load(), 3u);
    EXPECT_EQ(d.server().scheduler().dedup_windows().evicted.load(), 2u);
    EXPECT_TRUE(CreateOnly(d, "jobs", "k0").ok());
    EXPECT_EQ(CreateOnly(d, "jobs", "k4").error_code(),
              grpc::StatusCode::ALREADY_EXISTS);
    d.Shutdown();
  }
  TestDaemon d(Options(/*max_keys=*/3, /*partitions=*/1));
  ASSERT_TRUE(WaitEntries(d, 3));
  EXPECT_TRUE(CreateOnly(d, "jobs", "k1").ok());
  for (const char* key : {"k2", "k3", "k4"}) {
    EXPECT_EQ(CreateOnly(d, "jobs", key).error_code(),
              grpc::StatusCode::ALREADY_EXISTS)
        << key;
  }
}

// One poll lets go of every ended entry, a few thousand at a time (each
// round holds the partition's mutex only that long): 12,000 ended entries
// of one partition are gone within 4.5 s with a 3 s poll, which a purge of
// 4,096 per poll would take three polls (6 s or more) to do.
TEST_P(DedupWindow, OnePollLetsGoOfEveryEndedEntry) {
  DelaydServer::Options o = Options(1'000'000, /*partitions=*/1);
  o.scheduler.clock_poll = 3s;
  TestDaemon d(o);
  SetWindow(d, "jobs", 60'000);
  constexpr int kKeys = 12'000;
  for (int from = 0; from < kKeys; from += 500) {
    v1::BatchRequest req;
    for (int i = from; i < from + 500; ++i) {
      v1::SetTimerRequest* set = req.add_operations()->mutable_set();
      set->set_namespace_("jobs");
      set->set_key("k" + std::to_string(i));
      *set->mutable_delay() = Millis(3'600'000);
      v1::RemoveTimerRequest* remove = req.add_operations()->mutable_remove();
      remove->set_namespace_("jobs");
      remove->set_key("k" + std::to_string(i));
    }
    v1::BatchResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Batch(&ctx, req, &resp).ok());
    for (const v1::BatchResult& r : resp.results()) ASSERT_EQ(r.code(), 0);
  }
  ASSERT_TRUE(WaitEntries(d, kKeys));
  clock_.Advance(61s);
  const auto deadline = std::chrono::steady_clock::now() + 4500ms;
  const DedupWindows& w = d.server().scheduler().dedup_windows();
  while (w.entries.load() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);  // (Polling the gauge, bounded.)
  }
  EXPECT_EQ(w.entries.load(), 0u);
}

// A namespace whose timers are all gone lives on while its keys are
// remembered, whichever namespaces around it were emptied and freed: each
// entry is read back under its own namespace after restarts.
TEST_P(DedupWindow, EntriesKeepTheirNamespaceWhenOthersAreFreed) {
  {
    TestDaemon d(Options());
    for (const char* ns : {"a", "b", "c"}) {
      ASSERT_TRUE(Set(d.stub(), ns, "t", 3'600'000).ok());
    }
    SetWindow(d, "b", 60'000);
    ASSERT_TRUE(Remove(d, "a", "t").ok());  // Freed: no window.
    ASSERT_TRUE(Remove(d, "b", "t").ok());  // Only its entry is left.
    d.Shutdown();
  }
  for (int restart = 0; restart < 2; ++restart) {
    TestDaemon d(Options());
    EXPECT_EQ(CreateOnly(d, "b", "t").error_code(),
              grpc::StatusCode::ALREADY_EXISTS);
    // (A key of the same name in the namespaces around it is its own.)
    if (restart == 0) {
      EXPECT_EQ(Get(d.stub(), "c", "t").error_code(), grpc::StatusCode::OK);
    }
    d.Shutdown();
  }
  TestDaemon d(Options());
  EXPECT_TRUE(CreateOnly(d, "a", "t").ok());
  EXPECT_EQ(CreateOnly(d, "c", "t").error_code(),
            grpc::StatusCode::ALREADY_EXISTS);  // Pending.
  EXPECT_EQ(CreateOnly(d, "b", "t").error_code(),
            grpc::StatusCode::ALREADY_EXISTS);  // Remembered.
}

// An event acknowledged later than it fired: the window counts again from
// the acknowledgement, and holds until then however long that takes.
TEST_P(DedupWindow, TheWindowCountsFromTheAcknowledgement) {
  TestDaemon d(Options());
  SetWindow(d, "jobs", 60'000);
  TestStream worker(d.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(worker.WaitRegistered());
  ASSERT_TRUE(Set(d.stub(), "jobs", "slow", 0).ok());
  const auto got = worker.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  clock_.Advance(50s);
  grpc::Status s = CreateOnly(d, "jobs", "slow");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(s.error_message().find("'slow' fired at"), std::string::npos)
      << s.error_message();
  ASSERT_TRUE(AckEvents(d.stub(), "jobs", got).ok());
  clock_.Advance(59s);  // 109 s after the fire, 59 s after the ack.
  s = CreateOnly(d, "jobs", "slow");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(s.error_message().find("fired and was acknowledged"),
            std::string::npos)
      << s.error_message();
  clock_.Advance(1s);
  EXPECT_TRUE(CreateOnly(d, "jobs", "slow").ok());
}

INSTANTIATE_TEST_SUITE_P(Stores, DedupWindow, AllBackends(), BackendName);

}  // namespace
}  // namespace delayd::testing
