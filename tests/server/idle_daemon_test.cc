// An idle durable daemon wakes one thread once a second for all of its
// periodic checks (the clock poll, the store's stall watch, the redelivery
// report: Scheduler::housekeeping(), one grid: core/clock.h's NextTick),
// not once for each, and its pool not at all.
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

TEST(IdleDaemon, ItsChecksWakeOneThreadOnceASecondAndThePoolSleeps) {
  TempDir dir;
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  RocksOptions store;
  store.dir = dir / "data";
  o.scheduler.store = RocksStoreOpener(store);  // --fsync always.
  // The stall watch checks once a second (a quarter of the limit, at most
  // 1 s), as the clock poll does.
  o.store_stall_limit = std::chrono::seconds(10);
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
  // Once a second, and a spare; a check each on its own tick is 10.
  EXPECT_LE(checks, 7) << "the checks woke " << checks
                       << " times in 5 s with nothing to do";
  EXPECT_GE(checks, 4) << "the clock poll stopped";
  EXPECT_LE(WakeUpsOf("delayd-pool") - pool, 1) << "an idle daemon's pool woke";
}

}  // namespace
}  // namespace delayd::testing
