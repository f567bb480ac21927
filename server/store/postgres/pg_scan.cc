// PgStore's scans: what recovery reads at start (one daemon on the
// database), and what a cluster node reads of a partition it takes
// (LoadPartition).
#include <algorithm>

#include "server/store/postgres/pg_store.h"

namespace delayd {
namespace {

// Decoders of the columns the scans select, in binary COPY form: a timer's
// (id, ns, key, fire_time, version), an event's (event_id, ns, key,
// version, fire_time, fired_at, reason, id), and a fate's (attempts, dead,
// error, retry_at) from field `at`. Views point into `f`; `ns` is not set.
using Fields = std::vector<std::string_view>;
StoredTimer TimerOf(const Fields& f) {
  StoredTimer t{};
  t.payload_id = static_cast<std::uint64_t>(pg::GetInt64(f[0].data()));
  t.key = f[2];
  t.fire_time = pg::GetInt64(f[3].data());
  t.version = static_cast<std::uint64_t>(pg::GetInt64(f[4].data()));
  return t;
}
StoredEvent EventOf(const Fields& f) {
  StoredEvent e{};
  e.id = static_cast<std::uint64_t>(pg::GetInt64(f[0].data()));
  e.key = f[2];
  e.version = static_cast<std::uint64_t>(pg::GetInt64(f[3].data()));
  e.fire_time = pg::GetInt64(f[4].data());
  e.fired_at = pg::GetInt64(f[5].data());
  e.reason = static_cast<Reason>(pg::GetInt16(f[6].data()));
  e.payload_id = static_cast<std::uint64_t>(pg::GetInt64(f[7].data()));
  return e;
}
StoredFate FateOf(const Fields& f, const std::vector<bool>& null,
                  std::size_t at) {
  StoredFate fate;
  fate.attempts = static_cast<std::uint32_t>(pg::GetInt32(f[at].data()));
  fate.dead = !null[at + 1] && f[at + 1][0] != 0;
  if (!null[at + 2]) fate.error = f[at + 2];
  if (!null[at + 3]) fate.retry_at = pg::GetInt64(f[at + 3].data());
  return fate;
}

}  // namespace

Status PgStore::LoadNamespaces(std::vector<std::string>* names) {
  pg::Result r;
  if (Status s = Query("SELECT ns FROM delayd_jobs UNION SELECT ns FROM "
                       "delayd_schedules UNION SELECT ns FROM delayd_dedup "
                       "ORDER BY ns",
                       0, &r);
      !s.ok()) {
    return s;
  }
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    return ReadError(nullptr, r.get(),
                     "reading namespaces: " + pg::ErrorOf(r.get()));
  }
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    names->push_back(PQgetvalue(r.get(), i, 0));
  }
  names_ = *names;
  return Status::Ok();
}

Status PgStore::LoadCounters(std::uint64_t* next_version,
                             std::uint64_t* next_event_seq) {
  pg::Result r;
  if (Status s = Query(
          "SELECT COALESCE(max(version_limit), 0), COALESCE(max(event_limit), "
          "0) FROM delayd_counters",
          0, &r);
      !s.ok()) {
    return s;
  }
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    return ReadError(nullptr, r.get(),
                     "reading counters: " + pg::ErrorOf(r.get()));
  }
  *next_version = std::max<std::uint64_t>(
      *next_version, std::stoull(PQgetvalue(r.get(), 0, 0)));
  *next_event_seq = std::max<std::uint64_t>(
      *next_event_seq, std::stoull(PQgetvalue(r.get(), 0, 1)));
  return Status::Ok();
}

Status PgStore::LoadPolicies(
    std::vector<std::pair<std::string, std::string>>* policies) {
  pg::Result r;
  if (Status s = Query("SELECT name, policy FROM delayd_policies", 1, &r);
      !s.ok()) {
    return s;
  }
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    return ReadError(nullptr, r.get(),
                     "reading policies: " + pg::ErrorOf(r.get()));
  }
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    policies->emplace_back(
        std::string(PQgetvalue(r.get(), i, 0), PQgetlength(r.get(), i, 0)),
        std::string(PQgetvalue(r.get(), i, 1), PQgetlength(r.get(), i, 1)));
  }
  return Status::Ok();
}

namespace {

NamespaceId IdOf(const std::vector<std::string>& names, std::string_view ns) {
  // (Sorted by LoadNamespaces.)
  auto it = std::lower_bound(names.begin(), names.end(), ns);
  return static_cast<NamespaceId>(it - names.begin());
}

}  // namespace

Status PgStore::ForEachTimer(
    const std::function<void(const StoredTimer&)>& visit) {
  return Copy(
      "COPY (SELECT id, ns, key, fire_time, version FROM delayd_jobs WHERE "
      "event_id IS NULL) TO STDOUT (FORMAT binary)",
      5, [&](const Fields& f, const std::vector<bool>&) {
        StoredTimer t = TimerOf(f);
        t.ns = IdOf(names_, f[1]);
        visit(t);
      });
}

