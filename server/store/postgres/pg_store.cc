// PgStore: opening (connections, the schema, the database taken for this
// daemon), recovery scans, and what is neither a write nor a read.
#include "server/store/postgres/pg_store.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "server/common/stable_hash.h"
#include "server/common/thread_name.h"

namespace delayd {
namespace {

// The session advisory lock the writer holds: one delayd per database.
constexpr const char* kWriterLock = "SELECT pg_advisory_lock(1684368481)";
constexpr const char* kWriterUnlock = "SELECT pg_advisory_unlock(1684368481)";

// The writer's statements, prepared on each of its connections.
struct Statement {
  const char* name;
  const char* sql;
};
constexpr Statement kStatements[] = {
    {"add",
     "INSERT INTO delayd_jobs (id, part, ns, key, fire_time, version, "
     "payload) SELECT * FROM unnest($1::int8[], $2::int2[], $3::text[], "
     "$4::bytea[], $5::int8[], $6::int8[], $7::bytea[])"},
    {"move",
     "UPDATE delayd_jobs AS j SET fire_time = u.f, version = u.v FROM "
     "unnest($1::int8[], $2::int8[], $3::int8[]) AS u(id, f, v) WHERE "
     "j.id = u.id"},
    {"remove", "DELETE FROM delayd_jobs WHERE id = ANY($1::int8[])"},
    {"fire",
     "UPDATE delayd_jobs AS j SET event_id = u.e, fired_at = u.at, reason = "
     "u.r, fire_time = u.f, version = u.v FROM unnest($1::int8[], "
     "$2::int8[], $3::int8[], $4::int2[], $5::int8[], $6::int8[]) AS u(id, "
     "e, at, r, f, v) WHERE j.id = u.id"},
    // A fate finds its row by the row's key; no index holds event_id, so
    // that a firing changes no indexed column (pg_schema.h, "hot-fires").
    {"fate",
     "UPDATE delayd_jobs AS j SET attempts = u.a, dead = u.d, error = u.err, "
     "retry_at = u.rt FROM unnest($1::int8[], $2::int8[], $3::int4[], "
     "$4::bool[], $5::bytea[], $6::int8[]) AS u(id, e, a, d, err, rt) WHERE "
     "j.id = u.id AND j.event_id = u.e"},
    {"unfate",
     "UPDATE delayd_jobs AS j SET attempts = NULL, dead = NULL, error = "
     "NULL, retry_at = NULL FROM unnest($1::int8[], $2::int8[]) AS u(id, e) "
     "WHERE j.id = u.id AND j.event_id = u.e"},
    {"counters",
     "INSERT INTO delayd_counters (part, version_limit, event_limit) VALUES "
     "($1::int4, $2::int8, $3::int8) ON CONFLICT (part) DO UPDATE SET "
     "version_limit = GREATEST(delayd_counters.version_limit, "
     "EXCLUDED.version_limit), event_limit = "
     "GREATEST(delayd_counters.event_limit, EXCLUDED.event_limit)"},
    {"policy",
     "INSERT INTO delayd_policies (name, policy) VALUES ($1::text, "
     "$2::bytea) ON CONFLICT (name) DO UPDATE SET policy = EXCLUDED.policy"},
    {"unpolicy", "DELETE FROM delayd_policies WHERE name = $1::text"},
    // (Delivered on commit to the nodes of a cluster: pg_lease.h.)
    {"notify_policy", "SELECT pg_notify('delayd_policies', $1::text)"},
    {"schedule",
     "INSERT INTO delayd_schedules (part, ns, key, schedule) VALUES "
     "($1::int2, $2::text, $3::bytea, $4::bytea) ON CONFLICT (ns, key) DO "
     "UPDATE SET schedule = EXCLUDED.schedule"},
    {"unschedule",
     "DELETE FROM delayd_schedules WHERE ns = $1::text AND key = $2::bytea"},
    {"dedup",
     "INSERT INTO delayd_dedup (part, ns, key, fate) VALUES ($1::int2, "
     "$2::text, $3::bytea, $4::bytea) ON CONFLICT (ns, key) DO UPDATE SET "
     "fate = EXCLUDED.fate"},
    {"undedup",
     "DELETE FROM delayd_dedup WHERE ns = $1::text AND key = $2::bytea"},
    {"fence", pg::kFenceSql},
    {"mark",
     "INSERT INTO delayd_commits (node, group_id) VALUES ($1::text, "
     "$2::int8) ON CONFLICT (node) DO UPDATE SET group_id = "
     "EXCLUDED.group_id"},
};

std::string Where(PGconn* conn) {
  const char* host = PQhost(conn);
  const char* port = PQport(conn);
  const char* db = PQdb(conn);
  return std::string("PostgreSQL ") + (host ? host : "") + ":" +
         (port ? port : "") + "/" + (db ? db : "");
}

}  // namespace

StoreOpener PgStoreOpener(PgOptions options) {
  return [options = std::move(options)](StoreHooks hooks,
                                        std::unique_ptr<Store>* out) {
    std::unique_ptr<PgStore> store;
    Status s = PgStore::Open(options, std::move(hooks), &store);
    if (s.ok()) *out = std::move(store);
    return s;
  };
}

void WaitForPostgres(const PgOptions& options,
                     const std::function<void(const std::string&)>& note) {
  auto backoff = options.reconnect_first;
  std::string last;
  for (;;) {
    pg::Conn conn = pg::ConnectTo(options.conninfo);
    std::string why;
    if (PQstatus(conn.get()) != CONNECTION_OK) {
      why = "cannot connect to PostgreSQL: " + pg::ErrorOf(conn.get());
    } else {
      pg::Result r(PQexec(conn.get(), "SELECT pg_is_in_recovery()"));
      if (PQresultStatus(r.get()) == PGRES_TUPLES_OK &&
          std::string(PQgetvalue(r.get(), 0, 0)) == "f") {
        return;
      }
      why = Where(conn.get()) + " is a standby (read-only)";
    }
    if (why != last) note(why);
    last = why;
    std::this_thread::sleep_for(backoff);
    // Nothing is served yet: a try a second costs the database nothing,
    // and a database starting beside delayd is found within a second of
    // taking connections (the writer's reconnection backs off to 5 s).
    backoff = std::min(
        {backoff * 2, options.reconnect_last, std::chrono::milliseconds(1000)});
  }
}

Status MigratePostgres(const PgOptions& options, std::string* report) {
  pg::Conn conn = pg::ConnectTo(options.conninfo);
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    return Status::Unavailable("cannot connect to PostgreSQL: " +
                               pg::ErrorOf(conn.get()));
  }
  pg::Schema schema;
  bool applied = false;
  if (Status s = pg::Migrate(conn.get(), options.partitions, &schema, &applied);
      !s.ok()) {
    return s;
  }
  *report = Where(conn.get()) + ": delayd schema version " +
            std::to_string(schema.version) + " (" +
            std::to_string(schema.partitions) + " partitions), " +
            (applied ? "migrated" : "already up to date");
  return Status::Ok();
}

