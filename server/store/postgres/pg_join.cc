#include "server/store/postgres/pg_join.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <thread>

#include "delayd/text/build_info.h"
#include "server/store/postgres/pg_schema.h"
#include "server/store/postgres/pg_wire.h"

namespace delayd::pg {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto Run = RunParams;

// HMAC-SHA256 of `salt`, keyed by `token`, under a label of its own.
std::string Digest(std::string_view token, std::string_view salt) {
  const std::string data =
      std::string("delayd cluster token\0", 21) + std::string(salt);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
       &n);
  return std::string(reinterpret_cast<const char*>(out), n);
}

std::string RandomBytes(std::size_t n) {
  std::string out(n, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n));
  return out;
}

// The holder of `node`: where it is reached, its instance, and its
// heartbeat (database microseconds) and age in ms; false if no row.
struct Holder {
  std::string advertise, instance;
  std::int64_t heartbeat_us = 0, age_ms = 0;
};
Status ReadHolder(PGconn* conn, std::string_view node, Holder* out,
                  bool* found) {
  Params p;
  p.Bytes(node);
  Result r;
  if (Status s = Run(conn,
                     "SELECT advertise, instance, (extract(epoch FROM "
                     "heartbeat_at) * 1000000)::int8, (extract(epoch FROM "
                     "now() - heartbeat_at) * 1000)::int8 FROM delayd_nodes "
                     "WHERE node = $1::text",
                     p, "reading the node id's holder", &r);
      !s.ok()) {
    return s;
  }
  *found = PQntuples(r.get()) == 1;
  if (!*found) return Status::Ok();
  out->advertise.assign(PQgetvalue(r.get(), 0, 0), PQgetlength(r.get(), 0, 0));
  out->instance.assign(PQgetvalue(r.get(), 0, 1), PQgetlength(r.get(), 0, 1));
  out->heartbeat_us = GetInt64(PQgetvalue(r.get(), 0, 2));
  out->age_ms = GetInt64(PQgetvalue(r.get(), 0, 3));
  return Status::Ok();
}

// Takes `node` for `instance` unless another instance beats with it;
// `claimed` tells which.
Status TryClaim(PGconn* conn, std::string_view node, std::string_view instance,
                std::string_view advertise, std::chrono::milliseconds ttl,
                bool* claimed) {
  Params p;
  p.Bytes(node);
  p.Bytes(advertise);
  p.Bytes(instance);
  p.Int64(ttl.count());
  p.Bytes(BuildVersion());
  p.Int32(kNodeLevel);
  Result r;
  if (Status s = Run(
          conn,
          "INSERT INTO delayd_nodes (node, advertise, heartbeat_at, "
          "started_at, instance, release, level) VALUES ($1::text, $2::text, "
          "now(), now(), $3::text, $5::text, $6::int4) ON CONFLICT (node) DO "
          "UPDATE SET advertise = EXCLUDED.advertise, heartbeat_at = now(), "
          "started_at = now(), instance = EXCLUDED.instance, release = "
          "EXCLUDED.release, level = EXCLUDED.level WHERE "
          "delayd_nodes.instance = EXCLUDED.instance OR "
          "delayd_nodes.heartbeat_at < now() - $4::int8 * interval '1 "
          "millisecond' RETURNING 1",
          p, "claiming the node id", &r);
      !s.ok()) {
    return s;
  }
  *claimed = PQntuples(r.get()) == 1;
  return Status::Ok();
}

}  // namespace

std::string NewInstanceId() {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : RandomBytes(16)) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

Status CheckClusterToken(PGconn* conn, std::string_view token) {
  const std::string salt = RandomBytes(16);
  Params insert;
  insert.Bytes(salt);
  insert.Bytes(Digest(token, salt));
  Result r;
  // The first node's token becomes the cluster's.
  if (Status s = Run(conn,
                     "INSERT INTO delayd_cluster (id, token_salt, "
                     "token_digest) VALUES (1, $1::bytea, $2::bytea) ON "
                     "CONFLICT (id) DO NOTHING",
                     insert, "recording the cluster's token", &r);
      !s.ok()) {
    return s;
  }
  Params none;
  if (Status s = Run(conn,
                     "SELECT token_salt, token_digest FROM delayd_cluster "
                     "WHERE id = 1",
                     none, "reading the cluster's token", &r);
      !s.ok()) {
    return s;
  }
  if (PQntuples(r.get()) != 1) {
    return Status::Internal("delayd_cluster holds no row");
  }
  const std::string stored_salt(PQgetvalue(r.get(), 0, 0),
                                PQgetlength(r.get(), 0, 0));
  const std::string stored(PQgetvalue(r.get(), 0, 1),
                           PQgetlength(r.get(), 0, 1));
  const std::string mine = Digest(token, stored_salt);
  if (mine.size() != stored.size() ||
      CRYPTO_memcmp(mine.data(), stored.data(), mine.size()) != 0) {
    return Status::PermissionDenied(
        "this node's cluster token (--cluster-token-file) is not the "
        "cluster's: the database holds the digest of another (the token its "
        "first node joined with)");
  }
  return Status::Ok();
}

Status ClaimNodeId(PGconn* conn, std::string_view node,
                   std::string_view instance, std::string_view advertise,
                   std::chrono::milliseconds ttl,
                   const std::function<void(const std::string&)>& waiting) {
  const auto until = Clock::now() + ttl + ttl / 2;
  const auto pause = std::max(std::chrono::milliseconds(20), ttl / 20);
  std::int64_t first_beat = -1;
  for (;;) {
    bool claimed = false;
    if (Status s = TryClaim(conn, node, instance, advertise, ttl, &claimed);
        !s.ok() || claimed) {
      return s;
    }
    Holder holder;
    bool found = false;
    if (Status s = ReadHolder(conn, node, &holder, &found); !s.ok()) return s;
    if (!found) continue;  // It left meanwhile: claim it now.
    const std::string who =
        "node id '" + std::string(node) + "' is held by a live process " +
        "(peers reach it at " + holder.advertise + ", its heartbeat " +
        std::to_string(holder.age_ms) + " ms old)";
    if (first_beat < 0) {
      first_beat = holder.heartbeat_us;
      // Its holder may have died a moment ago: a heartbeat that stays
      // still for a lease term is a dead one's.
      if (waiting) {
        waiting(who + "; waiting up to " + std::to_string(ttl.count()) +
                " ms for it to beat again or lapse");
      }
    } else if (holder.heartbeat_us != first_beat) {
      return Status::AlreadyExists(
          who + ": each node of a cluster needs a --node-id of its own");
    }
    if (Clock::now() > until) {
      return Status::AlreadyExists(
          who +
          ", and it did not lapse: each node of a cluster needs a "
          "--node-id of its own");
    }
    std::this_thread::sleep_for(pause);  // Until its next heartbeat is due.
  }
}

}  // namespace delayd::pg