Status PgStore::ForEachSchedule(
    const std::function<void(NamespaceId, std::string_view, std::string_view)>&
        visit) {
  return Copy(
      "COPY (SELECT ns, key, schedule FROM delayd_schedules) TO STDOUT "
      "(FORMAT binary)",
      3, [&](const std::vector<std::string_view>& f, const std::vector<bool>&) {
        visit(IdOf(names_, f[0]), f[1], f[2]);
      });
}

Status PgStore::ForEachDedup(
    const std::function<void(NamespaceId, std::string_view, std::string_view)>&
        visit) {
  return Copy(
      "COPY (SELECT ns, key, fate FROM delayd_dedup) TO STDOUT (FORMAT "
      "binary)",
      3, [&](const std::vector<std::string_view>& f, const std::vector<bool>&) {
        visit(IdOf(names_, f[0]), f[1], f[2]);
      });
}

Status PgStore::ForEachEvent(
    const std::function<void(const StoredEvent&)>& visit) {
  return Copy(
      "COPY (SELECT event_id, ns, key, version, fire_time, fired_at, reason, "
      "id FROM delayd_jobs WHERE event_id IS NOT NULL) TO STDOUT (FORMAT "
      "binary)",
      8, [&](const Fields& f, const std::vector<bool>&) {
        StoredEvent e = EventOf(f);
        e.ns = IdOf(names_, f[1]);
        visit(e);
      });
}

Status PgStore::ForEachFate(
    const std::function<void(std::uint64_t, const StoredFate&)>& visit) {
  return Copy(
      "COPY (SELECT event_id, attempts, dead, error, retry_at FROM "
      "delayd_jobs WHERE event_id IS NOT NULL AND attempts IS NOT NULL) TO "
      "STDOUT (FORMAT binary)",
      5, [&](const Fields& f, const std::vector<bool>& null) {
        visit(static_cast<std::uint64_t>(pg::GetInt64(f[0].data())),
              FateOf(f, null, 1));
      });
}

Status PgStore::LoadPartition(std::uint32_t part, std::uint64_t* version_limit,
                              std::uint64_t* event_seq_limit,
                              const PartitionVisitor& visit) {
  if (!options_.shared) return Store::LoadPartition(part, nullptr, nullptr, {});
  const std::string where = " WHERE part = " + std::to_string(part);
  pg::Result r;
  if (Status s = Query(("SELECT version_limit, event_limit FROM "
                        "delayd_counters" +
                        where)
                           .c_str(),
                       0, &r);
      !s.ok()) {
    return s;
  }
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    return ReadError(nullptr, r.get(),
                     "reading counters: " + pg::ErrorOf(r.get()));
  }
  *version_limit = *event_seq_limit = 0;
  if (PQntuples(r.get()) == 1) {
    *version_limit = std::stoull(PQgetvalue(r.get(), 0, 0));
    *event_seq_limit = std::stoull(PQgetvalue(r.get(), 0, 1));
  }
  Status s = Copy(
      "COPY (SELECT ns, key, schedule FROM delayd_schedules" + where +
          ") TO STDOUT (FORMAT binary)",
      3, [&](const std::vector<std::string_view>& f, const std::vector<bool>&) {
        visit.schedule(f[0], f[1], f[2]);
      });
  if (!s.ok()) return s;
  if (visit.dedup) {
    s = Copy("COPY (SELECT ns, key, fate FROM delayd_dedup" + where +
                 ") TO STDOUT (FORMAT binary)",
             3,
             [&](const std::vector<std::string_view>& f,
                 const std::vector<bool>&) { visit.dedup(f[0], f[1], f[2]); });
    if (!s.ok()) return s;
  }
  s = Copy("COPY (SELECT id, ns, key, fire_time, version FROM delayd_jobs" +
               where + " AND event_id IS NULL) TO STDOUT (FORMAT binary)",
           5, [&](const Fields& f, const std::vector<bool>&) {
             visit.timer(f[1], TimerOf(f));
           });
  if (!s.ok()) return s;
  s = Copy(
      "COPY (SELECT event_id, ns, key, version, fire_time, fired_at, reason, "
      "id, attempts, dead, error, retry_at FROM delayd_jobs" +
          where + " AND event_id IS NOT NULL) TO STDOUT (FORMAT binary)",
      12, [&](const Fields& f, const std::vector<bool>& null) {
        const StoredEvent e = EventOf(f);
        if (null[8]) return visit.event(f[1], e, nullptr);
        const StoredFate fate = FateOf(f, null, 8);
        visit.event(f[1], e, &fate);
      });
  return s;
}

}  // namespace delayd
