#include "server/daemon_flags.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "delayd/text/duration.h"
#include "server/api/tls.h"
#include "server/common/limit_log.h"
#include "server/store/rocksdb/rocks_store.h"

namespace delayd {
namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

// DELAYD_MAX_KEY_BYTES for --max-key-bytes.
std::string EnvName(const std::string& flag) {
  std::string env = "DELAYD_";
  for (char c : flag.substr(2)) {
    env += c == '-' ? '_' : static_cast<char>(std::toupper(c));
  }
  return env;
}

// A flag read from the command line or its environment variable, its
// default shown in --help.
template <typename T>
CLI::Option* Flag(CLI::App& app, const std::string& name, T& value,
                  const std::string& help = "") {
  return app.add_option(name, value, help)
      ->envname(EnvName(name))
      ->capture_default_str();
}

// A duration flag ("1h30m"): read into `out`, refused unless it lies in
// [min, max] (or is zero, if `zero` says what zero means).
template <typename D>
CLI::Option* DurationFlag(CLI::App& app, const std::string& name, D& out,
                          const std::string& text, nanoseconds min,
                          nanoseconds max, const std::string& help,
                          const char* zero = nullptr) {
  auto in_range = [=](const std::string& s) -> std::string {
    const auto d = ParseDuration(s);
    if (d && d->count() == 0 && zero != nullptr) return "";
    if (!d || *d < min || *d > max) {
      return "not " + std::string(zero ? "0s or " : "") + "a duration from " +
             FormatDuration(min) + " to " + FormatDuration(max) +
             " (such as 1h30m, 500ms): " + s;
    }
    return "";
  };
  return app
      .add_option_function<std::string>(
          name,
          [&out](const std::string& s) {
            out = std::chrono::duration_cast<D>(*ParseDuration(s));
          },
          help)
      ->check(CLI::Validator(in_range, "DURATION"))
      ->envname(EnvName(name))
      ->default_str(text);
}

void AddLimits(CLI::App& app, Limits& l, DaemonFlags& f) {
  Flag(app, "--max-key-bytes", l.max_key_bytes)->check(CLI::Range(1, 65535));
  Flag(app, "--max-namespace-bytes", l.max_namespace_bytes)
      ->check(CLI::Range(1, 1024));
  Flag(app, "--max-payload-bytes", l.max_payload_bytes)
      ->check(CLI::Range(0, 16 << 20));
  // Fire times are nanoseconds since 1970 in 64 bits (until 2262): now plus
  // the longest delay must stay far inside that.
  DurationFlag(app, "--max-delay", l.max_delay, "3650d", nanoseconds(1),
               kMaxDelayLimit, "Longest delay accepted (at most 36500d)");
  Flag(app, "--max-pending-timers", l.max_pending_timers,
       "Limit on pending timers plus unacknowledged events")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1'000'000'000}));
  Flag(app, "--max-batch-ops", l.max_batch_ops)->check(CLI::Range(1, 100000));
  Flag(app, "--max-subscribers", l.max_subscribers)
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}));
  Flag(app, "--max-namespaces", l.max_namespaces)->check(CLI::Range(1, 65536));
  Flag(app, "--watcher-backlog", l.watcher_backlog,
       "Events a watcher may fall behind before it is ended")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}));
  Flag(app, "--watcher-backlog-bytes", l.watcher_backlog_bytes,
       "Bytes a watcher may fall behind before it is ended")
      ->check(CLI::Range(std::size_t{1} << 16, std::size_t{1} << 32));
  Flag(app, "--worker-backlog-bytes", l.worker_backlog_bytes,
       "Bytes queued for one worker beyond which it gets no more events "
       "until its stream takes them")
      ->check(CLI::Range(std::size_t{1} << 16, std::size_t{1} << 32));
  DurationFlag(app, "--stream-write-timeout", l.stream_write_timeout, "30s",
               milliseconds(100), hours(1),
               "A subscriber stream whose write takes longer is ended (its "
               "events go to other workers)");
  Flag(app, "--max-schedules", l.max_schedules,
       "Recurring schedules per namespace")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1'000'000}));
  Flag(app, "--max-dedup-keys", l.max_dedup_keys,
       "Keys remembered for dedup windows, daemon-wide (at the bound, those "
       "whose window ends soonest go first)")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{100'000'000}));
  DurationFlag(app, "--min-schedule-interval", l.min_schedule_interval, "1s",
               milliseconds(1), hours(24),
               "The shortest interval a schedule's `every` may have");
  Flag(app, "--max-batch-bytes", f.server.max_batch_bytes,
       "Largest Batch request in bytes (gRPC's receive limit)")
      ->check(CLI::Range(std::size_t{1} << 16, std::size_t{1} << 30));
  Flag(app, "--grpc-memory-bytes", f.server.grpc_memory_bytes,
       "Memory gRPC may use for connections and calls in flight")
      ->check(CLI::Range(std::size_t{16} << 20, std::size_t{1} << 40));
  Flag(app, "--max-streams-per-connection", f.server.max_streams_per_connection,
       "Concurrent calls and streams one client connection may open")
      ->check(CLI::Range(1, 100000));
}

