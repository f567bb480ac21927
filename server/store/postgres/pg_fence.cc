// PgStore's writes on a database whose partitions several nodes share
// (PgOptions::shared): each group's fence, and what the writer does when the
// database refuses a group by it (pg_store.h, SetHeld).
#include <spdlog/spdlog.h>

#include "server/store/postgres/pg_store.h"

namespace delayd {

bool PgStore::FenceOf(Group& group, pg::Params* fence) {
  if (!options_.shared) return false;
  Held held;
  {
    MutexLock lock(&mu_);
    held = leases_;
  }
  Held touched;
  for (Queued& q : group.batches) {
    if (!q.batch || !q.refused.ok()) continue;
    for (std::uint32_t p : q.batch->touched()) {
      auto it = held.find(p);
      if (it == held.end()) {
        q.refused = Status::Unavailable(
            "partition " + std::to_string(p) + " is not held by node '" +
            options_.node + "' (it moved to another node): not written");
        break;
      }
    }
    if (!q.refused.ok()) continue;
    for (std::uint32_t p : q.batch->touched()) touched.emplace(p, held[p]);
  }
  if (touched.empty()) return false;
  std::vector<pg::Lease> leases;
  for (const auto& [part, epoch] : touched) {
    leases.push_back(pg::Lease{static_cast<int>(part), epoch, {}});
  }
  *fence = pg::FenceParams(options_.node, leases);
  return true;
}

void PgStore::Fenced(const std::string& error) {
  spdlog::warn(
      "{}: a write of node '{}' was fenced ({}): a partition it "
      "wrote moved to another node",
      where_, options_.node, error);
  // Nothing of the group committed, nor of the groups the server skipped
  // behind it (no sync point lies between them). They all go again on a
  // new connection, after CheckLeases: then only the batches that touch a
  // partition lost are refused (FenceOf). A group holds the batches of
  // several partitions, and one partition lost must not cost the others
  // their writes: a firing refused so, its partition still this node's,
  // would leave its timers stored but out of the wheel, fired by no one.
  SendAgain();
  check_leases_ = true;
}

Status PgStore::CheckLeases(PGconn* conn) {
  pg::Params p;
  p.Bytes(options_.node);
  pg::Result r;
  if (Status s = QueryOnWriter(conn,
                               "SELECT part, epoch FROM delayd_leases WHERE "
                               "owner = $1 AND expires_at > now()",
                               p, 0, &r);
      !s.ok()) {
    return s;
  }
  Held db;
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    db[static_cast<std::uint32_t>(std::stoul(PQgetvalue(r.get(), i, 0)))] =
        std::stoll(PQgetvalue(r.get(), i, 1));
  }
  MutexLock lock(&mu_);
  std::erase_if(leases_, [&db](const auto& lease) {
    auto it = db.find(lease.first);
    return it == db.end() || it->second != lease.second;
  });
  return Status::Ok();
}

}  // namespace delayd
