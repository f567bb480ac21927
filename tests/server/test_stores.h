// The stores durability tests run over, as a test parameter: RocksDB in a
// temporary directory, and PostgreSQL on a server this test process starts
// on first use (tests/common/postgres_server.h; each TestStore gets a
// database of its own). A TestStore outlives the daemons a test starts on
// it, so stopping one and starting another is a restart.
#ifndef DELAYD_TESTS_SERVER_TEST_STORES_H_
#define DELAYD_TESTS_SERVER_TEST_STORES_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "server/api/server.h"
#include "server/store/postgres/pg_store.h"
#include "server/store/rocksdb/rocks_store.h"
#include "tests/common/postgres_server.h"
#include "tests/common/temp_dir.h"

namespace delayd::testing {

enum class Backend { kRocksDb, kPostgres };

inline std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kRocksDb ? "RocksDB" : "PostgreSQL";
}

inline const auto& AllBackends() {
  static const auto values =
      ::testing::Values(Backend::kRocksDb, Backend::kPostgres);
  return values;
}

// The PostgreSQL server of this test process, started on first use and
// stopped when the process exits. Fails the test if it cannot start.
inline PostgresServer* SharedPostgres() {
  static std::unique_ptr<PostgresServer> server = [] {
    std::string error;
    auto s = PostgresServer::Start(&error);
    if (!s) ADD_FAILURE() << "PostgreSQL: " << error;
    return s;
  }();
  return server.get();
}

class TestStore {
 public:
  explicit TestStore(Backend backend, std::string fsync = "always")
      : backend_(backend), fsync_(std::move(fsync)) {
    if (backend_ == Backend::kPostgres) {
      if (PostgresServer* pg = SharedPostgres()) {
        url_ = pg->Url(pg->NewDatabase());
      }
    }
  }

  Backend backend() const { return backend_; }
  const std::string& url() const { return url_; }
  const TempDir& dir() const { return dir_; }

  // Opens this store (a new store object on the same data each time).
  StoreOpener Opener() const {
    if (backend_ == Backend::kPostgres) return PgStoreOpener(Postgres());
    RocksOptions o;
    o.dir = dir_ / "data";
    EXPECT_TRUE(ParseFsyncPolicy(fsync_, &o).ok());
    return RocksStoreOpener(o);
  }
  PgOptions Postgres() const {
    PgOptions o;
    o.conninfo = url_;
    o.node = "test";
    o.reconnect_first = std::chrono::milliseconds(20);
    o.reconnect_last = std::chrono::milliseconds(200);
    o.lock_wait = std::chrono::milliseconds(1500);
    return o;
  }
  // `o` on this store.
  DelaydServer::Options On(DelaydServer::Options o) const {
    o.scheduler.store = Opener();
    return o;
  }

 private:
  Backend backend_;
  std::string fsync_;
  TempDir dir_;
  std::string url_;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_SERVER_TEST_STORES_H_