void AddStore(CLI::App& app, DaemonFlags& f) {
  Flag(app, "--store", f.store,
       "The store: a PostgreSQL connection string or URL (postgres://...; "
       "libpq's forms, PG* variables and PGPASSFILE work); unset: RocksDB "
       "in --data-dir");
  Flag(app, "--node-id", f.node_id,
       "This daemon's name in the store (default: the host's name)");
  Flag(app, "--advertise", f.advertise,
       "Makes this daemon a node of a cluster on the PostgreSQL --store: "
       "the address (host:port) the other nodes reach its gRPC port at "
       "(port 0: the port it listens on). --node-id must then be unique "
       "among the nodes, and --cluster-token-file is required");
  Flag(app, "--cluster-token-file", f.cluster_token_file,
       "A cluster node: the file holding the token the nodes present to "
       "each other when one forwards a call to the owner of its key (the "
       "same on every node; at least 16 characters, no spaces). Its holder "
       "may do anything: keep it secret");
  Flag(app, "--peer-ca", f.server.peer_ca,
       "A cluster node serving TLS: PEM CA certificates that signed the "
       "other nodes' certificates (default: --tls-client-ca)");
  DurationFlag(app, "--lease-ttl", f.lease_ttl, "5s", milliseconds(1000),
               std::chrono::minutes(1),
               "A cluster node's partition leases: how long one outlives "
               "the node's last renewal (a failed node's partitions move "
               "after at most this)");
  Flag(app, "--data-dir", f.data_dir,
       "Directory of the RocksDB store (created if missing)");
  Flag(app, "--fsync", f.fsync,
       "When writes reach the disk before they are acknowledged: always, an "
       "interval such as 100ms, or never")
      ->check(CLI::Validator(
          [](const std::string& s) -> std::string {
            RocksOptions o;
            return ParseFsyncPolicy(s, &o).ok()
                       ? ""
                       : "expected always, never or a positive interval such "
                         "as 100ms, not '" +
                             s + "'";
          },
          "POLICY"));
  app.add_flag("--salvage", f.salvage,
               "Start on a store whose log is damaged in the middle, keeping "
               "what precedes the damage (what follows it is lost)")
      ->envname("DELAYD_SALVAGE");
  app.add_flag("--fixed-event-ids", f.fixed_event_ids,
               "RocksDB: a fired timer's event id is its version, the same "
               "if it fires again after a crash, and its event leaves as "
               "soon as its firing is queued (ids are then not in firing "
               "order); recorded in the store")
      ->envname("DELAYD_FIXED_EVENT_IDS");
  DurationFlag(app, "--fsync-gather", f.fsync_gather, "0s", microseconds(10),
               milliseconds(10),
               "The RocksDB store under --fsync always, while callers that do "
               "not wait for one another keep the disk syncing: the least "
               "time from one sync to the next, so that one sync covers more "
               "writes (fewer syncs, each answer later by at most this); 0s: "
               "each sync at once",
               "each sync at once");
  app.add_flag("--in-memory", f.in_memory,
               "Keep no store: everything is lost when delayd stops")
      ->envname("DELAYD_IN_MEMORY");
  Flag(app, "--backup-dir", f.server.backup_dir,
       "Where the Backup call (delayctl backup) writes copies of the store "
       "(unset: backups are refused)");
  DurationFlag(app, "--store-stall-limit", f.server.store_stall_limit, "10s",
               milliseconds(100), hours(1),
               "Health is NOT_SERVING while a write, sync or read of the store "
               "has run longer than this (a hung disk); 0s: not watched",
               "not watched");
}

