// delayd: the daemon. Flags (each also read from a DELAYD_* environment
// variable), logging, and a shutdown driven by SIGTERM / SIGINT.
#include <absl/synchronization/mutex.h>
#include <malloc.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>

#include <CLI/CLI.hpp>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <thread>

#include "server/api/server.h"
#include "server/common/duration.h"
#include "server/common/json_log.h"
#include "server/common/limit_log.h"
#include "server/store/rocksdb/check.h"
#include "server/store/rocksdb/rocks_store.h"

namespace {
// Set when the store failed beyond recovery (the exit code says so).
std::atomic<bool> g_store_failed{false};
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"delayd: a delayed-job scheduling daemon"};
  delayd::DelaydServer::Options options;
  delayd::Limits& limits = options.scheduler.limits;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  options.scheduler.partitions = cores;
  options.scheduler.threads = cores;
  std::string tick = "1us";
  std::string max_delay = "3650d";
  std::string shutdown_grace = "5s";
  std::string stream_write_timeout = "30s";
  std::string store_stall_limit = "10s";
  std::string log_level = "info";
  std::string log_format = "text";
  std::string data_dir = "delayd-data";
  std::string fsync = "always";
  bool in_memory = false;
  bool salvage = false;

  // `delayd check`: an offline verifier of a data directory.
  std::string check_dir, check_output = "text";
  auto* check = app.add_subcommand(
      "check",
      "Verify a data directory offline (checksums of every table, every "
      "record, every payload) and exit: 0 whole, 1 damaged, 2 cannot open");
  check->add_option("--data-dir", check_dir, "The data directory")->required();
  check->add_option("-o,--output", check_output, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  app.add_option("--listen", options.listen, "Address to listen on")
      ->envname("DELAYD_LISTEN")
      ->capture_default_str();
  app.add_option("--health-listen", options.health_listen,
                 "Also serve grpc.health.v1 alone, in plaintext, on this "
                 "address (for probes when TLS or tokens are on)")
      ->envname("DELAYD_HEALTH_LISTEN");
  app.add_option("--partitions", options.scheduler.partitions,
                 "Scheduler partitions (default: one per core)")
      ->envname("DELAYD_PARTITIONS")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--threads", options.scheduler.threads,
                 "Scheduler threads (default: one per core)")
      ->envname("DELAYD_THREADS")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--data-dir", data_dir,
                 "Directory of the durable store (created if missing)")
      ->envname("DELAYD_DATA_DIR")
      ->capture_default_str();
  app.add_option("--fsync", fsync,
                 "When writes reach the disk before they are acknowledged: "
                 "always, an interval such as 100ms, or never")
      ->envname("DELAYD_FSYNC")
      ->capture_default_str();
  app.add_option("--backup-dir", options.backup_dir,
                 "Where the Backup call (delayctl backup) writes copies of "
                 "the store (unset: backups are refused)")
      ->envname("DELAYD_BACKUP_DIR");
  app.add_option("--metrics-listen", options.metrics_listen,
                 "Serve Prometheus metrics over plain HTTP at "
                 "http://ADDR/metrics (unset: no metrics endpoint)")
      ->envname("DELAYD_METRICS_LISTEN");
  app.add_option("--metrics-namespace-labels", options.metrics_namespace_labels,
                 "Give each namespace its own metric series (at most "
                 "--max-namespaces); false: one series, summed")
      ->envname("DELAYD_METRICS_NAMESPACE_LABELS")
      ->capture_default_str();
  app.add_flag("--salvage", salvage,
               "Start on a store whose log is damaged in the middle, keeping "
               "what precedes the damage (what follows it is lost)")
      ->envname("DELAYD_SALVAGE");
  app.add_flag("--in-memory", in_memory,
               "Keep no store: everything is lost when delayd stops")
      ->envname("DELAYD_IN_MEMORY");
  app.add_option("--tick", tick,
                 "Timing-wheel tick: timers fire at most this late")
      ->envname("DELAYD_TICK")
      ->capture_default_str();
  app.add_option("--max-key-bytes", limits.max_key_bytes)
      ->envname("DELAYD_MAX_KEY_BYTES")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  app.add_option("--max-namespace-bytes", limits.max_namespace_bytes)
      ->envname("DELAYD_MAX_NAMESPACE_BYTES")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--max-payload-bytes", limits.max_payload_bytes)
      ->envname("DELAYD_MAX_PAYLOAD_BYTES")
      ->check(CLI::Range(0, 16 << 20))
      ->capture_default_str();
  app.add_option("--max-delay", max_delay, "Longest delay accepted")
      ->envname("DELAYD_MAX_DELAY")
      ->capture_default_str();
  app.add_option("--max-pending-timers", limits.max_pending_timers,
                 "Limit on pending timers plus unacknowledged events")
      ->envname("DELAYD_MAX_PENDING_TIMERS")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1'000'000'000}))
      ->capture_default_str();
  app.add_option("--max-batch-ops", limits.max_batch_ops)
      ->envname("DELAYD_MAX_BATCH_OPS")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--max-subscribers", limits.max_subscribers)
      ->envname("DELAYD_MAX_SUBSCRIBERS")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  app.add_option("--max-namespaces", limits.max_namespaces)
      ->envname("DELAYD_MAX_NAMESPACES")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option("--watcher-backlog", limits.watcher_backlog,
                 "Events a watcher may fall behind before it is ended")
      ->envname("DELAYD_WATCHER_BACKLOG")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000}))
      ->capture_default_str();
  app.add_option("--watcher-backlog-bytes", limits.watcher_backlog_bytes,
                 "Bytes a watcher may fall behind before it is ended")
      ->envname("DELAYD_WATCHER_BACKLOG_BYTES")
      ->check(CLI::Range(std::size_t{1} << 16, std::size_t{1} << 32))
      ->capture_default_str();
  app.add_option("--worker-backlog-bytes", limits.worker_backlog_bytes,
                 "Bytes queued for one worker beyond which it gets no more "
                 "events until its stream takes them")
      ->envname("DELAYD_WORKER_BACKLOG_BYTES")
      ->check(CLI::Range(std::size_t{1} << 16, std::size_t{1} << 32))
      ->capture_default_str();
  app.add_option("--stream-write-timeout", stream_write_timeout,
                 "A subscriber stream whose write takes longer is ended (its "
                 "events go to other workers)")
      ->envname("DELAYD_STREAM_WRITE_TIMEOUT")
      ->capture_default_str();
  app.add_option("--store-stall-limit", store_stall_limit,
                 "Health is NOT_SERVING while a write, sync or read of the "
                 "store has run longer than this (a hung disk); 0s: not "
                 "watched")
      ->envname("DELAYD_STORE_STALL_LIMIT")
      ->capture_default_str();
  app.add_option("--shutdown-grace", shutdown_grace,
                 "How long calls in flight get to finish on SIGTERM")
      ->envname("DELAYD_SHUTDOWN_GRACE")
      ->capture_default_str();
  app.add_option("--tls-cert", options.tls.cert,
                 "PEM certificate chain: serve TLS (with --tls-key)")
      ->envname("DELAYD_TLS_CERT");
  app.add_option("--tls-key", options.tls.key, "PEM private key of --tls-cert")
      ->envname("DELAYD_TLS_KEY");
  app.add_option("--tls-client-ca", options.tls.client_ca,
                 "PEM CA certificates: require client certificates signed by "
                 "one of them (mutual TLS)")
      ->envname("DELAYD_TLS_CLIENT_CA");
  app.add_option("--auth-tokens", options.auth_tokens,
                 "Token file (TOKEN NAMESPACES PERMISSIONS per line): "
                 "require a bearer token on every call")
      ->envname("DELAYD_AUTH_TOKENS");
  app.add_option("--max-batch-bytes", options.max_batch_bytes,
                 "Largest Batch request in bytes (gRPC's receive limit)")
      ->envname("DELAYD_MAX_BATCH_BYTES")
      ->check(CLI::Range(std::size_t{1} << 16, std::size_t{1} << 30))
      ->capture_default_str();
  app.add_option("--grpc-memory-bytes", options.grpc_memory_bytes,
                 "Memory gRPC may use for connections and calls in flight")
      ->envname("DELAYD_GRPC_MEMORY_BYTES")
      ->check(CLI::Range(std::size_t{16} << 20, std::size_t{1} << 40))
      ->capture_default_str();
  app.add_option("--max-streams-per-connection",
                 options.max_streams_per_connection,
                 "Concurrent calls and streams one client connection may open")
      ->envname("DELAYD_MAX_STREAMS_PER_CONNECTION")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--log-level", log_level)
      ->envname("DELAYD_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  app.add_option("--log-format", log_format,
                 "text, or json (one object a line)")
      ->envname("DELAYD_LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (*check) return delayd::RunCheck(check_dir, check_output == "json");

  const auto tick_ns = delayd::ParseDuration(tick);
  const auto max_delay_ns = delayd::ParseDuration(max_delay);
  const auto grace_ns = delayd::ParseDuration(shutdown_grace);
  if (!tick_ns || tick_ns->count() <= 0) {
    std::fprintf(stderr, "--tick: not a positive duration: %s\n", tick.c_str());
    return 1;
  }
  if (*tick_ns > std::chrono::seconds(1)) {
    std::fprintf(stderr, "--tick: at most 1s: %s\n", tick.c_str());
    return 1;
  }
  if (!max_delay_ns || max_delay_ns->count() <= 0) {
    std::fprintf(stderr, "--max-delay: not a positive duration: %s\n",
                 max_delay.c_str());
    return 1;
  }
  // Fire times are nanoseconds since 1970 in 64 bits (until 2262): now plus
  // the longest delay must stay far inside that.
  if (*max_delay_ns > delayd::kMaxDelayLimit) {
    std::fprintf(stderr, "--max-delay: at most 36500d (100 years): %s\n",
                 max_delay.c_str());
    return 1;
  }
  if (!grace_ns || grace_ns->count() < 0 || *grace_ns > std::chrono::hours(1)) {
    std::fprintf(stderr, "--shutdown-grace: not a duration from 0 to 1h: %s\n",
                 shutdown_grace.c_str());
    return 1;
  }
  const auto write_timeout_ns = delayd::ParseDuration(stream_write_timeout);
  if (!write_timeout_ns || *write_timeout_ns < std::chrono::milliseconds(100) ||
      *write_timeout_ns > std::chrono::hours(1)) {
    std::fprintf(stderr,
                 "--stream-write-timeout: not a duration from 100ms to 1h: "
                 "%s\n",
                 stream_write_timeout.c_str());
    return 1;
  }
  limits.stream_write_timeout = *write_timeout_ns;
  const auto stall_limit_ns = delayd::ParseDuration(store_stall_limit);
  if (!stall_limit_ns || stall_limit_ns->count() < 0 ||
      *stall_limit_ns > std::chrono::hours(1) ||
      (stall_limit_ns->count() > 0 &&
       *stall_limit_ns < std::chrono::milliseconds(100))) {
    std::fprintf(stderr,
                 "--store-stall-limit: not 0s or a duration from 100ms to 1h: "
                 "%s\n",
                 store_stall_limit.c_str());
    return 1;
  }
  options.store_stall_limit =
      std::chrono::duration_cast<std::chrono::milliseconds>(*stall_limit_ns);
  if (!in_memory) {
    delayd::RocksOptions store;
    store.dir = data_dir;
    store.salvage = salvage;
    options.scheduler.on_store_error = [](const delayd::Status& s) {
      delayd::LogRepeated("store-error", s.message());
    };
    // A failed store write: stop as on SIGTERM (every acknowledged change
    // is in the log, replayed by the next start), with exit code 3 for the
    // supervisor to restart delayd once the disk can write.
    options.scheduler.on_store_write_failure = [](const delayd::Status& s) {
      spdlog::critical("{}: stopping (exit code 3)", s.message());
      g_store_failed.store(true);
      raise(SIGTERM);
    };
    if (delayd::Status s = delayd::ParseFsyncPolicy(fsync, &store); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 1;
    }
    options.scheduler.store = delayd::RocksStoreOpener(store);
  }
  options.scheduler.tick = *tick_ns;
  limits.max_delay = *max_delay_ns;

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

  // Before anything starts: from here on SIGINT and SIGTERM are caught (and
  // kept until the wait below), so a stop requested while delayd is still
  // starting ends it gracefully instead of by the signal's default action.
  asio::io_context signals_io;
  asio::signal_set signals(signals_io, SIGINT, SIGTERM);
  asio::signal_set reload(signals_io, SIGHUP);

  delayd::DelaydServer server(options);
  if (delayd::Status s = server.Start(); !s.ok()) {
    spdlog::error("{}", s.message());
    return 2;
  }
  if (in_memory) {
    spdlog::warn("--in-memory: nothing is kept across a restart");
  } else {
    const auto& r = server.recovery();
    spdlog::info(
        "store {} (fsync {}): recovered {} pending timers ({} overdue, firing "
        "now) and {} unacknowledged events in {} namespaces in {:.3f} s",
        data_dir, fsync, r.timers, r.overdue, r.events, r.namespaces,
        std::chrono::duration<double>(r.took).count());
    for (const std::string& note : r.notes) spdlog::warn("{}", note);
  }
  spdlog::info(
      "delayd listening on {} port {} ({} partitions, tick {} ns, {}, {})",
      options.listen, server.port(), options.scheduler.partitions,
      tick_ns->count(),
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

  signals.async_wait([&](const asio::error_code& ec, int signo) {
    if (ec) return;
    spdlog::info("signal {}: shutting down", signo);
    server.Shutdown(
        std::chrono::duration_cast<std::chrono::milliseconds>(*grace_ns));
    reload.cancel();
  });
  // SIGHUP: the token file and the TLS certificates are read again; what
  // does not load is refused and the old one stays.
  std::function<void()> wait_reload = [&] {
    reload.async_wait([&](const asio::error_code& ec, int) {
      if (ec) return;
      if (delayd::Status s = server.Reload(); s.ok()) {
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
  return g_store_failed.load() ? 3 : 0;
}
