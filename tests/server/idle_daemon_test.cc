// An idle durable daemon wakes one thread every few seconds for all of its
// periodic checks (the clock's net, the store's stall watch, the
// redelivery report: Scheduler::housekeeping(), one grid: core/clock.h's
// NextTick), not once for each, and its pool not at all.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/store/rocksdb/rocks_store.h"
#include "tests/common/temp_dir.h"
#include "tests/common/thread_names.h"
#include "tests/server/calls.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

using std::chrono_literals::operator""s;

TEST(IdleDaemon, ItsChecksWakeOneThreadEveryFewSecondsAndThePoolSleeps) {
  TempDir dir;
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  RocksOptions store;
  store.dir = dir / "data";
  o.scheduler.store = RocksStoreOpener(store);  // --fsync always.
  // As the daemon's defaults: the stall watch checks an idle store every
  // 2.5 s (a quarter of the limit), and the clock's net is 10 s.
  o.store_stall_limit = std::chrono::seconds(10);
  o.scheduler.clock_poll = std::chrono::seconds(10);
  TestDaemon d(o);
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(Set(d.stub(), "a", "k", 3'600'000).ok());
  // What is measured is time passing with nothing to do: the test lets
  // five seconds pass.
  const long pool = WakeUpsOf("delayd-pool");
  const long clock = WakeUpsOf("delayd-clock");
  ASSERT_GE(clock, 0) << "no delayd-clock thread";
  std::this_thread::sleep_for(5s);
  const long checks = WakeUpsOf("delayd-clock") - clock;
  // Two ticks of 2.5 s, and a spare; the store watched once a second
  // would be five.
  EXPECT_LE(checks, 3) << "the checks woke " << checks
                       << " times in 5 s with nothing to do";
  EXPECT_GE(checks, 1) << "the store watch stopped";
  EXPECT_LE(WakeUpsOf("delayd-pool") - pool, 1) << "an idle daemon's pool woke";
}

}  // namespace
}  // namespace delayd::testing