PgStore::PgStore(PgOptions options, StoreHooks hooks)
    : options_(std::move(options)),
      hooks_(std::move(hooks)),
      where_("PostgreSQL store"),
      wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

PgStore::~PgStore() {
  Close();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

std::vector<std::string> PgStore::DurabilityNotes(const std::string& where) {
  pg::Result r;
  Query(
      "SELECT current_setting('synchronous_commit'), "
      "current_setting('synchronous_standby_names')",
      0, &r);
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) return {};
  const std::string commit = PQgetvalue(r.get(), 0, 0);
  const std::string standbys = PQgetvalue(r.get(), 0, 1);
  if (commit == "off" || commit == "local") {
    return {where + ": synchronous_commit is '" + commit +
            "': acknowledged writes can be lost (" +
            (commit == "off" ? "even without losing a machine"
                             : "with the primary's machine") +
            "); see the README on PostgreSQL"};
  }
  if (standbys.empty()) {
    return {where +
            ": no synchronous standby (synchronous_standby_names is empty): "
            "losing the primary's machine can lose acknowledged writes"};
  }
  return {};
}

Status PgStore::Open(const PgOptions& options, StoreHooks hooks,
                     std::unique_ptr<PgStore>* out) {
  std::unique_ptr<PgStore> store(new PgStore(options, std::move(hooks)));
  if (store->wake_fd_ < 0) {
    return Status::Internal(std::string("eventfd: ") + std::strerror(errno));
  }
  std::string why;
  if (Status s = store->Connect(&store->writer_conn_, true, &why); !s.ok()) {
    return s;
  }
  store->where_ = Where(store->writer_conn_.get());
  store->notes_ = store->DurabilityNotes(store->where_);
  // Group ids: unique per daemon run, growing (the clock's nanoseconds at
  // start, then one by one), so a group never takes an earlier one's id.
  store->next_group_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  store->writer_ = std::thread([s = store.get()] { s->WriterLoop(); });
  NameThread(store->writer_, "pg-writer");
  *out = std::move(store);
  return Status::Ok();
}

