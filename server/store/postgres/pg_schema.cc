#include "server/store/postgres/pg_schema.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "server/store/postgres/pg_wire.h"

namespace delayd::pg {
namespace {

// Migration N takes a schema at version N - 1 to N. Never edited once
// released: a change is a new migration.
const std::vector<std::string>& Migrations() {
  static const std::vector<std::string> kMigrations = {
      // 1: the first schema.
      R"sql(
CREATE TABLE delayd_jobs (
  id bigint PRIMARY KEY,
  part smallint NOT NULL,
  ns text NOT NULL,
  key bytea NOT NULL,
  fire_time bigint NOT NULL,
  version bigint NOT NULL,
  payload bytea NOT NULL,
  event_id bigint,
  fired_at bigint,
  reason smallint,
  attempts integer,
  dead boolean,
  error bytea,
  retry_at bigint
);
CREATE INDEX delayd_jobs_due ON delayd_jobs (part, fire_time)
  WHERE event_id IS NULL;
CREATE UNIQUE INDEX delayd_jobs_events ON delayd_jobs (event_id)
  WHERE event_id IS NOT NULL;
CREATE TABLE delayd_counters (
  part integer PRIMARY KEY,
  version_limit bigint NOT NULL,
  event_limit bigint NOT NULL
);
CREATE TABLE delayd_policies (
  name text PRIMARY KEY,
  policy bytea NOT NULL
);
CREATE TABLE delayd_commits (
  node text PRIMARY KEY,
  group_id bigint NOT NULL
);
)sql",
      // 2: recurring schedules, each encoded by the core.
      R"sql(
CREATE TABLE delayd_schedules (
  part smallint NOT NULL,
  ns text NOT NULL,
  key bytea NOT NULL,
  schedule bytea NOT NULL,
  PRIMARY KEY (ns, key)
);
)sql",
      // 3: nodes and partition leases (pg_lease.h).
      R"sql(
CREATE TABLE delayd_nodes (
  node text PRIMARY KEY,
  advertise text NOT NULL,
  heartbeat_at timestamptz NOT NULL,
  started_at timestamptz NOT NULL
);
CREATE TABLE delayd_leases (
  part integer PRIMARY KEY,
  owner text,
  epoch bigint NOT NULL,
  expires_at timestamptz NOT NULL
);
INSERT INTO delayd_leases (part, owner, epoch, expires_at)
  SELECT g, NULL, 0, now()
  FROM generate_series(0, (SELECT partitions FROM delayd_schema) - 1) AS g;
CREATE FUNCTION delayd_fence(node text, parts int4[], epochs int8[])
RETURNS void LANGUAGE plpgsql AS $fence$
BEGIN
  -- Shared locks: a node taking one of these leases waits for this
  -- transaction to end, and then reads what it wrote.
  PERFORM 1 FROM delayd_leases WHERE part = ANY(parts) FOR SHARE;
  IF (SELECT count(*) FROM delayd_leases l,
        unnest(parts, epochs) AS h(part, epoch)
      WHERE l.part = h.part AND l.epoch = h.epoch AND l.owner = node)
     <> cardinality(parts) THEN
    RAISE EXCEPTION 'a partition lease of node % was lost', node
      USING ERRCODE = 'DL001';
  END IF;
END
$fence$;
)sql",
      // 4: the contract of level 2 (RaiseClusterLevel): no node below the
      // cluster's level records a heartbeat (so none takes a lease).
      R"sql(
CREATE FUNCTION delayd_node_level() RETURNS trigger
LANGUAGE plpgsql AS $level$
DECLARE
  cluster integer := (SELECT cluster_level FROM delayd_schema);
BEGIN
  IF NEW.level < cluster THEN
    RAISE EXCEPTION 'node % runs a delayd release older than this cluster '
      'admits (level %, the cluster''s is %): upgrade it', NEW.node,
      NEW.level, cluster USING ERRCODE = 'DL002';
  END IF;
  RETURN NEW;
END
$level$;
CREATE TRIGGER delayd_nodes_level BEFORE INSERT OR UPDATE ON delayd_nodes
  FOR EACH ROW EXECUTE FUNCTION delayd_node_level();
)sql",
  };
  static_assert(kSchemaVersion == 4 && kStartVersion == 3);
  return kMigrations;
}

