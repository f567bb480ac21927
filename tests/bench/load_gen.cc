// Load generator for the delayd daemon. Starts the real binary on 127.0.0.1
// (OS-picked port) and measures, in one run against one daemon:
//   unary     SetTimer/s vs grpc.health.v1 Check/s (a trivial RPC on the
//             same server), the same concurrency for both;
//   batch     SetTimer items/s through Batch (100 per call, calls in flight);
//   lateness  delivered-to-worker minus fire time: steady 2k timers/s (one
//             SetTimer at a time, --steady-delay-ms ahead, default 50; with
//             the daemon's CPU, by thread too, its WAL syncs per timer
//             (from its metrics, which load_gen turns on), and first what
//             the same daemon spends on health Checks at that pace), and
//             100k timers due within one second;
//             `steady` alone runs the first; the worker acks with Ack
//             calls, or with --work-acks on its Work stream;
//   memory    RSS per pending timer with 1M pending (16 B key, 16 B payload);
//   idle      daemon CPU over 10 s idle with those 1M pending.
// Those run against one daemon started with the given daemon args (default
// --in-memory; args that name no store, such as `--fsync 1s`, get a fresh
// data directory under --scratch, removed after). Then, each starting its
// own daemons over a fresh data directory:
//   durability  SetTimer/s and Batch items/s under --fsync always, 100ms and
//               never, as ratios of --in-memory (alternating rounds);
//   payload     RSS per pending timer, 1M timers, 16 B vs 1 KiB payloads;
//   churn       data directory size through millions of set/move/remove on
//               the same keys;
//   recovery    start-up time with 1M and 10M pending timers.
//   schedules   (not run unless named) recurring schedules against one-shot
//               timers: RSS, a burst of 10k runs and start-up with 1M
//               (--rounds N of each of the last two, default 3); one of
//               them alone as schedules-memory, -burst or -restart
//               (load_gen_schedule.cc).
//   http        (not run unless named) the HTTP door's SetTimer and Batch
//               against the gRPC port's (load_gen_http.cc).
// Every loop is bounded in time and count; only loopback is used.
//
//   security    SetTimer/s and Batch items/s with TLS and tokens, as ratios
//               of plaintext (alternating, 3 rounds or --rounds N);
//   ab          with --daemon-b: two builds side by side (alternating, 5
//               rounds or --rounds N), with the daemon args (default
//               --in-memory; without it, each round on a fresh data
//               directory);
//   ab-firing   as ab, firing only (not run unless named); --fire N timers
//               per round (default 200k).
// security and ab also print the daemon's CPU time per operation, and ab
// each firing round's cores by thread over the burst.
//
// Usage: load_gen [--daemon PATH] [--daemon-b PATH] [--b-arg ARG]...
//                 [--seconds N] [--rounds N] [--fire N] [--only NAME]
//                 [--scratch DIR] [-- daemon args]
// (--b-arg: an argument given to --daemon-b's daemon only.) Anything else
// is refused with this usage.
#include "tests/bench/bench_client.h"
#include "tests/bench/sections.h"
#include "tests/common/metrics_scrape.h"