Status PgStore::Connect(pg::Conn* out, bool writer, std::string* why) {
  pg::Conn conn = pg::ConnectTo(options_.conninfo);
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    *why = pg::ErrorOf(conn.get());
    return Status::Unavailable("cannot connect to PostgreSQL: " + *why);
  }
  // Generic plans: delayd's lookups of arrays of ids stay index lookups. A
  // custom plan sees a large array and may scan the whole table instead
  // (measured at 100 k rows: 5,000 payloads read by id in 15.7 ms by a
  // sequential scan, and 3,000 fires written in 82 ms by a hash join
  // against 20 ms by index), and costs planning at every call.
  pg::Result generic(
      PQexec(conn.get(), "SET plan_cache_mode = force_generic_plan"));
  if (PQresultStatus(generic.get()) != PGRES_COMMAND_OK) {
    *why = pg::ErrorOf(generic.get());
    return Status::Unavailable("cannot connect to PostgreSQL: " + *why);
  }
  if (writer) {
    // A standby takes no writes (a fail-over's old primary, or a host
    // list without target_session_attrs=read-write).
    pg::Result r(PQexec(conn.get(), "SELECT pg_is_in_recovery()"));
    if (PQresultStatus(r.get()) != PGRES_TUPLES_OK ||
        std::string(PQgetvalue(r.get(), 0, 0)) != "f") {
      *why = Where(conn.get()) + " is a standby (read-only)";
      return Status::Unavailable(*why);
    }
  }
  if (writer) {
    if (schema_.version == 0) {
      // The first connection: the schema, before anything else.
      if (Status s = pg::Migrate(conn.get(), options_.partitions, &schema_);
          !s.ok()) {
        *why = s.message();
        return s;
      }
    }
    if (!options_.shared) {
      if (Status s = TakeDatabase(conn.get()); !s.ok()) {
        *why = s.message();
        return s;
      }
    }
    if (Status s = Prepare(conn.get()); !s.ok()) {
      *why = s.message();
      return s;
    }
    if (PQenterPipelineMode(conn.get()) != 1) {
      *why = pg::ErrorOf(conn.get());
      return Status::Internal("cannot enter libpq's pipeline mode: " + *why);
    }
  }
  *out = std::move(conn);
  return Status::Ok();
}

Status PgStore::TakeDatabase(PGconn* conn) {
  // Waits up to lock_wait for a delayd that holds it: one just closed, or
  // killed, whose session the server has not ended yet.
  const std::string wait =
      "SET lock_timeout = " + std::to_string(options_.lock_wait.count());
  pg::Result set(PQexec(conn, wait.c_str()));
  pg::Result r(PQexec(conn, kWriterLock));
  pg::Result reset(PQexec(conn, "RESET lock_timeout"));
  if (PQresultStatus(r.get()) == PGRES_TUPLES_OK &&
      PQresultStatus(set.get()) == PGRES_COMMAND_OK &&
      PQresultStatus(reset.get()) == PGRES_COMMAND_OK) {
    return Status::Ok();
  }
  const char* state = PQresultErrorField(r.get(), PG_DIAG_SQLSTATE);
  if (state != nullptr && std::string_view(state) == "55P03") {
    return Status::FailedPrecondition(
        Where(conn) +
        " is used by another delayd (it held the database's delayd lock for "
        "the " +
        std::to_string(options_.lock_wait.count()) +
        " ms this one waited): one delayd writes to a database at a time");
  }
  return Status::Unavailable("taking the database for this delayd: " +
                             pg::ErrorOf(r.get()));
}

void PgStore::ReleaseDatabase() {
  // (Ending the session would release it too, but the server may take a
  // moment to notice: a delayd started right after would wait for it.)
  PGconn* conn = writer_conn_.get();
  if (options_.shared || conn == nullptr || PQstatus(conn) != CONNECTION_OK ||
      PQexitPipelineMode(conn) != 1) {
    return;
  }
  pg::Result r(PQexec(conn, kWriterUnlock));
}