// Steps that only add (tables, columns with defaults, functions) or trade
// one index for another that no statement needs to be correct: a binary
// that knows the schema's version but not a step works on beside one that
// applied it, so steps do not raise the version (a rolling upgrade runs
// both). Each is applied once, in order, and recorded by name in
// delayd_schema_steps; never edited once released.
struct Step {
  const char* name;
  const char* sql;
};
const std::vector<Step>& Steps() {
  static const std::vector<Step> kSteps = {
      // Who may be a node: a keyed digest of the cluster's token (pg_join.h)
      // and, per node id, the process holding it.
      {"cluster-token-and-node-instance", R"sql(
CREATE TABLE delayd_cluster (
  id integer PRIMARY KEY CHECK (id = 1),
  token_salt bytea NOT NULL,
  token_digest bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE delayd_nodes ADD COLUMN instance text NOT NULL DEFAULT '';
)sql"},
      // Keys' fates in a namespace's dedup window, each encoded by the
      // core (server/core/dedup_table.h).
      {"dedup-window", R"sql(
CREATE TABLE delayd_dedup (
  part smallint NOT NULL,
  ns text NOT NULL,
  key bytea NOT NULL,
  fate bytea NOT NULL,
  PRIMARY KEY (ns, key)
);
CREATE INDEX delayd_dedup_part ON delayd_dedup (part);
)sql"},
      // Each node's release and level, and the cluster's level (rolling
      // upgrades, pg_schema.h): a row an older binary writes keeps level 1.
      {"node-levels", R"sql(
ALTER TABLE delayd_nodes ADD COLUMN release text NOT NULL DEFAULT '',
  ADD COLUMN level integer NOT NULL DEFAULT 1;
ALTER TABLE delayd_schema ADD COLUMN cluster_level integer NOT NULL
  DEFAULT 1;
)sql"},
      // A firing changes no indexed column, and a row's page keeps room for
      // its fired version, so that PostgreSQL writes the firing as a
      // heap-only update: no index entry per firing, and the page's dead
      // version is pruned without a vacuum. Rows are found by id (the
      // primary key) or read by partition; the two indexes that named
      // event_id go (a fate finds its row by id: pg_store.cc). The fill
      // factor applies to pages filled from now on; a row grows by about 24
      // bytes when it fires, so 45 % leaves room for every row of a page
      // once rows carry a payload (rows with no namespace, key or payload to
      // speak of: about 97 % of those fired in one transaction). A binary
      // before this step works beside it: its fates scan the table.
      {"hot-fires", R"sql(
ALTER TABLE delayd_jobs SET (fillfactor = 45);
CREATE INDEX delayd_jobs_part ON delayd_jobs (part);
DROP INDEX delayd_jobs_due;
DROP INDEX delayd_jobs_events;
)sql"},
  };
  return kSteps;
}

// A key of pg_advisory_xact_lock that no other use of the database is
// likely to take: "delayd" in ASCII.
constexpr const char* kLockKey = "110101108097121100";

Status Exec(PGconn* conn, const std::string& sql, const char* what) {
  Result r(PQexec(conn, sql.c_str()));
  const ExecStatusType s = PQresultStatus(r.get());
  if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
    const std::string error = ErrorOf(r.get());
    return IsUnavailable(r.get())
               ? Status::Unavailable(std::string(what) + ": " + error)
               : Status::Internal(std::string(what) + ": " + error);
  }
  return Status::Ok();
}

// Opens a transaction holding the schema's advisory lock (until it ends);
// on failure nothing is left open.
Status BeginLocked(PGconn* conn, const char* what) {
  if (Status s = Exec(conn, "BEGIN", what); !s.ok()) return s;
  Status s =
      Exec(conn, std::string("SELECT pg_advisory_xact_lock(") + kLockKey + ")",
           "locking the schema");
  if (!s.ok()) PQclear(PQexec(conn, "ROLLBACK"));
  return s;
}

