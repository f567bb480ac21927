// --fsync-gather (RocksOptions::sync_gather), under --fsync always: once a
// write someone waits for came while a sync ran, the next sync starts no
// sooner than the gather after that one ended; a caller that waits for
// each answer is never held by it. The gather here is seconds long, so
// that a hold is told from a slow machine's answer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/hung_disk.h"

namespace delayd::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kGather = 5s;

// A daemon whose store gathers syncs, and counts the writes that join
// those waiting for a sync.
struct GatherDaemon {
  std::atomic<int> waiting{0};
  HoldingDaemon held{[this](DelaydServer::Options&, RocksOptions& store) {
    store.sync_gather = kGather;
    store.on_waiting_sync = [this] { ++waiting; };
  }};
};

// Sets `key`, far ahead, and says when it was answered (OK).
Clock::time_point SetAndTime(TestDaemon& d, const std::string& key) {
  EXPECT_TRUE(Set(d.stub(), "", key, 3'600'000).ok()) << key;
  return Clock::now();
}

TEST(FsyncGather, AWriteThatCameDuringASyncWaitsOutTheGather) {
  GatherDaemon g;
  TestDaemon& d = g.held.daemon;
  ASSERT_TRUE(d.started());
  // Each key's partition has reserved its versions: the sets below write
  // nothing else.
  SetAndTime(d, "a");
  SetAndTime(d, "b");
  PowerLossFs& fs = *g.held.fs;
  fs.HoldSyncs(true);
  std::atomic<Clock::rep> answered_a{0}, answered_b{0};
  std::vector<std::thread> threads;
  struct Unhold {
    PowerLossFs& fs;
    std::vector<std::thread>& threads;
    ~Unhold() {
      fs.HoldSyncs(false);
      for (auto& t : threads) t.join();
    }
  } unhold{fs, threads};
  const int before = g.waiting.load();
  threads.emplace_back(
      [&] { answered_a = SetAndTime(d, "a").time_since_epoch().count(); });
  // a's sync holds. (The log's: the store's mark is synced now and then
  // too, and is held as well. Only the syncer syncs the log here: no
  // memtable is switched by these few writes.)
  ASSERT_TRUE(Eventually([&] { return fs.held_log_syncs() == 1; }));
  threads.emplace_back(
      [&] { answered_b = SetAndTime(d, "b").time_since_epoch().count(); });
  // b's write is in the log, waiting for the sync after a's.
  ASSERT_TRUE(Eventually([&] { return g.waiting.load() == before + 2; }));
  fs.HoldSyncs(false);
  for (auto& t : threads) t.join();
  threads.clear();
  const auto held_for = Clock::duration(answered_b - answered_a);
  EXPECT_GE(held_for, kGather / 2)
      << "b, written while a's sync ran, was synced without a gather";
}

TEST(FsyncGather, ACallerThatWaitsForEachAnswerIsNotHeld) {
  GatherDaemon g;
  TestDaemon& d = g.held.daemon;
  ASSERT_TRUE(d.started());
  // (The first may follow the daemon's own writes, which can come while a
  // sync runs.)
  auto last = SetAndTime(d, "k0");
  for (int i = 1; i <= 4; ++i) {
    const auto now = SetAndTime(d, "k" + std::to_string(i));
    EXPECT_LT(now - last, kGather / 2) << "set " << i << " was held";
    last = now;
  }
}

}  // namespace
}  // namespace delayd::testing
