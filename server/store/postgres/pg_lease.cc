#include "server/store/postgres/pg_lease.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "delayd/text/build_info.h"
#include "server/store/postgres/pg_schema.h"

namespace delayd::pg {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto Run = RunParams;

void AddLeases(const std::vector<Lease>& held, Params* p) {
  Array parts(kInt4), epochs(kInt8);
  for (const Lease& l : held) {
    parts.Int32(l.part);
    epochs.Int64(l.epoch);
  }
  p->Add(parts.Encode());
  p->Add(epochs.Encode());
}

// Rows of (part int4, epoch int8) as leases valid until `valid_until`.
void ReadLeases(const PGresult* r, Clock::time_point valid_until,
                std::vector<Lease>* out) {
  out->clear();
  for (int i = 0; i < PQntuples(r); ++i) {
    out->push_back({GetInt32(PQgetvalue(r, i, 0)),
                    GetInt64(PQgetvalue(r, i, 1)), valid_until});
  }
  std::sort(out->begin(), out->end(),
            [](const Lease& a, const Lease& b) { return a.part < b.part; });
}

}  // namespace

Status Heartbeat(PGconn* conn, std::string_view node, std::string_view instance,
                 std::string_view advertise) {
  Params p;
  p.Bytes(node);
  p.Bytes(advertise);
  p.Bytes(instance);
  p.Bytes(BuildVersion());
  p.Int32(kNodeLevel);
  Result r;
  if (Status s = Run(conn,
                     "INSERT INTO delayd_nodes (node, advertise, "
                     "heartbeat_at, started_at, instance, release, level) "
                     "VALUES ($1::text, $2::text, now(), now(), $3::text, "
                     "$4::text, $5::int4) ON CONFLICT (node) DO UPDATE SET "
                     "advertise = EXCLUDED.advertise, heartbeat_at = now(), "
                     "release = EXCLUDED.release, level = EXCLUDED.level "
                     "WHERE delayd_nodes.instance = EXCLUDED.instance "
                     "RETURNING 1",
                     p, "recording the node's heartbeat", &r);
      !s.ok()) {
    // Below the cluster's level (a newer release raised it): this node
    // must stop.
    return IsBelowClusterLevel(r.get())
               ? Status::FailedPrecondition(s.message())
               : s;
  }
  if (PQntuples(r.get()) != 1) {
    return Status::FailedPrecondition(
        "node id '" + std::string(node) +
        "' is held by another process now (taken over while this one could "
        "not reach the database)");
  }
  return Status::Ok();
}

Status Leave(PGconn* conn, std::string_view node, std::string_view instance) {
  Params p;
  p.Bytes(node);
  p.Bytes(instance);
  Result r;
  return Run(conn,
             "DELETE FROM delayd_nodes WHERE node = $1::text AND instance = "
             "$2::text",
             p, "taking the node out of the live nodes", &r);
}

Status LiveNodes(PGconn* conn, std::chrono::milliseconds ttl,
                 std::vector<std::string>* out) {
  Params p;
  p.Int64(ttl.count());
  Result r;
  if (Status s = Run(conn,
                     "SELECT node FROM delayd_nodes WHERE heartbeat_at > "
                     "now() - $1::int8 * interval '1 millisecond' ORDER BY "
                     "node",
                     p, "reading the live nodes", &r);
      !s.ok()) {
    return s;
  }
  out->clear();
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    out->emplace_back(PQgetvalue(r.get(), i, 0), PQgetlength(r.get(), i, 0));
  }
  return Status::Ok();
}

namespace {

// Runs `sql`, whose rows are (int4, text), into `out`.
Status ReadByPart(PGconn* conn, const char* sql, const char* what,
                  std::map<int, std::string>* out) {
  Params p;
  Result r;
  if (Status s = Run(conn, sql, p, what, &r); !s.ok()) return s;
  out->clear();
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    (*out)[GetInt32(PQgetvalue(r.get(), i, 0))] =
        std::string(PQgetvalue(r.get(), i, 1), PQgetlength(r.get(), i, 1));
  }
  return Status::Ok();
}

}  // namespace