namespace delayd::bench {
namespace {

// Syncs of the store's write-ahead log so far (-1 without metrics or
// without a log: an in-memory daemon has none).
double WalSyncs(int metrics_port) {
  if (metrics_port == 0) return -1;
  return delayd::testing::Metric(metrics_port,
                                 "delayd_store_wal_sync_seconds_count");
}

// The floor under the steady run's CPU: what the same daemon spends on
// `calls` health Checks paced at 4k/s, one at a time (a timer's SetTimer and
// its Ack are two unary calls; its event is a stream write on top). Any gRPC
// server pays this per call at that pace; delayd's own work comes on top.
void SteadyHealthFloor(Bench& bench, pid_t daemon, std::size_t calls) {
  const double cpu = CpuSeconds(daemon);
  const auto start = Clock::now();
  for (std::size_t i = 0; i < calls; ++i) {
    std::this_thread::sleep_until(start + std::chrono::microseconds(250 * i));
    CheckOnce(bench.health());
  }
  const double wall =
      std::chrono::duration<double>(Clock::now() - start).count();
  const double used = CpuSeconds(daemon) - cpu;
  std::printf(
      "floor: health Check at 4k/s, one at a time: %.2f cores of the "
      "daemon (%.1f us per call)\n",
      used / wall, 1e6 * used / calls);
}

// What TLS and token checks cost: the same daemon flags with and without
// --tls-cert/--tls-key/--auth-tokens, in alternating rounds.
void Security(const std::string& binary, const std::string& scratch,
              std::chrono::milliseconds dur, int rounds) {
  const std::string dir = scratch + "/security";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string make_certs =
      "cd '" + dir +
      "' && openssl req -x509 -newkey ec -pkeyopt "
      "ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem -days 2 "
      "-subj /CN=bench-ca 2>/dev/null && openssl req -newkey ec -pkeyopt "
      "ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.csr "
      "-subj /CN=localhost 2>/dev/null && printf "
      "'subjectAltName=IP:127.0.0.1\\n' > ext && openssl x509 -req -in "
      "server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem "
      "-days 2 -extfile ext 2>/dev/null && printf 'bench-token * admin\\n' > "
      "tokens";
  if (std::system(make_certs.c_str()) != 0) {
    std::printf("security: openssl failed\n");
    return;
  }
  std::ifstream ca_in(dir + "/ca.pem");
  std::stringstream ca;
  ca << ca_in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca.str();
  const auto tls = grpc::SslCredentials(ssl);
  // Mode 1 sends the token through gRPC's call credentials, mode 2 as an
  // `authorization` header set on each call, as clients without call
  // credentials do. The daemon checks the same header either way; how the
  // client sends it may still cost both sides differently (for unary calls
  // the header mode measured 2-3 % lower: tests/bench/README.md).
  const auto with_call_credentials = grpc::CompositeChannelCredentials(
      tls, grpc::AccessTokenCredentials("bench-token"));
  const std::vector<std::string> plain_args = {"--in-memory"};
  const std::vector<std::string> secure_args = {
      "--in-memory",       "--tls-cert",    dir + "/server.pem", "--tls-key",
      dir + "/server.key", "--auth-tokens", dir + "/tokens"};
  constexpr int kModes = 3;
  std::vector<double> unary[kModes], batch[kModes], unary_cpu[kModes],
      batch_cpu[kModes];
  for (int round = 0; round < rounds; ++round) {
    for (int m = 0; m < kModes; ++m) {
      delayd::testing::DaemonProcess d(binary,
                                       m == 0 ? plain_args : secure_args);
      if (!d.ok()) {
        std::printf("daemon did not start: %s\n", d.output().c_str());
        return;
      }
      Bench bench(d.address(), 4,
                  m == 0   ? nullptr
                  : m == 1 ? with_call_credentials
                           : tls);
      if (m == 2) bench.SetBearer("bench-token");
      bench.SetRate(64, 300ms);  // Warm-up (and the TLS handshakes).
      const Measured u =
          WithCpu(d.pid(), [&] { return bench.SetRate(64, dur / 2); });
      const Measured b = WithCpu(
          d.pid(), [&] { return bench.BatchRate(16, 100, dur / 2, "batch"); });
      unary[m].push_back(u.rate);
      unary_cpu[m].push_back(u.cpu_us);
      batch[m].push_back(b.rate);
      batch_cpu[m].push_back(b.cpu_us);
    }
  }
  // Throughput as a ratio of plaintext; CPU per operation as plaintext's
  // over this mode's (the throughput ratio the daemon would reach if it had
  // the CPU to itself).
  std::printf("security (medians of %d alternating rounds):\n", rounds);
  const char* names[kModes] = {"plaintext", "TLS + tokens (call credentials)",
                               "TLS + tokens (header)"};
  for (int m = 0; m < kModes; ++m) {
    std::printf(
        "  %-32s SetTimer %7.0f/s (%.3fx)  Batch %8.0f items/s (%.3fx)\n"
        "  %-32s   daemon CPU per SetTimer %.2f us (%.3fx), per Batch item "
        "%.3f us (%.3fx)\n",
        names[m], Median(unary[m]), Median(unary[m]) / Median(unary[0]),
        Median(batch[m]), Median(batch[m]) / Median(batch[0]), "",
        Median(unary_cpu[m]), Median(unary_cpu[0]) / Median(unary_cpu[m]),
        Median(batch_cpu[m]), Median(batch_cpu[0]) / Median(batch_cpu[m]));
  }
}

// Two builds of the daemon side by side (the bound checks' cost):
// plaintext, in memory, alternating rounds.
// Daemons run with `args` (after `--`); without --in-memory each round
// gets a fresh data directory under `scratch`.
// `firing_only`: no unary or Batch rounds (ab-firing).
void AB(const std::string& a, const std::string& b,
        std::chrono::milliseconds dur, const std::string& scratch,
        const std::vector<std::string>& args,
        const std::vector<std::string>& b_args, int rounds, bool firing_only,
        std::uint64_t fire_count) {
  const bool in_memory =
      std::find(args.begin(), args.end(), "--in-memory") != args.end();
  std::vector<double> unary[2], batch[2], firing[2];
  std::vector<double> unary_cpu[2], batch_cpu[2], firing_cpu[2];
  for (int round = 0; round < rounds; ++round) {
    for (int m = 0; m < 2; ++m) {
      std::unique_ptr<ScratchDaemon> sd;
      std::unique_ptr<delayd::testing::DaemonProcess> plain;
      std::vector<std::string> own = args;
      if (m == 1) own.insert(own.end(), b_args.begin(), b_args.end());
      if (in_memory) {
        plain = std::make_unique<delayd::testing::DaemonProcess>(m == 0 ? a : b,
                                                                 own);
      } else {
        sd =
            std::make_unique<ScratchDaemon>(m == 0 ? a : b, scratch, "ab", own);
      }
      delayd::testing::DaemonProcess& d = in_memory ? *plain : sd->d();
      if (!d.ok()) {
        std::printf("daemon did not start: %s\n", d.output().c_str());
        return;
      }
      Bench bench(d.address(), 4);
      bench.SetRate(64, 300ms);  // Warm-up.
      if (!firing_only) {
        const Measured u =
            WithCpu(d.pid(), [&] { return bench.SetRate(64, dur / 2); });
        const Measured b = WithCpu(d.pid(), [&] {
          return bench.BatchRate(16, 100, dur / 2, "batch");
        });
        unary[m].push_back(u.rate);
        unary_cpu[m].push_back(u.cpu_us);
        batch[m].push_back(b.rate);
        batch_cpu[m].push_back(b.cpu_us);
      }
      // Firing: `fire_count` timers due at one instant, set beforehand,
      // taken by one worker; events per second from the fire time to the
      // last delivery. (50k took about 0.1 s, too short to be read within a
      // few percent.) The fill takes about 1 us per timer.
      const std::int64_t t0 = WallNanos() + 1'500'000'000 +
                              static_cast<std::int64_t>(2'000 * fire_count);
      const std::string ns = "fire" + std::to_string(round);
      // The daemon's CPU from the end of the fill (it idles until t0) to
      // the last ack.
      std::atomic<double> cpu0{0};
      std::map<std::string, double> threads0;
      auto late = bench.Lateness(ns, fire_count, 30s, [&] {
        bench.Fill(fire_count, ns, [&](std::uint64_t) { return t0; });
        threads0 = CpuByThread(d.pid());
        cpu0 = CpuSeconds(d.pid());
      });
      const double cpu = CpuSeconds(d.pid()) - cpu0.load();
      const double last_ms =
          late.empty() ? 0 : *std::max_element(late.begin(), late.end());
      // Each thread's CPU from the end of the fill (the daemon idles until
      // t0) over the burst's length, the fire time to the last delivery: a
      // thread busy throughout the burst reads as one core.
      std::printf("  round %d %c firing %.0f ms:", round + 1,
                  m == 0 ? 'a' : 'b', last_ms);
      PrintCpuByThread(threads0, CpuByThread(d.pid()), last_ms / 1000);
      const bool all = late.size() == fire_count && last_ms > 0;
      firing[m].push_back(all ? fire_count / (last_ms / 1000) : 0);
      firing_cpu[m].push_back(all ? 1e6 * cpu / fire_count : 0);
    }
  }
  // CPU per operation as a ratio a/b: above 1, b costs the daemon less.
  auto cpu_line = [](const char* what, const std::vector<double>* cpu) {
    std::printf("  daemon CPU per %s: a %.3f us, b %.3f us (a/b %.3fx)\n", what,
                Median(cpu[0]), Median(cpu[1]),
                Median(cpu[0]) / Median(cpu[1]));
  };
  if (firing_only) {
    std::printf(
        "a/b firing (medians of %d alternating rounds): a %.0f/s, b %.0f/s "
        "(%.3fx)\n",
        rounds, Median(firing[0]), Median(firing[1]),
        Median(firing[1]) / Median(firing[0]));
    cpu_line("fired event", firing_cpu);
    return;
  }
  std::printf(
      "a/b (medians of %d alternating rounds; b as a ratio of a):\n"
      "  a %s: SetTimer %8.0f/s   Batch %9.0f items/s   firing %9.0f/s\n"
      "  b %s: SetTimer %8.0f/s (%.3fx)   Batch %9.0f items/s (%.3fx)   "
      "firing %9.0f/s (%.3fx)\n",
      rounds, a.c_str(), Median(unary[0]), Median(batch[0]), Median(firing[0]),
      b.c_str(), Median(unary[1]), Median(unary[1]) / Median(unary[0]),
      Median(batch[1]), Median(batch[1]) / Median(batch[0]), Median(firing[1]),
      Median(firing[1]) / Median(firing[0]));
  cpu_line("SetTimer", unary_cpu);
  cpu_line("Batch item", batch_cpu);
  cpu_line("fired event", firing_cpu);
}

}  // namespace

int Main(int argc, char** argv) {
  // As in the daemon: Debian's Abseil checks lock order on every absl::Mutex
  // operation, CPU this process would take from the daemon it measures.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // Lines as they come, to a file.
  std::string daemon = DELAYD_BINARY;
  std::string daemon_b;
  std::string only;
  std::string scratch = std::filesystem::temp_directory_path() / "delayd-bench";
  int seconds = 3;
  int rounds = 0;  // 0: each section's own (ab 5, security 3).
  std::uint64_t fire_count = 200'000;  // Timers per firing round of ab.
  int steady_delay_ms = 50;  // How far ahead the steady 2k/s timers are set.
  bool work_acks = false;    // The lateness worker acks on a Work stream.
  std::vector<std::string> daemon_args = {"--in-memory"};
  std::vector<std::string> b_args;  // Given to --daemon-b only.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--daemon" && i + 1 < argc) {
      daemon = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::stoi(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--fire" && i + 1 < argc) {
      fire_count = std::max(1000ULL, std::stoull(argv[++i]));
    } else if (a == "--steady-delay-ms" && i + 1 < argc) {
      steady_delay_ms = std::max(0, std::stoi(argv[++i]));
    } else if (a == "--work-acks") {
      work_acks = true;
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--daemon-b" && i + 1 < argc) {
      daemon_b = argv[++i];
    } else if (a == "--b-arg" && i + 1 < argc) {
      b_args.push_back(argv[++i]);
    } else if (a == "--scratch" && i + 1 < argc) {
      scratch = argv[++i];
    } else if (a == "--") {
      daemon_args.assign(argv + i + 1, argv + argc);
      break;
    } else {
      // (--help included: a mistyped flag must not start an hour of runs.)
      std::fprintf(stderr,
                   "load_gen: unknown argument or missing value: %s\n"
                   "usage: load_gen [--daemon PATH] [--daemon-b PATH] "
                   "[--b-arg ARG]... [--seconds N] [--rounds N] [--fire N] "
                   "[--steady-delay-ms N] [--work-acks] [--only NAME] "
                   "[--scratch DIR] "
                   "[-- daemon args]\n",
                   a.c_str());
      return 2;
    }
  }
  std::filesystem::create_directories(scratch);
  const std::chrono::milliseconds dur(seconds * 1000);
  auto want = [&](const char* name) { return only.empty() || only == name; };