void AddSecurity(CLI::App& app, DaemonFlags& f) {
  Flag(app, "--tls-cert", f.server.tls.cert,
       "PEM certificate chain: serve TLS (with --tls-key)");
  Flag(app, "--tls-key", f.server.tls.key, "PEM private key of --tls-cert");
  Flag(app, "--tls-client-ca", f.server.tls.client_ca,
       "PEM CA certificates: require client certificates signed by one of "
       "them (mutual TLS)");
  Flag(app, "--auth-tokens", f.server.auth_tokens,
       "Token file (TOKEN NAMESPACES PERMISSIONS per line): require a bearer "
       "token on every call");
  app.add_option("--push-allow", f.push_allow,
                 "Push targets may reach this address, range (CIDR) or host "
                 "name although it is loopback, private, link-local, "
                 "multicast or unspecified (repeatable; the variable takes a "
                 "comma-separated list)")
      ->envname("DELAYD_PUSH_ALLOW")
      ->delimiter(',');
  app.add_flag("--push-allow-http", f.server.push.allow_http,
               "Push targets may be plain http:// URLs (else https only)")
      ->envname("DELAYD_PUSH_ALLOW_HTTP");
}

}  // namespace

void AddFlags(CLI::App& app, DaemonFlags& f) {
  DelaydServer::Options& o = f.server;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  o.scheduler.partitions = cores;
  o.scheduler.threads = cores;
  // The kernel reports the clock's steps and resumes (Options::clock_poll),
  // and every post from another thread wakes a loop (loop_server.h): both
  // bounds are nets, and each of their wake-ups costs an idle daemon CPU.
  o.scheduler.clock_poll = std::chrono::seconds(10);
  o.loop_max_wait = std::chrono::minutes(1);

  f.check = app.add_subcommand(
      "check",
      "Verify a data directory offline (checksums of every table, every "
      "record, every payload) and exit: 0 whole, 1 damaged, 2 cannot open");
  f.check->add_option("--data-dir", f.check_dir, "The data directory");
  f.check
      ->add_option("--store", f.check_store,
                   "A PostgreSQL store (its tools check it: the message "
                   "says which)")
      ->envname("DELAYD_STORE");
  f.check->add_option("-o,--output", f.check_output, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  f.migrate = app.add_subcommand(
      "migrate",
      "Create or migrate the PostgreSQL store's schema (--store) and exit; "
      "delayd also does it when it starts. Only what nodes of the previous "
      "release work beside: safe to run ahead of a rolling upgrade");
  f.migrate->add_option("--store", f.store, "A PostgreSQL connection string")
      ->envname("DELAYD_STORE")
      ->required();
  f.migrate
      ->add_option("--partitions", f.partitions,
                   "Logical partitions, when the schema is created")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();

  Flag(app, "--listen", o.listen, "Address to listen on");
  Flag(app, "--health-listen", o.health_listen,
       "Also serve grpc.health.v1 alone, in plaintext, on this address (for "
       "probes when TLS or tokens are on)");
  Flag(app, "--partitions", o.scheduler.partitions,
       "Scheduler partitions (default: one per core)")
      ->check(CLI::Range(1, 1024));
  Flag(app, "--threads", o.scheduler.threads,
       "Scheduler threads (default: one per core); under --threading loop, "
       "the threads that read payloads from the store")
      ->check(CLI::Range(1, 256));
  Flag(app, "--threading", f.threading,
       "pool: calls on gRPC's threads, the scheduler's work on a pool of "
       "--threads; loop: every call and the scheduler's work on one thread "
       "(least CPU per timer)")
      ->check(CLI::IsMember({"pool", "loop"}));
  Flag(app, "--loop-queues", o.loop_queues,
       "Under --threading loop: how many loops, each a thread polling a "
       "completion queue of its own (gRPC gives a connection's calls to one "
       "of them); all run the scheduler's work")
      ->check(CLI::Range(1, 64));
  AddStore(app, f);
  Flag(app, "--metrics-listen", o.metrics_listen,
       "Serve Prometheus metrics over plain HTTP at http://ADDR/metrics "
       "(unset: no metrics endpoint)");
  Flag(app, "--metrics-namespace-labels", o.metrics_namespace_labels,
       "Give each namespace its own metric series (at most --max-namespaces); "
       "false: one series, summed");
  Flag(app, "--http-listen", f.http.listen,
       "Serve the HTTP/JSON API on this address, IPv4 host:port (unset: no "
       "HTTP door)");
  Flag(app, "--http-threads", f.http.threads,
       "Threads of the HTTP door's event loop (no thread waits on a client "
       "or a call)")
      ->check(CLI::Range(1, 64));
  Flag(app, "--http-max-connections", f.http.max_connections,
       "HTTP connections open at once; one more closes the oldest idle one "
       "(or the slowest request), or is refused if every one is busy")
      ->check(CLI::Range(16, 1000000));
  Flag(app, "--http-max-watches", f.http.max_watches,
       "Server-Sent Events watches open at once on the HTTP door")
      ->check(CLI::Range(1, 100000));
  Flag(app, "--http-cors-origin", f.http.cors_origins,
       "Let web pages from this origin (scheme://host[:port], or * for any) "
       "call the HTTP API from a browser; repeat it or separate origins with "
       "commas (unset: browsers refuse cross-origin calls)")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& origin) -> std::string {
            const bool web =
                origin.starts_with("http://") || origin.starts_with("https://");
            const auto host = origin.find("://");
            if (origin == "*" ||
                (web && origin.size() > host + 3 &&
                 origin.find('/', host + 3) == std::string::npos)) {
              return "";
            }
            return "an origin is scheme://host[:port] (no path) or *";
          },
          "ORIGIN"));
  DurationFlag(app, "--http-request-timeout", f.http.request_timeout, "10s",
               milliseconds(100), std::chrono::minutes(5),
               "Time an HTTP request's headers and body get to arrive, from "
               "its first byte");
  DurationFlag(app, "--http-idle-timeout", f.http.idle_timeout, "60s",
               milliseconds(100), std::chrono::hours(1),
               "How long an idle keep-alive HTTP connection is kept");
  DurationFlag(app, "--tick", o.scheduler.tick, "1us", nanoseconds(1),
               seconds(1), "Timing-wheel tick: timers fire at most this late");
  AddLimits(app, o.scheduler.limits, f);
  DurationFlag(app, "--shutdown-grace", f.shutdown_grace, "5s", nanoseconds(0),
               hours(1), "How long calls in flight get to finish on SIGTERM",
               "none");
  AddSecurity(app, f);
  Flag(app, "--log-level", f.log_level)
      ->check(
          CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  Flag(app, "--log-format", f.log_format, "text, or json (one object a line)")
      ->check(CLI::IsMember({"text", "json"}));
}