Status Owners(PGconn* conn, std::map<int, std::string>* out) {
  return ReadByPart(conn,
                    "SELECT part, owner FROM delayd_leases WHERE owner IS "
                    "NOT NULL AND expires_at > now()",
                    "reading the partitions' owners", out);
}

Status OwnerAddresses(PGconn* conn, std::map<int, std::string>* out) {
  return ReadByPart(conn,
                    "SELECT l.part, n.advertise FROM delayd_leases l JOIN "
                    "delayd_nodes n ON n.node = l.owner WHERE l.expires_at > "
                    "now()",
                    "reading the partitions' owners' addresses", out);
}

Status Describe(PGconn* conn, std::chrono::milliseconds ttl,
                std::vector<NodeRow>* nodes, std::vector<LeaseRow>* leases) {
  Params p;
  p.Int64(ttl.count());
  Result r;
  if (Status s = Run(conn,
                     "SELECT node, advertise, (extract(epoch FROM "
                     "heartbeat_at) * 1000000)::int8, (extract(epoch FROM "
                     "started_at) * 1000000)::int8, (heartbeat_at > now() - "
                     "$1::int8 * interval '1 millisecond')::int4, release, "
                     "level FROM delayd_nodes ORDER BY node",
                     p, "reading the nodes", &r);
      !s.ok()) {
    return s;
  }
  auto text = [&](int row, int col) {
    return std::string(PQgetvalue(r.get(), row, col),
                       PQgetlength(r.get(), row, col));
  };
  nodes->clear();
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    nodes->push_back({text(i, 0), text(i, 1),
                      GetInt64(PQgetvalue(r.get(), i, 2)),
                      GetInt64(PQgetvalue(r.get(), i, 3)),
                      GetInt32(PQgetvalue(r.get(), i, 4)) != 0, text(i, 5),
                      GetInt32(PQgetvalue(r.get(), i, 6))});
  }
  Params none;
  if (Status s = Run(conn,
                     "SELECT part, coalesce(owner, ''), epoch, "
                     "coalesce((extract(epoch FROM expires_at) * "
                     "1000000)::int8, 0), (owner IS NOT NULL AND expires_at "
                     "> now())::int4 FROM delayd_leases ORDER BY part",
                     none, "reading the leases", &r);
      !s.ok()) {
    return s;
  }
  leases->clear();
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    leases->push_back({GetInt32(PQgetvalue(r.get(), i, 0)), text(i, 1),
                       GetInt64(PQgetvalue(r.get(), i, 2)),
                       GetInt64(PQgetvalue(r.get(), i, 3)),
                       GetInt32(PQgetvalue(r.get(), i, 4)) != 0});
  }
  return Status::Ok();
}

Status Acquire(PGconn* conn, std::string_view node,
               const std::vector<int>& parts, const LeaseTerms& terms,
               std::vector<Lease>* taken) {
  Params p;
  p.Bytes(node);
  Array array(kInt4);
  for (int part : parts) array.Int32(part);
  p.Add(array.Encode());
  p.Int64(terms.ttl.count());
  const Clock::time_point sent = Clock::now();
  Result r;
  // (Two nodes taking one row: the second's UPDATE waits for the first's,
  // then finds the row no longer free and skips it.)
  if (Status s = Run(conn,
                     "UPDATE delayd_leases SET owner = $1::text, epoch = epoch "
                     "+ 1, expires_at = now() + $3::int8 * interval '1 "
                     "millisecond' WHERE part = ANY($2::int4[]) AND (owner IS "
                     "NULL OR expires_at <= now()) RETURNING part, epoch",
                     p, "taking partition leases", &r);
      !s.ok()) {
    return s;
  }
  ReadLeases(r.get(), sent + terms.ttl - terms.margin, taken);
  return Status::Ok();
}

