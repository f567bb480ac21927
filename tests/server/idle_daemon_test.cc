// An idle durable daemon wakes its pool once for all of its periodic checks
// (the clock poll, the store's stall watch, the redelivery report: one
// strand, one grid; core/clock.h's NextTick), not once for each.
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

TEST(IdleDaemon, ItsPoolWakesOnceASecondForAllItsChecks) {
  TempDir dir;
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  o.scheduler.threads = 1;  // Each wake-up of the pool is then one count.
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
  const long before = WakeUpsOf("delayd-pool");
  std::this_thread::sleep_for(5s);
  const long woke = WakeUpsOf("delayd-pool") - before;
  // Once a second, and a spare; a check each on its own tick is 10.
  EXPECT_LE(woke, 7) << "the pool woke " << woke
                     << " times in 5 s with nothing to do";
  EXPECT_GE(woke, 4) << "the clock poll stopped";
}

}  // namespace
}  // namespace delayd::testing