bool IsPostgres(std::string_view store) {
  return store.starts_with("postgres://") ||
         store.starts_with("postgresql://") ||
         store.find('=') != std::string_view::npos;
}

PgOptions PostgresOptions(const DaemonFlags& f) {
  PgOptions o;
  o.conninfo = f.store;
  o.partitions = f.partitions;
  if (!f.node_id.empty()) {
    o.node = f.node_id;
  } else {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0 && host[0] != '\0') {
      o.node = host;
    }
  }
  o.readers = static_cast<int>(std::max(2u, f.server.scheduler.threads));
  o.shared = IsClusterNode(f);
  return o;
}

namespace {

// Node-to-node calls are never open: a cluster node needs the token.
Status ReadClusterToken(DaemonFlags& f) {
  const std::string flag = "--cluster-token-file";
  if (f.cluster_token_file.empty()) {
    return Status::InvalidArgument(
        "--advertise: a cluster node needs " + flag +
        " (the token the nodes present to each other)");
  }
  std::string text;
  if (!ReadFile(f.cluster_token_file, &text)) {
    return Status::InvalidArgument(flag + ": cannot read " +
                                   f.cluster_token_file);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) {
    text.pop_back();
  }
  const bool printable = std::all_of(text.begin(), text.end(),
                                     [](char c) { return c > ' ' && c < 127; });
  if (text.size() < 16 || !printable) {
    return Status::InvalidArgument(
        flag + ": the token must be at least 16 printable characters " +
        "without spaces, on one line");
  }
  f.server.peer_token = std::move(text);
  f.server.node = PostgresOptions(f).node;
  return Status::Ok();
}

}  // namespace

