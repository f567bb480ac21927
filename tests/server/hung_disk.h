// Helpers of the tests of a disk that hangs: what health says meanwhile
// (hung_disk_health_test.cc) and what the service still does
// (hung_disk_service_test.cc). A daemon on a file system whose log writes
// and syncs hold on command (tests/common/power_loss_fs.h), or whose
// payload reads pass a gate.
#ifndef DELAYD_TESTS_SERVER_HUNG_DISK_H_
#define DELAYD_TESTS_SERVER_HUNG_DISK_H_

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/power_loss_fs.h"
#include "tests/common/temp_dir.h"
#include "tests/server/calls.h"
#include "tests/server/test_client.h"

namespace delayd::testing {

// How a test changes a daemon's options and its store's.
using Adjust = std::function<void(DelaydServer::Options&, RocksOptions&)>;

// A daemon's options with a store in `dir` on `env` (null: the default),
// changed by `adjust` (if any).
inline DelaydServer::Options OnFs(const std::string& dir, rocksdb::Env* env,
                                  const Adjust& adjust = nullptr) {
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  RocksOptions store;
  store.dir = dir;
  store.env = env;
  if (adjust) adjust(o, store);
  o.scheduler.store = RocksStoreOpener(store);
  return o;
}

// Releases the log and joins the threads however a test ends (a thread
// left joinable would abort the test binary).
struct Release {
  PowerLossFs* fs;
  std::vector<std::thread>& threads;
  ~Release() {
    fs->HoldLogWrites(false);
    for (auto& t : threads) {
      if (t.joinable()) t.join();
    }
  }
};

// A daemon on a file system whose log writes and syncs hold on command
// (`fs`), its options as OnFs gives them changed by `adjust` (if any).
struct HoldingDaemon {
  static DelaydServer::Options Options(const TempDir& dir, rocksdb::Env* env,
                                       const Adjust& adjust) {
    return OnFs(dir / "data", env, adjust);
  }
  explicit HoldingDaemon(const Adjust& adjust = nullptr)
      : fs(PowerLossFs::Make(&env)), daemon(Options(dir, env.get(), adjust)) {}

  TempDir dir;
  std::unique_ptr<rocksdb::Env> env;
  std::shared_ptr<PowerLossFs> fs;
  TestDaemon daemon;
};

// Payload reads that wait until released (RocksOptions::before_payload_read).
class ReadGate {
 public:
  void Hold() {
    std::lock_guard lock(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  int waiting() {
    std::lock_guard lock(mu_);
    return waiting_;
  }
  void Pass() {
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.wait(lock, [&] { return !held_; });
    --waiting_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  int waiting_ = 0;
};

// A daemon whose payload reads pass `gate`, but for those that need no disk
// (Store::ReadCached) if `cached_reads`. The gate opens before the daemon
// stops (a read held forever would keep it from stopping).
struct GatedDaemon {
  static DelaydServer::Options Options(const TempDir& dir, ReadGate& gate,
                                       bool cached_reads,
                                       const Adjust& adjust) {
    return OnFs(dir / "data", nullptr,
                [&](DelaydServer::Options& o, RocksOptions& store) {
                  store.before_payload_read = [&gate] { gate.Pass(); };
                  store.cached_reads = cached_reads;
                  if (adjust) adjust(o, store);
                });
  }
  explicit GatedDaemon(bool cached_reads = false,
                       const Adjust& adjust = nullptr)
      : daemon(Options(dir, gate, cached_reads, adjust)) {}
  ~GatedDaemon() { gate.Release(); }

  TempDir dir;
  ReadGate gate;
  TestDaemon daemon;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_SERVER_HUNG_DISK_H_
