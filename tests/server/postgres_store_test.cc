// What only the PostgreSQL store does, against real PostgreSQL servers the
// tests start: its schema (created, migrated once, a newer one refused, a
// firing written as a heap-only update), one delayd per database, a commit
// whose answer was lost (resolved, never written twice nor lost), the
// database stopped and started under load, and a fail-over to a synchronous
// standby.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <asio.hpp>
#include <atomic>
#include <future>
#include <map>
#include <thread>

#include "server/store/postgres/pg_store.h"
#include "tests/server/calls.h"
#include "tests/server/test_stores.h"

namespace delayd::testing {
namespace {

using grpc::health::v1::HealthCheckResponse;

DelaydServer::Options OnPostgres(PgOptions pg) {
  DelaydServer::Options o = TestDaemon::DefaultOptions();
  o.scheduler.store = PgStoreOpener(std::move(pg));
  return o;
}

PgOptions Database(const std::string& url) {
  PgOptions o;
  o.conninfo = url;
  o.node = "test";
  o.reconnect_first = std::chrono::milliseconds(20);
  o.reconnect_last = std::chrono::milliseconds(200);
  return o;
}

TEST(PostgresSchema, IsCreatedOnceAndMigrateIsIdempotent) {
  PostgresServer* pg = SharedPostgres();
  ASSERT_NE(pg, nullptr);
  PgOptions o = Database(pg->Url(pg->NewDatabase()));
  o.partitions = 16;
  std::string report;
  ASSERT_TRUE(MigratePostgres(o, &report).ok()) << report;
  EXPECT_NE(report.find("migrated"), std::string::npos) << report;
  EXPECT_NE(report.find("16 partitions"), std::string::npos) << report;
  ASSERT_TRUE(MigratePostgres(o, &report).ok());
  EXPECT_NE(report.find("already up to date"), std::string::npos) << report;
  // A daemon opens it as it is.
  TestDaemon d(OnPostgres(o));
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(Set(d.stub(), "", "k", 3'600'000).ok());
}

TEST(PostgresSchema, ANewerSchemaIsRefusedClearly) {
  PostgresServer* pg = SharedPostgres();
  ASSERT_NE(pg, nullptr);
  const std::string db = pg->NewDatabase();
  std::string report;
  ASSERT_TRUE(MigratePostgres(Database(pg->Url(db)), &report).ok());
  pg->Exec(db, "UPDATE delayd_schema SET version = 99");
  DelaydServer server(OnPostgres(Database(pg->Url(db))));
  const Status s = server.Start();
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.message();
  EXPECT_NE(s.message().find("version 99, newer"), std::string::npos)
      << s.message();
  EXPECT_EQ(pg->Exec(db, "SELECT version FROM delayd_schema"), "99");
}

TEST(PostgresStore, ASecondDaemonOnTheSameDatabaseIsRefused) {
  TestStore store(Backend::kPostgres);
  TestDaemon first(store.On(TestDaemon::DefaultOptions()));
  ASSERT_TRUE(first.started());
  DelaydServer second(store.On(TestDaemon::DefaultOptions()));
  const Status s = second.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("used by another delayd"), std::string::npos)
      << s.message();
}

TEST(PostgresStore, BackupAndCheckNameThePostgresWay) {
  TestStore store(Backend::kPostgres);
  DelaydServer::Options o = store.On(TestDaemon::DefaultOptions());
  o.backup_dir = store.dir() / "backups";
  TestDaemon d(o);
  v1::BackupRequest req;
  req.set_dir("b1");
  v1::BackupResponse resp;
  const grpc::Status s = d.stub().Backup(Within().get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("pg_dump"), std::string::npos)
      << s.error_message();
}

// WriteNow from a thread of the executor's own pool (a cluster node loads a
// partition on one) returns: its answer does not wait for that pool.
TEST(PostgresStore, WriteNowOnTheExecutorsOnlyThreadReturns) {
  PostgresServer* pg = SharedPostgres();
  ASSERT_NE(pg, nullptr);
  std::unique_ptr<Store> store;
  ASSERT_TRUE(
      PgStoreOpener(Database(pg->Url(pg->NewDatabase())))(StoreHooks(), &store)
          .ok());
  asio::io_context pool;
  auto work = asio::make_work_guard(pool);
  std::thread thread([&] { pool.run(); });
  store->SetExecutor(
      [&](std::function<void()> run) { asio::post(pool, std::move(run)); });
  std::promise<Status> written;
  asio::post(pool, [&] {
    Batch batch;
    batch.Touch(0);
    written.set_value(store->WriteNow(batch));
  });
  auto result = written.get_future();
  const bool returned = result.wait_for(10s) == std::future_status::ready;
  if (!returned) {
    ADD_FAILURE() << "WriteNow waits for the pool it runs on";
    // (Left as they are: the pool's thread waits in the store for good.)
    thread.detach();
    store.release();
    return;
  }
  EXPECT_TRUE(result.get().ok());
  store->Close();
  work.reset();
  pool.stop();
  thread.join();
}

// How many rows of delayd_jobs have key `key`.
std::string Rows(PostgresServer* pg, const std::string& db,
                 const std::string& key) {
  return pg->Exec(
      db, "SELECT count(*) FROM delayd_jobs WHERE key = '" + key + "'::bytea");
}

// Polls `sql` on `db` until it gives `want` (up to 10 s).
bool WaitFor(PostgresServer* pg, const std::string& db, const std::string& sql,
             const std::string& want) {
  return Eventually([&] { return pg->Exec(db, sql) == want; });
}

// A firing changes no indexed column and finds room on its row's page, so
// PostgreSQL writes every one as a heap-only update (no index entry).
TEST(PostgresSchema, AFiringIsAHeapOnlyUpdate) {
  PostgresServer* pg = SharedPostgres();
  ASSERT_NE(pg, nullptr);
  const std::string db = pg->NewDatabase();
  TestDaemon d(OnPostgres(Database(pg->Url(db))));
  ASSERT_TRUE(d.started());
  EXPECT_EQ(pg->Exec(db,
                     "SELECT string_agg(indexname, ',' ORDER BY indexname) "
                     "FROM pg_indexes WHERE tablename = 'delayd_jobs'"),
            "delayd_jobs_part,delayd_jobs_pkey");
  constexpr int kTimers = 200;
  // (100-byte payloads: the smallest rows, fired in one transaction, do not
  // all find room; pg_schema.cc says so.)
  for (int i = 0; i < kTimers; ++i) {
    ASSERT_TRUE(
        Set(d.stub(), "", "k" + std::to_string(i), 300, std::string(100, 'x'))
            .ok());
  }
  // (No worker: the events stay.)
  ASSERT_TRUE(WaitFor(pg, db,
                      "SELECT count(*) FROM delayd_jobs WHERE event_id IS "
                      "NOT NULL",
                      std::to_string(kTimers)));
  const std::string stats =
      "SELECT n_tup_upd || '/' || n_tup_hot_upd FROM pg_stat_user_tables "
      "WHERE relname = 'delayd_jobs'";
  // (The writer's backend reports its counts within about a second.)
  EXPECT_TRUE(Eventually(
      [&] {
        return pg->Exec(db, stats).starts_with(std::to_string(kTimers) + "/");
      },
      30s))
      << pg->Exec(db, stats);
  EXPECT_EQ(pg->Exec(db, stats),
            std::to_string(kTimers) + "/" + std::to_string(kTimers));
}

// The connection is lost once the group's transaction has committed on the
// server, before its answer is read: the writer cannot know, asks the
// database once connected again, finds its group there, and answers OK
// without writing it again (a second INSERT of the row would fail).
TEST(PostgresCommit, ACommitWhoseAnswerWasLostIsNotWrittenTwice) {
  PostgresServer* pg = SharedPostgres();
  ASSERT_NE(pg, nullptr);
  const std::string db = pg->NewDatabase();
  PgOptions o = Database(pg->Url(db));
  std::atomic<bool> armed{false};
  o.after_group_sent = [&](PGconn* conn) {
    if (!armed.exchange(false)) return;
    // Once the server has committed it (its row is visible), cut.
    EXPECT_TRUE(WaitFor(pg, db,
                        "SELECT count(*) FROM delayd_jobs WHERE key = "
                        "'lost'::bytea",
                        "1"));
    shutdown(PQsocket(conn), SHUT_RDWR);
  };
  TestDaemon d(OnPostgres(o));
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(Set(d.stub(), "", "before", 3'600'000).ok());
  armed = true;
  v1::SetTimerResponse set;
  EXPECT_TRUE(Set(d.stub(), "", "lost", 3'600'000, "p", &set).ok());
  EXPECT_FALSE(armed.load()) << "the hook did not run";
  EXPECT_EQ(Rows(pg, db, "lost"), "1");
  // The store goes on writing (a duplicate would have failed it).
  ASSERT_TRUE(Set(d.stub(), "", "after", 3'600'000).ok());
  d.Shutdown();
  TestDaemon again(OnPostgres(Database(pg->Url(db))));
  v1::Timer t;
  ASSERT_TRUE(Get(again.stub(), "", "lost", &t).ok());
  EXPECT_EQ(t.version(), set.version());
  EXPECT_EQ(again.server().recovery().timers, 3u);
}

// The writer's backend is ended while its transaction waits (on a lock
// this test holds), before it commits: once connected again the writer
// finds its group absent, writes it again, and answers OK; it is there
// once.
TEST(PostgresCommit, ATransactionCutBeforeItCommittedIsWrittenAgain) {
  PostgresServer* pg = SharedPostgres();
  ASSERT_NE(pg, nullptr);
  const std::string db = pg->NewDatabase();
  PgOptions o = Database(pg->Url(db));
  std::atomic<bool> armed{false};
  PGconn* holder = nullptr;  // Holds the commit record's row lock.
  o.after_group_sent = [&](PGconn*) {
    if (!armed.exchange(false)) return;
    // The writer now waits for the row this test locked: end its backend.
    EXPECT_TRUE(Eventually([&] {
      return pg->Exec(db,
                      "SELECT pg_terminate_backend(pid) FROM "
                      "pg_stat_activity WHERE application_name = 'delayd' "
                      "AND wait_event_type = 'Lock'") == "t";
    }));
    PQclear(PQexec(holder, "ROLLBACK"));
  };
  TestDaemon d(OnPostgres(o));
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(Set(d.stub(), "", "before", 3'600'000).ok());
  holder = PQconnectdb(pg->Url(db).c_str());
  ASSERT_EQ(PQstatus(holder), CONNECTION_OK);
  PQclear(PQexec(holder, "BEGIN"));
  PQclear(PQexec(
      holder, "SELECT * FROM delayd_commits WHERE node = 'test' FOR UPDATE"));
  armed = true;
  v1::SetTimerResponse set;
  EXPECT_TRUE(Set(d.stub(), "", "retried", 3'600'000, "p", &set).ok());
  EXPECT_FALSE(armed.load()) << "the hook did not run";
  PQfinish(holder);
  EXPECT_EQ(Rows(pg, db, "retried"), "1");
  v1::Timer t;
  ASSERT_TRUE(Get(d.stub(), "", "retried", &t).ok());
  EXPECT_EQ(t.version(), set.version());
  ASSERT_TRUE(Set(d.stub(), "", "after", 3'600'000).ok());
}

// A group with a firing in it is sent without waiting for the answers of
// those before it. A move held on a row lock, with a second group (a timer
// due at once, and its firing) sent behind it, then the move's statement
// cancelled: the server skips the second group too (no sync point lies
// between them), and the writer sends both again, in order. Had the second
// committed alone, the writer would have taken the move for committed too
// (it reads back the last group id) and lost it; had it been written twice,
// the store would have failed on a duplicate row.
TEST(PostgresCommit, GroupsSentBehindAFailedOneAreWrittenAgainInOrder) {
  PostgresServer* pg = SharedPostgres();
  ASSERT_NE(pg, nullptr);
  const std::string db = pg->NewDatabase();
  PgOptions o = Database(pg->Url(db));
  std::atomic<int> sent{0};
  o.after_group_sent = [&](PGconn*) { ++sent; };
  TestDaemon d(OnPostgres(o));
  ASSERT_TRUE(d.started());
  ASSERT_TRUE(Set(d.stub(), "", "m", 3'600'000).ok());
  PGconn* holder = PQconnectdb(pg->Url(db).c_str());
  ASSERT_EQ(PQstatus(holder), CONNECTION_OK);
  PQclear(PQexec(holder, "BEGIN"));
  PQclear(PQexec(
      holder, "SELECT * FROM delayd_jobs WHERE key = 'm'::bytea FOR UPDATE"));
  const int base = sent.load();
  v1::MoveTimerResponse moved;
  v1::SetTimerResponse set;
  grpc::Status move_status, set_status;
  std::thread first([&] {
    v1::MoveTimerRequest req;
    req.set_key("m");
    *req.mutable_delay() = Millis(7'200'000);
    move_status = d.stub().MoveTimer(Within().get(), req, &moved);
  });
  EXPECT_TRUE(Eventually([&] { return sent.load() == base + 1; }));
  std::thread second(
      [&] { set_status = Set(d.stub(), "", "b", 0, "two", &set); });
  EXPECT_TRUE(Eventually([&] { return sent.load() == base + 2; }))
      << "the second group was not sent while the first awaited its answer";
  EXPECT_TRUE(Eventually([&] {
    return pg->Exec(db,
                    "SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = 'delayd' AND wait_event_type = "
                    "'Lock'") == "t";
  }));
  PQclear(PQexec(holder, "ROLLBACK"));
  PQfinish(holder);
  first.join();
  second.join();
  EXPECT_TRUE(move_status.ok()) << move_status.error_message();
  EXPECT_TRUE(set_status.ok()) << set_status.error_message();
  EXPECT_EQ(pg->Exec(db,
                     "SELECT count(*) FROM delayd_jobs WHERE key = 'b'::bytea "
                     "AND event_id IS NOT NULL"),
            "1")
      << "b was not written as fired, once";
  ASSERT_TRUE(Set(d.stub(), "", "after", 3'600'000).ok());
  d.Shutdown();
  TestDaemon again(OnPostgres(Database(pg->Url(db))));
  v1::Timer t;
  ASSERT_TRUE(Get(again.stub(), "", "m", &t).ok());
  EXPECT_EQ(t.version(), moved.version()) << "the move was lost";
  EXPECT_EQ(again.server().recovery().timers, 2u);
  EXPECT_EQ(again.server().recovery().events, 1u);
}

// Sets timers in a loop on its own thread, recording each one answered OK
// (with its version) and counting the refusals.
class Writer {
 public:
  explicit Writer(v1::Delayd::Stub& stub) : stub_(stub) {
    thread_ = std::thread([this] {
      for (int i = 0; !stop_; ++i) {
        const std::string key = "w" + std::to_string(i);
        v1::SetTimerResponse resp;
        const grpc::Status s = Set(stub_, "", key, 3'600'000, "p", &resp);
        {
          std::lock_guard lock(mu_);
          if (s.ok()) {
            acked_[key] = resp.version();
            continue;
          }
          ++refused_;
        }
        // Paces the retries while the database is away (load, not a wait
        // for a condition).
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  ~Writer() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::map<std::string, std::uint64_t> acked() {
    std::lock_guard lock(mu_);
    return acked_;
  }
  int refused() {
    std::lock_guard lock(mu_);
    return refused_;
  }
  std::size_t size() {
    std::lock_guard lock(mu_);
    return acked_.size();
  }

 private:
  v1::Delayd::Stub& stub_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, std::uint64_t> acked_;
  int refused_ = 0;
  std::thread thread_;
};

// Every timer in `acked` is pending with its acknowledged version.
void ExpectAll(v1::Delayd::Stub& stub,
               const std::map<std::string, std::uint64_t>& acked) {
  std::size_t missing = 0;
  for (const auto& [key, version] : acked) {
    v1::Timer t;
    const grpc::Status s = Get(stub, "", key, &t);
    if (!s.ok() || t.version() != version) {
      ++missing;
      ADD_FAILURE() << key << ": " << s.error_message() << " version "
                    << t.version() << ", acknowledged " << version;
    }
  }
  EXPECT_EQ(missing, 0u) << "of " << acked.size() << " acknowledged";
}

// PostgreSQL stopped under load: health NOT_SERVING, and writes and reads
// that need the database refused (UNAVAILABLE, not INTERNAL: nothing is
// damaged) meanwhile; started again, delayd reconnects by itself and
// serves, and every write answered OK is there, after a restart too.
TEST(PostgresOutage, StoppedAndStartedUnderLoadLosesNothing) {
  std::string error;
  auto pg = PostgresServer::Start(&error);
  ASSERT_NE(pg, nullptr) << error;
  const std::string db = pg->NewDatabase();
  std::map<std::string, std::uint64_t> acked;
  {
    TestDaemon d(OnPostgres(Database(pg->Url(db))));
    ASSERT_TRUE(d.started());
    Writer writer(d.stub());
    ASSERT_TRUE(Eventually([&] { return writer.size() >= 50; }));
    pg->Stop(SIGINT);
    ASSERT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::NOT_SERVING));
    // (The writer's own call that was queued when the database went waits
    // for it; a new one is refused at once.)
    v1::SetTimerResponse resp;
    EXPECT_EQ(
        Set(d.stub(), "", "while-down", 3'600'000, "p", &resp).error_code(),
        grpc::StatusCode::UNAVAILABLE);
    // A timer's payload is read from the database.
    const auto some = writer.acked();
    ASSERT_FALSE(some.empty());
    v1::Timer t;
    const grpc::Status read = Get(d.stub(), "", some.begin()->first, &t);
    EXPECT_EQ(read.error_code(), grpc::StatusCode::UNAVAILABLE)
        << read.error_message();
    {
      grpc::ClientContext ctx;
      v1::ListTimersRequest list;
      v1::ListTimersResponse page;
      const grpc::Status listed = d.stub().ListTimers(&ctx, list, &page);
      EXPECT_EQ(listed.error_code(), grpc::StatusCode::UNAVAILABLE)
          << listed.error_message();
    }
    ASSERT_TRUE(pg->Restart(&error)) << error;
    ASSERT_TRUE(WaitForHealth(d.channel(), HealthCheckResponse::SERVING));
    const std::size_t before = writer.size();
    ASSERT_TRUE(Eventually([&] { return writer.size() > before + 20; }));
    writer.Stop();
    acked = writer.acked();
    ExpectAll(d.stub(), acked);
    d.Shutdown();
  }
  TestDaemon d(OnPostgres(Database(pg->Url(db))));
  ASSERT_TRUE(d.started());
  EXPECT_EQ(d.server().recovery().timers, acked.size());
  ExpectAll(d.stub(), acked);
}

// A primary with a synchronous standby, killed (-9) under load; the
// standby is promoted. delayd, given both hosts, finds the new primary by
// itself and writes again without a restart, and every write answered OK
// is there.
TEST(PostgresFailOver, KillingThePrimaryLosesNothingAcknowledged) {
  std::string error;
  auto primary = PostgresServer::Start(&error);
  ASSERT_NE(primary, nullptr) << error;
  const std::string db = primary->NewDatabase();
  auto standby = primary->StartStandby("s1", &error);
  ASSERT_NE(standby, nullptr) << error;
  const std::string url =
      "postgresql://delayd@127.0.0.1:" + std::to_string(primary->port()) +
      ",127.0.0.1:" + std::to_string(standby->port()) + "/" + db +
      "?target_session_attrs=read-write";
  std::map<std::string, std::uint64_t> acked;
  {
    TestDaemon d(OnPostgres(Database(url)));
    ASSERT_TRUE(d.started());
    Writer writer(d.stub());
    ASSERT_TRUE(Eventually([&] { return writer.size() >= 100; }));
    primary->Stop(SIGKILL);
    ASSERT_TRUE(standby->Promote());
    const std::size_t at_kill = writer.size();
    ASSERT_TRUE(Eventually([&] { return writer.size() > at_kill + 50; }, 30s))
        << "no write succeeded on the new primary";
    writer.Stop();
    acked = writer.acked();
    ExpectAll(d.stub(), acked);
    d.Shutdown();
  }
  // From the new primary alone.
  TestDaemon d(OnPostgres(Database(standby->Url(db))));
  ASSERT_TRUE(d.started());
  EXPECT_EQ(d.server().recovery().timers, acked.size());
  ExpectAll(d.stub(), acked);
}

}  // namespace
}  // namespace delayd::testing