Status FinishFlags(DaemonFlags& f) {
  f.server.loop = f.threading == "loop";
  if (f.server.loop_queues != 1 && !f.server.loop) {
    return Status::InvalidArgument("--loop-queues: needs --threading loop");
  }
  // A JSON body carries bytes in base64 (4/3 of them) and field names: room
  // for the largest Batch the gRPC port takes.
  f.http.max_body_bytes = 2 * f.server.max_batch_bytes + (64 << 10);
  if (Status s = push::AddressRules::Parse(f.push_allow, &f.server.push.rules);
      !s.ok()) {
    return s;
  }
  if (IsClusterNode(f) && (f.in_memory || !IsPostgres(f.store))) {
    return Status::InvalidArgument(
        "--advertise: a cluster's nodes share a PostgreSQL --store");
  }
  if (IsClusterNode(f)) {
    if (Status s = ReadClusterToken(f); !s.ok()) return s;
  }
  if (f.fixed_event_ids && (f.in_memory || !f.store.empty())) {
    return Status::InvalidArgument(
        "--fixed-event-ids: only the RocksDB store (--data-dir) fixes event "
        "ids");
  }
  if (f.fsync_gather.count() > 0 &&
      (f.in_memory || !f.store.empty() || f.fsync != "always")) {
    return Status::InvalidArgument(
        "--fsync-gather: only the RocksDB store (--data-dir) under --fsync "
        "always gathers syncs");
  }
  if (f.in_memory) return Status::Ok();
  f.server.scheduler.on_store_error = [](const Status& s) {
    LogRepeated("store-error", s.message());
  };
  if (!f.store.empty()) {
    if (!IsPostgres(f.store)) {
      return Status::InvalidArgument(
          "--store: not a PostgreSQL connection string or URL (postgres://"
          "...); for RocksDB give --data-dir");
    }
    f.server.scheduler.store = PgStoreOpener(PostgresOptions(f));
    return Status::Ok();
  }
  RocksOptions store;
  store.dir = f.data_dir;
  store.salvage = f.salvage;
  store.fixed_event_ids = f.fixed_event_ids;
  if (Status s = ParseFsyncPolicy(f.fsync, &store); !s.ok()) return s;
  store.sync_gather = f.fsync_gather;
  f.server.scheduler.store = RocksStoreOpener(store);
  return Status::Ok();
}

}  // namespace delayd