// Applies the steps not recorded yet (inside Migrate's transaction).
Status ApplySteps(PGconn* conn, bool* applied) {
  Result exists(
      PQexec(conn, "SELECT to_regclass('delayd_schema_steps') IS NOT NULL"));
  if (PQresultStatus(exists.get()) != PGRES_TUPLES_OK) {
    return Status::Internal("reading the schema: " + ErrorOf(exists.get()));
  }
  if (std::string_view(PQgetvalue(exists.get(), 0, 0)) != "t") {
    if (Status s = Exec(conn,
                        "CREATE TABLE delayd_schema_steps (name text PRIMARY "
                        "KEY, applied_at timestamptz NOT NULL DEFAULT now())",
                        "recording the schema's steps");
        !s.ok()) {
      return s;
    }
  }
  Result done(PQexec(conn, "SELECT name FROM delayd_schema_steps"));
  if (PQresultStatus(done.get()) != PGRES_TUPLES_OK) {
    return Status::Internal("reading the schema's steps: " +
                            ErrorOf(done.get()));
  }
  std::set<std::string> names;
  for (int i = 0; i < PQntuples(done.get()); ++i) {
    names.insert(PQgetvalue(done.get(), i, 0));
  }
  for (const Step& step : Steps()) {
    if (names.contains(step.name)) continue;
    const std::string what = std::string("applying schema step ") + step.name;
    if (Status s = Exec(conn, step.sql, what.c_str()); !s.ok()) return s;
    if (Status s = Exec(conn,
                        std::string("INSERT INTO delayd_schema_steps (name) "
                                    "VALUES ('") +
                            step.name + "')",
                        what.c_str());
        !s.ok()) {
      return s;
    }
    *applied = true;
  }
  return Status::Ok();
}

}  // namespace

Status Migrate(PGconn* conn, int partitions, Schema* out, bool* applied) {
  if (applied != nullptr) *applied = false;
  if (partitions < 1 || partitions > 1024) {
    return Status::InvalidArgument("partitions: from 1 to 1024");
  }
  if (Status s = BeginLocked(conn, "migrating the schema"); !s.ok()) return s;
  auto fail = [&](Status s) {
    PQclear(PQexec(conn, "ROLLBACK"));
    return s;
  };
  Result exists(
      PQexec(conn, "SELECT to_regclass('delayd_schema') IS NOT NULL"));
  if (PQresultStatus(exists.get()) != PGRES_TUPLES_OK) {
    return fail(
        Status::Internal("reading the schema: " + ErrorOf(exists.get())));
  }
  Schema schema;
  if (std::string(PQgetvalue(exists.get(), 0, 0)) == "t") {
    Result row(PQexec(conn, "SELECT version, partitions FROM delayd_schema"));
    if (PQresultStatus(row.get()) != PGRES_TUPLES_OK ||
        PQntuples(row.get()) != 1) {
      return fail(Status::Internal(
          "delayd_schema does not hold one row: the database's delayd "
          "schema is damaged"));
    }
    schema.version = std::stoi(PQgetvalue(row.get(), 0, 0));
    schema.partitions = std::stoi(PQgetvalue(row.get(), 0, 1));
  } else {
    const std::string create =
        "CREATE TABLE delayd_schema (version integer NOT NULL, partitions "
        "integer NOT NULL, created_at timestamptz NOT NULL DEFAULT now()); "
        "INSERT INTO delayd_schema (version, partitions) VALUES (0, " +
        std::to_string(partitions) + ")";
    if (Status s = Exec(conn, create, "creating the schema"); !s.ok()) {
      return fail(s);
    }
    schema.partitions = partitions;
  }
  if (schema.version > kSchemaVersion) {
    return fail(Status::FailedPrecondition(
        "the database's delayd schema is version " +
        std::to_string(schema.version) + ", newer than this delayd knows (" +
        std::to_string(kSchemaVersion) +
        "): run a delayd at least as new as the one that migrated it"));
  }
  const auto& migrations = Migrations();
  for (int v = schema.version + 1; v <= kStartVersion; ++v) {
    if (Status s =
            Exec(conn, migrations[v - 1],
                 ("applying schema migration " + std::to_string(v)).c_str());
        !s.ok()) {
      return fail(s);
    }
    if (applied != nullptr) *applied = true;
  }
  if (schema.version < kStartVersion) {
    if (Status s = Exec(conn,
                        "UPDATE delayd_schema SET version = " +
                            std::to_string(kStartVersion),
                        "recording the schema's version");
        !s.ok()) {
      return fail(s);
    }
    schema.version = kStartVersion;
  }
  bool stepped = false;
  if (Status s = ApplySteps(conn, &stepped); !s.ok()) return fail(s);
  if (stepped && applied != nullptr) *applied = true;
  if (Status s = Exec(conn, "COMMIT", "migrating the schema"); !s.ok()) {
    return s;
  }
  *out = schema;
  return Status::Ok();
}