Status Renew(PGconn* conn, std::string_view node,
             const std::vector<Lease>& held, const LeaseTerms& terms,
             std::vector<Lease>* kept) {
  Params p;
  p.Bytes(node);
  AddLeases(held, &p);
  p.Int64(terms.ttl.count());
  const Clock::time_point sent = Clock::now();
  Result r;
  if (Status s = Run(conn,
                     "UPDATE delayd_leases l SET expires_at = now() + "
                     "$4::int8 * interval '1 millisecond' FROM "
                     "unnest($2::int4[], $3::int8[]) AS h(part, epoch) WHERE "
                     "l.part = h.part AND l.epoch = h.epoch AND l.owner = "
                     "$1::text RETURNING l.part, l.epoch",
                     p, "renewing partition leases", &r);
      !s.ok()) {
    return s;
  }
  ReadLeases(r.get(), sent + terms.ttl - terms.margin, kept);
  return Status::Ok();
}

Status Release(PGconn* conn, std::string_view node,
               const std::vector<Lease>& held) {
  Params p;
  p.Bytes(node);
  AddLeases(held, &p);
  Result r;
  return Run(conn,
             "UPDATE delayd_leases l SET owner = NULL, expires_at = now() "
             "FROM unnest($2::int4[], $3::int8[]) AS h(part, epoch) WHERE "
             "l.part = h.part AND l.epoch = h.epoch AND l.owner = $1::text",
             p, "releasing partition leases", &r);
}

Status LimitLockWaits(PGconn* conn, std::chrono::milliseconds wait) {
  Params p;
  Result r;
  // (At least 1 ms: a lock_timeout of 0 turns the bound off.)
  const std::string sql =
      "SET lock_timeout = " + std::to_string(std::max<long long>(
                                  1, static_cast<long long>(wait.count())));
  return Run(conn, sql.c_str(), p, "bounding the lease keeper's lock waits",
             &r);
}

Status Listen(PGconn* conn) {
  for (const char* channel : {kLeaseChannel, kPolicyChannel}) {
    Params p;
    Result r;
    if (Status s = Run(conn, (std::string("LISTEN ") + channel).c_str(), p,
                       "listening for lease and policy changes", &r);
        !s.ok()) {
      return s;
    }
  }
  return Status::Ok();
}

Status Notify(PGconn* conn) {
  Params p;
  Result r;
  return Run(conn, (std::string("NOTIFY ") + kLeaseChannel).c_str(), p,
             "telling the nodes of a lease change", &r);
}

Params FenceParams(std::string_view node, const std::vector<Lease>& held) {
  Params p;
  p.Bytes(node);
  AddLeases(held, &p);
  return p;
}

bool IsFenced(const PGresult* result) {
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  return state != nullptr && std::strcmp(state, "DL001") == 0;
}

Rebalance Balance(int partitions, const std::vector<std::string>& live,
                  std::string_view me,
                  const std::map<int, std::string>& owners) {
  Rebalance out;
  std::vector<std::string> nodes = live;
  if (std::find(nodes.begin(), nodes.end(), me) == nodes.end()) {
    nodes.emplace_back(me);
  }
  std::sort(nodes.begin(), nodes.end());
  const int n = static_cast<int>(nodes.size());
  const int rank = static_cast<int>(std::find(nodes.begin(), nodes.end(), me) -
                                    nodes.begin());
  const int share = partitions / n + (rank < partitions % n ? 1 : 0);
  const std::set<std::string_view> alive(nodes.begin(), nodes.end());
  std::vector<int> mine, free;
  for (int part = 0; part < partitions; ++part) {
    const auto it = owners.find(part);
    if (it != owners.end() && it->second == me) {
      mine.push_back(part);
    } else if (it == owners.end() || !alive.contains(it->second)) {
      free.push_back(part);
    }
  }
  const int have = static_cast<int>(mine.size());
  if (have > share) {
    out.give.assign(mine.end() - (have - share), mine.end());
  } else {
    const int want = std::min<int>(share - have, static_cast<int>(free.size()));
    out.take.assign(free.begin(), free.begin() + want);
  }
  return out;
}

}  // namespace delayd::pg
