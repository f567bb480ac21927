// delayd's flags: each also read from a DELAYD_* environment variable,
// checked as it is read (a value out of range is refused with the flag's
// name and its range, before anything starts), and turned into the
// server's options.
#ifndef DELAYD_SERVER_DAEMON_FLAGS_H_
#define DELAYD_SERVER_DAEMON_FLAGS_H_

#include <CLI/CLI.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "server/api/server.h"
#include "server/http/http_door.h"
#include "server/store/postgres/pg_store.h"

namespace delayd {

struct DaemonFlags {
  // What most flags set directly.
  DelaydServer::Options server;
  // The HTTP/JSON door (off while http.listen is empty).
  http::HttpDoor::Options http;
  // The store: PostgreSQL if `store` is a connection string or URL, else
  // RocksDB in `data_dir`, unless `in_memory`.
  std::string store;
  std::string node_id;
  // A cluster node (with a PostgreSQL store): how the other nodes reach
  // this one, and the term of its partition leases.
  std::string advertise;
  std::chrono::milliseconds lease_ttl{5000};
  // The file holding the token the nodes present to each other.
  std::string cluster_token_file;
  // --push-allow: read into server.push.rules by FinishFlags.
  std::vector<std::string> push_allow;
  std::string data_dir = "delayd-data";
  std::string fsync = "always";
  std::chrono::nanoseconds fsync_gather{0};
  std::string threading = "pool";
  bool salvage = false;
  bool fixed_event_ids = false;
  bool in_memory = false;
  std::chrono::nanoseconds shutdown_grace = std::chrono::seconds(5);
  std::string log_level = "info";
  std::string log_format = "text";
  // `delayd check`.
  CLI::App* check = nullptr;
  std::string check_dir;
  std::string check_store;
  std::string check_output = "text";
  // `delayd migrate`.
  CLI::App* migrate = nullptr;
  int partitions = 64;
};

// Adds every flag (and the `check` subcommand) to `app`, writing into
// `flags`.
void AddFlags(CLI::App& app, DaemonFlags& flags);

// After parsing: completes `flags.server` with the store the flags chose.
// Fails (a message naming the flag) if they do not fit together.
Status FinishFlags(DaemonFlags& flags);

// Whether --store names a PostgreSQL database (a postgres:// or
// postgresql:// URL, or a key=value connection string).
bool IsPostgres(std::string_view store);

// The PostgreSQL store's options from the flags.
PgOptions PostgresOptions(const DaemonFlags& flags);

// Whether the flags make this daemon a node of a cluster (--advertise).
inline bool IsClusterNode(const DaemonFlags& flags) {
  return !flags.advertise.empty();
}

}  // namespace delayd

#endif  // DELAYD_SERVER_DAEMON_FLAGS_H_