  if (want("unary") || want("batch") || want("lateness") || want("steady") ||
      want("memory")) {
    // (Metrics on, unless the args say where: the steady run reads the
    // WAL's syncs from them.)
    std::vector<std::string> args = daemon_args;
    if (std::find(args.begin(), args.end(), "--metrics-listen") == args.end()) {
      args.insert(args.end(), {"--metrics-listen", "127.0.0.1:0"});
    }
    // (A durable daemon whose args name no store runs as a ScratchDaemon:
    // each run starts empty, rather than on whatever the last run left in
    // the daemon's default data directory.)
    const bool named =
        std::any_of(args.begin(), args.end(), [](const std::string& a) {
          return a == "--in-memory" || a.starts_with("--data-dir") ||
                 a.starts_with("--store");
        });
    std::unique_ptr<delayd::testing::DaemonProcess> plain;
    std::unique_ptr<ScratchDaemon> sd;
    if (named) {
      plain = std::make_unique<delayd::testing::DaemonProcess>(daemon, args);
    } else {
      sd = std::make_unique<ScratchDaemon>(daemon, scratch, "main", args);
    }
    delayd::testing::DaemonProcess& d = named ? *plain : sd->d();
    if (!d.ok()) {
      std::fprintf(stderr, "daemon did not start:\n%s\n", d.output().c_str());
      return 1;
    }
    d.WaitForOutput("metrics on http://", 5s);
    const int metrics_port = delayd::testing::MetricsPortIn(d.output());
    std::printf("delayd pid %d on %s\n", d.pid(), d.address().c_str());
    Bench bench(d.address(), 4);
    bench.set_work_acks(work_acks);
    if (want("unary")) {
      // Alternating rounds, medians compared: the machine is shared and noisy.
      bench.HealthRate(64, 500ms);  // Warm-up.
      std::vector<double> health, set;
      for (int round = 0; round < 5; ++round) {
        health.push_back(bench.HealthRate(64, dur / 5));
        set.push_back(bench.SetRate(64, dur / 5));
      }
      std::sort(health.begin(), health.end());
      std::sort(set.begin(), set.end());
      std::printf(
          "unary: health Check %.0f/s, SetTimer %.0f/s (medians of 5 "
          "alternating rounds), ratio %.2f\n",
          health[2], set[2], set[2] / health[2]);
    }
    if (want("batch")) {
      for (int in_flight : {8, 16}) {
        const double daemon_cpu = CpuSeconds(d.pid());
        const double own_cpu = CpuSeconds(getpid());
        const auto start = Clock::now();
        const double items = bench.BatchRate(in_flight, 100, dur, "batch");
        const double wall =
            std::chrono::duration<double>(Clock::now() - start).count();
        std::printf(
            "batch: %.0f items/s (100 per call, %d calls in flight); CPU "
            "daemon %.2f cores (%.2f us per item), load_gen %.2f cores\n",
            items, in_flight, (CpuSeconds(d.pid()) - daemon_cpu) / wall,
            1e6 * (CpuSeconds(d.pid()) - daemon_cpu) / (items * wall),
            (CpuSeconds(getpid()) - own_cpu) / wall);
      }
    }
    if (want("lateness") || want("steady")) {
      // Steady: 2k timers/s for `seconds`, one SetTimer at a time, each
      // --steady-delay-ms ahead.
      const std::size_t n = static_cast<std::size_t>(2000 * seconds);
      SteadyHealthFloor(bench, d.pid(), n);
      const std::chrono::milliseconds ahead(steady_delay_ms);
      const double steady_cpu = CpuSeconds(d.pid());
      const double steady_syncs = WalSyncs(metrics_port);
      const auto steady_threads = CpuByThread(d.pid());
      const auto steady_start = Clock::now();
      auto late = bench.Lateness("steady", n, dur + ahead + 10s, [&] {
        const auto start = Clock::now();
        for (std::size_t i = 0; i < n; ++i) {
          std::this_thread::sleep_until(start +
                                        std::chrono::microseconds(500 * i));
          v1::SetTimerRequest req;
          req.set_namespace_("steady");
          req.set_key(std::string("s").append(std::to_string(i)));
          req.mutable_delay()->set_seconds(steady_delay_ms / 1000);
          req.mutable_delay()->set_nanos(steady_delay_ms % 1000 * 1'000'000);
          v1::SetTimerResponse resp;
          grpc::ClientContext ctx;
          bench.stub().SetTimer(&ctx, req, &resp);
        }
      });
      Percentiles p = Summarize(late);
      std::printf(
          "lateness steady 2k/s (%d ms ahead): n=%zu p50 %.3f ms p99 %.3f ms "
          "p99.9 %.3f ms max %.3f ms\n",
          steady_delay_ms, p.n, p.p50, p.p99, p.p999, p.max);
      const double steady_wall =
          std::chrono::duration<double>(Clock::now() - steady_start).count();
      const double steady_used = CpuSeconds(d.pid()) - steady_cpu;
      std::printf("  daemon CPU %.2f cores (%.1f us per timer)\n",
                  steady_used / steady_wall, 1e6 * steady_used / n);
      if (const double syncs = WalSyncs(metrics_port);
          steady_syncs >= 0 && syncs >= 0) {
        // (A timer's set and its event's ack each wait for a sync under
        // --fsync always; group commit shares one among several.)
        std::printf("  WAL syncs %.2f per timer (%.0f)\n",
                    (syncs - steady_syncs) / static_cast<double>(n),
                    syncs - steady_syncs);
      }
      PrintCpuByThread(steady_threads, CpuByThread(d.pid()), steady_wall);
      p = Summarize(bench.fired_late());
      std::printf(
          "  of which firing (fired_at - fire time): p50 %.3f ms p99 "
          "%.3f ms max %.3f ms\n",
          p.p50, p.p99, p.max);
    }
    if (want("lateness")) {
      // Burst: 100k due within one second, set beforehand.
      constexpr std::uint64_t kBurst = 100'000;
      const std::int64_t t0 = WallNanos() + 4'000'000'000;
      auto late = bench.Lateness("burst", kBurst, 30s, [&] {
        bench.Fill(kBurst, "burst", [&](std::uint64_t i) {
          return t0 + static_cast<std::int64_t>(i * 1'000'000'000 / kBurst);
        });
      });
      Percentiles p = Summarize(late);
      std::printf(
          "lateness burst 100k in 1 s: n=%zu p50 %.3f ms p99 %.3f ms p99.9 "
          "%.3f ms max %.3f ms\n",
          p.n, p.p50, p.p99, p.p999, p.max);
      p = Summarize(bench.fired_late());
      std::printf(
          "  of which firing (fired_at - fire time): p50 %.3f ms p99 "
          "%.3f ms max %.3f ms\n",
          p.p50, p.p99, p.max);
    }
    if (want("memory")) {
      constexpr std::uint64_t kPending = 1'000'000;
      const std::int64_t before = RssBytes(d.pid());
      const std::int64_t far = WallNanos() + 3600LL * 1'000'000'000;
      bench.Fill(kPending, "memory", [&](std::uint64_t i) {
        return far + static_cast<std::int64_t>(Mix(i) % 1'000'000'000'000);
      });
      const std::int64_t after = RssBytes(d.pid());
      std::printf(
          "memory: RSS %.1f MiB -> %.1f MiB, %.1f B per pending timer\n",
          before / 1048576.0, after / 1048576.0,
          static_cast<double>(after - before) / kPending);
      // Idle: nothing due for an hour.
      const double cpu_before = CpuSeconds(d.pid());
      const auto idle_start = Clock::now();
      std::this_thread::sleep_for(10s);  // The measurement window itself.
      const double wall =
          std::chrono::duration<double>(Clock::now() - idle_start).count();
      const double cpu = CpuSeconds(d.pid()) - cpu_before;
      std::printf("idle: %.4f%% of a core over %.1f s with 1M pending\n",
                  100.0 * cpu / wall, wall);
    }
    const auto code = d.Stop(SIGTERM, 10s);
    std::printf("daemon exit code %d\n", code ? *code : -1);
  }
  if (want("durability")) Durability(daemon, scratch, dur);
  if (want("payload")) Payload(daemon, scratch);
  if (want("churn")) Churn(daemon, scratch);
  if (want("recovery")) Recovery(daemon, scratch);
  if (only.rfind("schedules", 0) == 0) {
    Schedules(daemon, scratch, rounds > 0 ? rounds : 3, only);
  }
  if (only == "http") Http(daemon, dur);
  if (only == "pull") Pull(daemon, dur);
  if (want("security")) {
    Security(daemon, scratch, dur, rounds > 0 ? rounds : 3);
  }
  if (rounds == 0) rounds = 5;
  if (!daemon_b.empty() && want("ab")) {
    AB(daemon, daemon_b, dur, scratch, daemon_args, b_args, rounds, false,
       fire_count);
  }
  if (!daemon_b.empty() && only == "ab-firing") {
    AB(daemon, daemon_b, dur, scratch, daemon_args, b_args, rounds, true,
       fire_count);
  }
  return 0;
}

}  // namespace delayd::bench

int main(int argc, char** argv) { return delayd::bench::Main(argc, argv); }