namespace {

// The live nodes below level `level`, as "node (release)"; in the caller's
// transaction.
Status OlderNodes(PGconn* conn, std::chrono::milliseconds ttl, int level,
                  std::vector<std::string>* out) {
  Params p;
  p.Int64(ttl.count());
  p.Int32(level);
  Result r;
  if (Status s = RunParams(
          conn,
          "SELECT node, release FROM delayd_nodes WHERE heartbeat_at > now() "
          "- $1::int8 * interval '1 millisecond' AND level < $2::int4 ORDER "
          "BY node",
          p, "reading the nodes' levels", &r);
      !s.ok()) {
    return s;
  }
  out->clear();
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    const std::string release(PQgetvalue(r.get(), i, 1),
                              PQgetlength(r.get(), i, 1));
    out->push_back(
        std::string(PQgetvalue(r.get(), i, 0), PQgetlength(r.get(), i, 0)) +
        " (" + (release.empty() ? "0.1" : release) + ")");
  }
  return Status::Ok();
}

}  // namespace

bool IsBelowClusterLevel(const PGresult* result) {
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  return state != nullptr && std::string_view(state) == "DL002";
}

Status RaiseClusterLevel(PGconn* conn, std::chrono::milliseconds ttl,
                         ClusterLevel* out) {
  *out = ClusterLevel{};
  if (Status s = BeginLocked(conn, "raising the cluster's level"); !s.ok()) {
    return s;
  }
  auto fail = [&](Status s) {
    PQclear(PQexec(conn, "ROLLBACK"));
    return s;
  };
  Result row(PQexec(conn, "SELECT version, cluster_level FROM delayd_schema"));
  if (PQresultStatus(row.get()) != PGRES_TUPLES_OK ||
      PQntuples(row.get()) != 1) {
    return fail(
        Status::Internal("reading the cluster's level: " + ErrorOf(row.get())));
  }
  const int version = std::stoi(PQgetvalue(row.get(), 0, 0));
  out->level = std::stoi(PQgetvalue(row.get(), 0, 1));
  if (out->level < kNodeLevel) {
    if (Status s = OlderNodes(conn, ttl, kNodeLevel, &out->older); !s.ok()) {
      return fail(s);
    }
  }
  if (out->level >= kNodeLevel || !out->older.empty()) {
    return Exec(conn, "COMMIT", "reading the cluster's level");
  }
  // The contract: every live node reads what this level writes.
  const auto& migrations = Migrations();
  for (int v = version + 1; v <= kSchemaVersion; ++v) {
    if (Status s =
            Exec(conn, migrations[v - 1],
                 ("applying schema migration " + std::to_string(v)).c_str());
        !s.ok()) {
      return fail(s);
    }
  }
  if (Status s = Exec(conn,
                      "UPDATE delayd_schema SET version = " +
                          std::to_string(std::max(version, kSchemaVersion)) +
                          ", cluster_level = " + std::to_string(kNodeLevel),
                      "raising the cluster's level");
      !s.ok()) {
    return fail(s);
  }
  if (Status s = Exec(conn, "COMMIT", "raising the cluster's level"); !s.ok()) {
    return s;
  }
  out->level = kNodeLevel;
  out->raised = true;
  return Status::Ok();
}

}  // namespace delayd::pg