Status PgStore::Prepare(PGconn* conn) {
  for (const Statement& st : kStatements) {
    pg::Result r(PQprepare(conn, st.name, st.sql, 0, nullptr));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) {
      return Status::Internal(std::string("preparing '") + st.name +
                              "': " + pg::ErrorOf(r.get()));
    }
  }
  return Status::Ok();
}

Status PgStore::Error(const std::string& what) const {
  Status status = Status::Internal(where_ + ": " + what);
  if (hooks_.on_error) hooks_.on_error(status);
  return status;
}

Status PgStore::ReadError(PGconn* conn, const PGresult* result,
                          const std::string& what) const {
  if ((conn != nullptr && PQstatus(conn) != CONNECTION_OK) ||
      (result != nullptr && pg::IsUnavailable(result))) {
    return Status::Unavailable(where_ + ": " + what);
  }
  return Error(what);
}

std::uint32_t PgStore::PartitionOf(std::string_view ns,
                                   std::string_view key) const {
  return StablePartition(
      ns, key, static_cast<std::uint32_t>(std::max(1, schema_.partitions)));
}

void PgStore::SetHeld(const Held& held) {
  MutexLock lock(&mu_);
  leases_ = held;
}

Status PgStore::WriteNow(Batch& batch) {
  Done done;
  Status result = Status::Internal("not written");
  Mutex mu;
  CondVar cv;
  bool written = false;
  // (Answered on the writer's thread: a caller on the executor's pool, a
  // partition loading on a cluster node, must not wait for that pool.)
  Enqueue(
      batch, nullptr,
      [&](Status s) {
        MutexLock lock(&mu);
        result = std::move(s);
        written = true;
        cv.Signal();
      },
      /*direct=*/true);
  MutexLock lock(&mu);
  while (!written) cv.Wait(&mu);
  return result;
}

Status PgStore::Failed() const {
  if (!failed_) return Status::Ok();
  return Status::Unavailable(where_ +
                             ": the database refused a write; no more are "
                             "taken until delayd restarts");
}

void PgStore::SetExecutor(std::function<void(std::function<void()>)> executor) {
  MutexLock lock(&mu_);
  executor_ = std::move(executor);
}

bool PgStore::Backlogged(std::string* why) const {
  if (!writable_.load()) {
    if (why != nullptr) {
      *why = where_ +
             " takes no writes now (unreachable, or read-only during a "
             "fail-over); delayd reconnects by itself: try again";
    }
    return true;
  }
  if (queued_bytes_.load(std::memory_order_relaxed) <=
      options_.max_backlog_bytes) {
    return false;
  }
  if (why != nullptr) {
    *why = "the store is behind (more than " +
           std::to_string(options_.max_backlog_bytes >> 20) +
           " MiB wait to be written); try again";
  }
  return true;
}

bool PgStore::Writable(std::string* why) const {
  if (writable_.load()) return true;
  if (why != nullptr) {
    MutexLock lock(const_cast<Mutex*>(&mu_));
    *why = unwritable_why_;
  }
  return false;
}

PgStore::Op::Op(const PgStore& store) : store_(store) {
  MutexLock lock(&store_.busy_mu_);
  at_ = const_cast<PgStore&>(store_).busy_.insert(
      std::chrono::steady_clock::now());
}

PgStore::Op::~Op() {
  MutexLock lock(&store_.busy_mu_);
  const_cast<PgStore&>(store_).busy_.erase(at_);
}

std::chrono::nanoseconds PgStore::Busy() const {
  MutexLock lock(&busy_mu_);
  if (busy_.empty()) return std::chrono::nanoseconds(0);
  return std::chrono::steady_clock::now() - *busy_.begin();
}

Status PgStore::Backup(const std::string&) {
  return Status::FailedPrecondition(
      "delayd's state is in PostgreSQL (" + where_ +
      "): back it up with PostgreSQL's own tools: pg_dump, or base backups "
      "with WAL archiving for point-in-time recovery");
}

std::vector<Store::Gauge> PgStore::Gauges() {
  return {{"delayd_store_writable",
           "1 while the store takes writes; 0 while the database is "
           "unreachable or read-only.",
           writable_.load() ? 1.0 : 0.0}};
}

}  // namespace delayd
