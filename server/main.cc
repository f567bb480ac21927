// delayd: the daemon. Flags (daemon_flags.h), logging, the start-up's log
// lines, and a shutdown driven by SIGTERM / SIGINT.
#include <absl/synchronization/mutex.h>
#include <malloc.h>
#include <openssl/crypto.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>

#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>

#include "delayd/text/build_info.h"
#include "server/api/server.h"
#include "server/cluster_node.h"
#include "server/common/json_log.h"
#include "server/daemon_flags.h"
#include "server/store/postgres/pg_join.h"
#include "server/store/postgres/pg_schema.h"
#include "server/store/rocksdb/check.h"

namespace {
// Set when the store failed beyond recovery (the exit code says so).
std::atomic<bool> g_store_failed{false};
// Set when another process took this cluster node's id (exit code 2).
std::atomic<bool> g_evicted{false};

// The log (stdout, UTC), and the process settings the daemon runs best with.
void SetUpProcess(const delayd::DaemonFlags& flags) {
  const std::string& log_format = flags.log_format;
  const std::string& log_level = flags.log_level;
  auto logger = spdlog::stdout_logger_mt("delayd");
  if (log_format == "json") {
    // %* is the message escaped for JSON (json_log.h).
    auto formatter = std::make_unique<spdlog::pattern_formatter>(
        spdlog::pattern_time_type::utc);
    formatter->add_flag<delayd::JsonEscapedMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":"%*"})");
    logger->set_formatter(std::move(formatter));
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l %v",
                        spdlog::pattern_time_type::utc);
  }
  logger->set_level(spdlog::level::from_str(log_level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  delayd::RouteProtobufLogsToSpdlog();

  // Timers wake this process as precisely as the kernel allows (the default
  // slack of 50 us would be most of the lateness budget). Threads started
  // from here on inherit it.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);

  // Debian builds Abseil without NDEBUG, which leaves absl::Mutex's deadlock
  // detection on: every lock and unlock inside gRPC then updates a global
  // lock-order graph (a few percent of the daemon's CPU under load). delayd
  // takes no absl::Mutex of its own, and gRPC's lock order is gRPC's to test.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

#ifdef __GLIBC__
  // glibc raises its mmap threshold to the largest block freed so far (up to
  // 32 MiB), after which big transient buffers (a large Batch's protobuf
  // arena, RocksDB's compaction buffers) come from the heaps and leave them
  // fragmented: resident memory that is never given back. A fixed threshold
  // maps such blocks on their own and unmaps them when freed. Measured: RSS
  // per pending timer with 1 KiB payloads 205-208 -> 170-180 B.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  mallopt(M_TRIM_THRESHOLD, 128 * 1024);
#endif
}

// What the start found and what it runs with, in the log.
void LogStart(const delayd::DaemonFlags& flags,
              const delayd::DelaydServer& server) {
  const delayd::DelaydServer::Options& options = flags.server;
  const delayd::Limits& limits = options.scheduler.limits;
  if (flags.in_memory) {
    spdlog::warn("--in-memory: nothing is kept across a restart");
  } else {
    const auto& r = server.recovery();
    spdlog::info(
        "{}: recovered {} pending timers ({} overdue, firing now) and {} "
        "unacknowledged events in {} namespaces in {:.3f} s",
        flags.store.empty()
            ? "store " + flags.data_dir + " (fsync " + flags.fsync + ")"
            : r.store,
        r.timers, r.overdue, r.events, r.namespaces,
        std::chrono::duration<double>(r.took).count());
    for (const std::string& note : r.notes) spdlog::warn("{}", note);
  }
  spdlog::info(
      "delayd listening on {} port {} ({} partitions, tick {} ns, {}, {})",
      options.listen, server.port(), server.scheduler().partitions(),
      options.scheduler.tick.count(),
      options.tls.cert.empty()
          ? "plaintext"
          : (options.tls.client_ca.empty() ? "TLS" : "mutual TLS"),
      options.auth_tokens.empty() ? "no tokens" : "tokens required");
  if (server.metrics_port() != 0) {
    spdlog::info("metrics on http://{}/metrics (port {}{})",
                 options.metrics_listen, server.metrics_port(),
                 options.metrics_namespace_labels ? "" : ", namespaces summed");
  }
  spdlog::info(
      "limits: key {} B, namespace {} B, payload {} B, delay {} s, pending "
      "timers {}, batch {} operations and {} B, subscribers {}, namespaces "
      "{}, watcher backlog {} events and {} B, worker backlog {} B, stream "
      "write timeout {} s, gRPC memory {} B, {} streams per connection",
      limits.max_key_bytes, limits.max_namespace_bytes,
      limits.max_payload_bytes,
      std::chrono::duration_cast<std::chrono::seconds>(limits.max_delay)
          .count(),
      limits.max_pending_timers, limits.max_batch_ops, options.max_batch_bytes,
      limits.max_subscribers, limits.max_namespaces, limits.watcher_backlog,
      limits.watcher_backlog_bytes, limits.worker_backlog_bytes,
      std::chrono::duration<double>(limits.stream_write_timeout).count(),
      options.grpc_memory_bytes, options.max_streams_per_connection);
  if (!options.health_listen.empty()) {
    spdlog::info(
        "health checks (plaintext, health service only) on {} (port {})",
        options.health_listen, server.health_port());
  }
  if (!server.secured() && !delayd::IsLoopback(options.listen)) {
    spdlog::warn(
        "listening on {} with neither TLS nor tokens: anyone who can reach "
        "this port can read, change and drain every namespace (see "
        "--tls-cert and --auth-tokens)",
        options.listen);
  }
}

// Before a node serves: whether it may be one (pg_join.h). Its token must
// be the cluster's and its node id must not be held by a live process.
delayd::Status MayJoin(const delayd::DaemonFlags& flags,
                       const std::string& instance) {
  const delayd::PgOptions pg = delayd::PostgresOptions(flags);
  delayd::pg::Conn conn = delayd::pg::ConnectTo(pg.conninfo);
  if (PQstatus(conn.get()) != CONNECTION_OK) {
    return delayd::Status::Unavailable("cannot reach the database: " +
                                       delayd::pg::ErrorOf(conn.get()));
  }
  delayd::pg::Schema schema;
  if (delayd::Status s =
          delayd::pg::Migrate(conn.get(), pg.partitions, &schema);
      !s.ok()) {
    return s;
  }
  if (delayd::Status s =
          delayd::pg::CheckClusterToken(conn.get(), flags.server.peer_token);
      !s.ok()) {
    return s;
  }
  return delayd::pg::ClaimNodeId(
      conn.get(), pg.node, instance, flags.advertise, flags.lease_ttl,
      [](const std::string& why) { spdlog::warn("{}", why); });
}

// Joins the cluster: the node's lease keeper, its gains and losses told to
// the scheduler and its owners to the forwarder.
std::unique_ptr<delayd::ClusterNode> StartCluster(
    const delayd::DaemonFlags& flags, const std::string& instance,
    delayd::DelaydServer& server) {
  const delayd::PgOptions pg = delayd::PostgresOptions(flags);
  delayd::pg::LeaseKeeper::Options keeper;
  keeper.conninfo = pg.conninfo;
  keeper.node = pg.node;
  keeper.instance = instance;
  // Another process took the node id while this one was cut off from the
  // database: it stops, leaving the id (and the leases) to that one.
  keeper.on_evicted = [](const std::string& why) {
    spdlog::critical("{}: stopping (exit code 2)", why);
    g_evicted.store(true);
    raise(SIGTERM);
  };
  keeper.advertise = flags.advertise;
  // (Port 0: the port the server listens on.)
  if (keeper.advertise.ends_with(":0")) {
    keeper.advertise.resize(keeper.advertise.size() - 1);
    keeper.advertise += std::to_string(server.port());
  }
  keeper.partitions = static_cast<int>(server.scheduler().partitions());
  keeper.terms.ttl = flags.lease_ttl;
  keeper.terms.margin = flags.lease_ttl / 5;
  auto cluster = std::make_unique<delayd::ClusterNode>(
      keeper, server.scheduler(), server.forwarder(),
      [&server](bool serving, const std::string& why) {
        server.SetClusterHealth(serving, why);
      });
  cluster->Start();
  server.SetClusterView(cluster.get());
  spdlog::info(
      "cluster node '{}' (peers reach it at {}): {} partitions, leases of {} "
      "ms",
      keeper.node, keeper.advertise, keeper.partitions,
      keeper.terms.ttl.count());
  return cluster;
}

}  // namespace

int main(int argc, char** argv) {
  // As delayctl's main says: each thread frees its own OpenSSL state as it
  // ends, and a thread that ends after exit's clean-up leaks nothing.
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  CLI::App app{"delayd: a delayed-job scheduling daemon"};
  delayd::DaemonFlags flags;
  delayd::AddFlags(app, flags);
  app.set_version_flag("--version", delayd::VersionLine("delayd"),
                       "Print delayd's version and commit, and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help exits 0; a flag that does not parse or fit exits 1.
    return app.exit(e) == 0 ? 0 : 1;
  }
  if (*flags.check) {
    if (!flags.check_store.empty()) {
      std::fprintf(stderr,
                   "delayd check verifies a RocksDB data directory. A "
                   "PostgreSQL store is checked with PostgreSQL's tools: "
                   "pg_amcheck (with data checksums on), and a restore of "
                   "pg_dump or of a base backup to test backups\n");
      return 2;
    }
    if (flags.check_dir.empty()) {
      std::fprintf(stderr, "delayd check: --data-dir is required\n");
      return 2;
    }
    return delayd::RunCheck(flags.check_dir, flags.check_output == "json");
  }
  if (*flags.migrate) {
    std::string report;
    const delayd::Status s =
        delayd::MigratePostgres(delayd::PostgresOptions(flags), &report);
    std::fprintf(s.ok() ? stdout : stderr, "%s\n",
                 s.ok() ? report.c_str() : s.message().c_str());
    return s.ok() ? 0 : 2;
  }
  if (delayd::Status s = delayd::FinishFlags(flags); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  // A failed store write: stop as on SIGTERM (every acknowledged change is
  // kept by the store, replayed by the next start), with exit code 3 for
  // the supervisor to restart delayd once the store can write.
  flags.server.scheduler.on_store_write_failure = [](const delayd::Status& s) {
    spdlog::critical("{}: stopping (exit code 3)", s.message());
    g_store_failed.store(true);
    raise(SIGTERM);
  };
  SetUpProcess(flags);
  spdlog::info("{} starting", delayd::VersionLine("delayd"));
  if (!flags.in_memory && !flags.store.empty()) {
    // A database not reachable yet (it starts beside delayd, or fails
    // over) is waited for here, not by exiting into a restart loop.
    // SIGINT and SIGTERM still end delayd at once: nothing has started.
    delayd::WaitForPostgres(
        delayd::PostgresOptions(flags), [](const std::string& why) {
          spdlog::warn(
              "{}; waiting for the database (trying again, backing "
              "off to 1 s)",
              why);
        });
  }

  // Before anything starts: from here on SIGINT and SIGTERM are caught (and
  // kept until the wait below), so a stop requested while delayd is still
  // starting ends it gracefully instead of by the signal's default action.
  asio::io_context signals_io;
  asio::signal_set signals(signals_io, SIGINT, SIGTERM);
  asio::signal_set reload(signals_io, SIGHUP);

  const std::string instance = delayd::pg::NewInstanceId();
  if (delayd::IsClusterNode(flags)) {
    if (delayd::Status s = MayJoin(flags, instance); !s.ok()) {
      spdlog::error("refusing to join the cluster as node '{}': {}",
                    delayd::PostgresOptions(flags).node, s.message());
      return 2;
    }
  }
  delayd::DelaydServer server(flags.server);
  if (delayd::Status s = server.Start(); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  LogStart(flags, server);
  std::unique_ptr<delayd::ClusterNode> cluster;
  if (delayd::IsClusterNode(flags)) {
    cluster = StartCluster(flags, instance, server);
  }
  std::unique_ptr<delayd::http::HttpDoor> http;
  // The HTTP door serves TLS with the gRPC port's certificates.
  auto http_tls = [&server] {
    const auto pem = server.tls()->current();
    return delayd::http::TlsPem{pem.cert, pem.key, pem.client_ca};
  };
  if (server.tls() != nullptr) flags.http.tls = http_tls();
  if (!flags.http.listen.empty()) {
    if (grpc::Status s = delayd::http::HttpDoor::Start(
            flags.http, server.InProcessChannel(), &http);
        !s.ok()) {
      spdlog::error("{}", s.error_message());
      server.Shutdown(std::chrono::milliseconds(0));
      return 2;
    }
    spdlog::info(
        "HTTP/JSON API on {}://{}/v1 (port {}, {} threads, up to {} "
        "connections)",
        flags.http.tls ? "https" : "http", flags.http.listen, http->port(),
        flags.http.threads, flags.http.max_connections);
    if (flags.server.auth_tokens.empty() &&
        !delayd::IsLoopback(flags.http.listen)) {
      spdlog::warn(
          "HTTP on {} without tokens: anyone who can reach this port can "
          "read, change and drain every namespace (see --auth-tokens)",
          flags.http.listen);
    }
  }

  signals.async_wait([&](const asio::error_code& ec, int signo) {
    if (ec) return;
    spdlog::info("signal {}: shutting down", signo);
    server.Shutdown(std::chrono::duration_cast<std::chrono::milliseconds>(
        flags.shutdown_grace));
    // Its writes finished, the node gives its leases back: the others take
    // its partitions at their next round.
    if (cluster) {
      cluster->Stop(/*release=*/!g_store_failed.load() && !g_evicted.load());
    }
    reload.cancel();
  });
  // SIGHUP: the token file and the TLS certificates are read again; what
  // does not load is refused and the old one stays.
  std::function<void()> wait_reload = [&] {
    reload.async_wait([&](const asio::error_code& ec, int) {
      if (ec) return;
      delayd::Status s = server.Reload();
      // (A set that did not load was not published: the HTTP door gets
      // the set in use either way.)
      if (http && server.tls() != nullptr) {
        if (grpc::Status h = http->SetTls(http_tls()); !h.ok()) {
          spdlog::error("SIGHUP: {}", h.error_message());
        }
      }
      if (s.ok()) {
        spdlog::info("SIGHUP: tokens and certificates reloaded");
      } else {
        spdlog::error("SIGHUP: {}; keeping what was in use", s.message());
      }
      wait_reload();
    });
  };
  wait_reload();
  signals_io.run();
  spdlog::info("delayd stopped");
  if (g_evicted.load()) return 2;
  return g_store_failed.load() ? 3 : 0;
}
