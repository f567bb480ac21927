// load_gen's recurring-schedule section (`--only schedules`): each figure is
// measured against one-shot timers in the same run, on daemons of the same
// flags:
//   memory   RSS per pending schedule with 1 M schedules (half cron in six
//            zones, half intervals, 16 B keys and payloads, none due during
//            the run) against RSS per pending timer with 1 M timers;
//   burst    10 k schedule runs due within one second (intervals starting
//            then) against 10 k one-shot timers due at the same offsets:
//            lateness of the last delivery, p50 and p99;
//   restart  a durable daemon's start-up with 1 M schedules against the same
//            with 1 M timers (exec to serving), five start-ups of each in
//            turn compared by their medians, --rounds N times (default 3).
#include <algorithm>
#include <vector>

#include "tests/bench/bench_client.h"
#include "tests/bench/sections.h"

namespace delayd::bench {
namespace {

constexpr std::int64_t kSecond = 1'000'000'000;

// Sets schedule i of `n` for each i, through unary SetSchedule from several
// threads; `fill(i, req)` fills in its spec. Returns the failures.
std::uint64_t SetSchedules(
    Bench& bench, std::uint64_t n, const std::string& ns,
    const std::function<void(std::uint64_t, v1::SetScheduleRequest&)>& fill) {
  constexpr int kThreads = 16;
  std::atomic<std::uint64_t> next{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (std::uint64_t i; (i = next.fetch_add(1)) < n;) {
        v1::SetScheduleRequest req;
        req.set_namespace_(ns);
        char key[32];
        std::snprintf(key, sizeof key, "key-%012llu",
                      static_cast<unsigned long long>(i));
        req.set_key(key);
        std::string* payload = req.mutable_payload();
        payload->resize(16);
        const std::uint64_t r[2] = {Mix(i * 1024), Mix(i * 1024 + 8)};
        std::memcpy(payload->data(), r, 16);
        fill(i, req);
        v1::Schedule resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 60s);
        if (!bench.stub().SetSchedule(&ctx, req, &resp).ok()) {
          if (failed.fetch_add(1) == 0) {
            std::printf("  SetSchedule failed (first of these)\n");
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return failed.load();
}

// The mix of the memory and restart figures: cron expressions in zones and
// intervals, all starting a day from now (nothing runs during the figure).
void MixedSpec(std::uint64_t i, std::int64_t day_ahead,
               v1::SetScheduleRequest& req) {
  static const char* const kCron[] = {
      "0 9 * * 1-5", "*/5 * * * *", "0 0 1 * *",    "30 2 * * 0",
      "0 */6 * * *", "15 10 L * ?", "0 12 * * 5#2", "0 0 * * *"};
  static const char* const kZones[] = {"UTC",
                                       "Europe/Berlin",
                                       "America/New_York",
                                       "Asia/Kathmandu",
                                       "Australia/Lord_Howe",
                                       "Asia/Tokyo"};
  static const std::int64_t kEvery[] = {30, 300, 3600, 5400, 86400};
  auto* spec = req.mutable_spec();
  const std::uint64_t m = Mix(i);
  if (i % 2 == 0) {
    spec->set_cron(kCron[m % 8]);
    spec->set_time_zone(kZones[(m >> 8) % 6]);
    *spec->mutable_start_time() = Ts(day_ahead);
  } else {
    spec->mutable_every()->set_seconds(kEvery[m % 5]);
    *spec->mutable_start_time() =
        Ts(day_ahead + static_cast<std::int64_t>((m >> 8) % 86400) * kSecond);
  }
}

// Sets 1 M timers (kind 0) or 1 M schedules (kind 1, the mix above) in
// `ns`, all due a day or more from now.
void FillKind(Bench& bench, int kind, const std::string& ns) {
  constexpr std::uint64_t kN = 1'000'000;
  const std::int64_t day_ahead = WallNanos() + 86400 * kSecond;
  if (kind == 0) {
    bench.Fill(kN, ns, [&](std::uint64_t i) {
      return day_ahead + static_cast<std::int64_t>(Mix(i) % (86400 * kSecond));
    });
  } else {
    SetSchedules(bench, kN, ns, [&](std::uint64_t i, auto& req) {
      MixedSpec(i, day_ahead, req);
    });
  }
}

// RSS growth per item for 1 M timers, then 1 M schedules, each on a fresh
// daemon; returns the ratio.
double Memory(const std::string& binary, const std::string& scratch,
              const std::vector<std::string>& flags) {
  constexpr std::uint64_t kN = 1'000'000;
  double per[2] = {0, 0};
  for (int kind = 0; kind < 2; ++kind) {
    ScratchDaemon sd(binary, scratch, "schedules-memory", flags);
    if (!sd.d().ok()) return 0;
    Bench bench(sd.d().address(), 4);
    const std::int64_t before = RssBytes(sd.d().pid());
    const auto t0 = Clock::now();
    FillKind(bench, kind, "m");
    const double took =
        std::chrono::duration<double>(Clock::now() - t0).count();
    const std::int64_t after = RssBytes(sd.d().pid());
    per[kind] = static_cast<double>(after - before) / kN;
    std::printf("  %-9s RSS %.1f -> %.1f MiB: %.1f B each (set in %.1f s)\n",
                kind == 0 ? "timers" : "schedules", before / 1048576.0,
                after / 1048576.0, per[kind], took);
  }
  return per[0] > 0 ? per[1] / per[0] : 0;
}

// 10 k runs due within one second, as schedules and as one-shot timers, on
// one daemon; prints both and returns last-delivery lateness (ms) of each.
std::pair<double, double> Burst(Bench& bench, int round) {
  constexpr std::uint64_t kN = 10'000;
  double last[2] = {0, 0};
  for (int kind = 0; kind < 2; ++kind) {
    const std::string ns =
        std::string(kind == 0 ? "t" : "s") + std::to_string(round);
    const std::int64_t t0 = WallNanos() + 3 * kSecond;
    auto at = [&](std::uint64_t i) {
      return t0 + static_cast<std::int64_t>(i * kSecond / kN);
    };
    std::int64_t set_by = 0;  // when the last was set
    auto late = bench.Lateness(ns, kN, 30s, [&] {
      if (kind == 0) {
        bench.Fill(kN, ns, at);
      } else {
        SetSchedules(bench, kN, ns, [&](std::uint64_t i, auto& req) {
          req.mutable_spec()->mutable_every()->set_seconds(3600);
          *req.mutable_spec()->mutable_start_time() = Ts(at(i));
        });
      }
      set_by = WallNanos();
    });
    const Percentiles p = Summarize(late);
    // The daemon's part: its fired_at against the fire time.
    const Percentiles f = Summarize(bench.fired_late());
    last[kind] = p.max;
    std::printf(
        "  %-9s n=%zu p50 %.2f ms p99 %.2f ms last %.2f ms (fired p50 %.2f "
        "ms, last %.2f ms; all set %.2f s before the first was due)\n",
        kind == 0 ? "timers" : "schedules", p.n, p.p50, p.p99, p.max, f.p50,
        f.max, static_cast<double>(t0 - set_by) / 1e9);
    if (p.n != kN)
      std::printf("  (only %zu of %llu arrived)\n", p.n, kN * 1ull);
  }
  return {last[0], last[1]};
}

// Fills durable data directory `dir` with 1 M timers (kind 0) or 1 M
// schedules (kind 1), and starts a daemon over it once (its first start
// after a fill reads files the fill's daemon wrote; later ones read them as
// a restart does).
void FillDir(const std::string& binary, const std::string& dir, int kind) {
  std::filesystem::remove_all(dir);
  delayd::testing::DaemonProcess d(
      binary,
      {"--data-dir", dir, "--fsync", "never", "--max-schedules", "1000000"},
      60s);
  if (!d.ok()) return;
  Bench bench(d.address(), 4);
  FillKind(bench, kind, "r");
  d.Stop(SIGTERM, 120s);
}

// How long a daemon over `dir` takes from exec to serving; with `label`, its
// RSS and the directory's size are printed.
double StartUp(const std::string& binary, const std::string& dir,
               const char* label) {
  const auto t0 = Clock::now();
  delayd::testing::DaemonProcess d(
      binary, {"--data-dir", dir, "--max-schedules", "1000000"}, 300s);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  if (label != nullptr) {
    std::printf("  %-9s RSS %.0f MiB once serving, data dir %.0f MiB\n", label,
                RssBytes(d.pid()) / 1048576.0, DirBytes(dir) / 1048576.0);
  }
  d.Stop(SIGTERM, 120s);
  return took;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One round of the restart figure: both directories filled, then start-ups
// of each kind in turn (so that both see the same moments of a shared
// machine), compared by their medians.
void RestartRound(const std::string& binary, const std::string& scratch,
                  int round) {
  constexpr int kStarts = 5;
  const std::string dirs[2] = {scratch + "/restart-timers",
                               scratch + "/restart-schedules"};
  std::vector<double> took[2];
  for (int kind = 0; kind < 2; ++kind) {
    FillDir(binary, dirs[kind], kind);
    StartUp(binary, dirs[kind], nullptr);
  }
  const char* const names[2] = {"timers", "schedules"};
  for (int i = 0; i < kStarts; ++i) {
    for (int kind = 0; kind < 2; ++kind) {
      took[kind].push_back(
          StartUp(binary, dirs[kind], i == 0 ? names[kind] : nullptr));
    }
  }
  for (int kind = 0; kind < 2; ++kind) {
    std::printf("  %-9s ready to serve after exec:", names[kind]);
    for (double t : took[kind]) std::printf(" %.2f", t);
    std::printf(" s (median %.2f)\n", Median(took[kind]));
    std::filesystem::remove_all(dirs[kind]);
  }
  const double base = Median(took[0]);
  std::printf(
      "  round %d: schedules / timers start-up = %.2fx (medians of %d; "
      "target 0.8-1.2x)\n",
      round, base > 0 ? Median(took[1]) / base : 0, kStarts);
}

}  // namespace

void Schedules(const std::string& binary, const std::string& scratch,
               int rounds, const std::string& only) {
  auto want = [&](const std::string& part) {
    return only == "schedules" || only == "schedules-" + part;
  };
  if (want("memory")) {
    std::printf("schedules: memory, 1 M pending (in memory)\n");
    const double mem =
        Memory(binary, scratch, {"--in-memory", "--max-schedules", "1000000"});
    std::printf("  schedule / timer RSS = %.2fx (target <= 2x)\n", mem);
  }
  if (want("burst")) {
    std::printf("schedules: 10 k runs due within one second (in memory)\n");
    ScratchDaemon sd(binary, scratch, "schedules-burst",
                     {"--in-memory", "--max-schedules", "100000"});
    if (!sd.d().ok()) return;
    Bench bench(sd.d().address(), 4);
    for (int r = 0; r < rounds; ++r) {
      const auto [timers, schedules] = Burst(bench, r);
      std::printf("  round %d: last delivery schedules / timers = %.2fx\n", r,
                  timers > 0 ? schedules / timers : 0);
    }
  }
  if (!want("restart")) return;
  std::printf("schedules: restart with 1 M (--fsync never)\n");
  for (int r = 0; r < rounds; ++r) RestartRound(binary, scratch, r);
}

}  // namespace delayd::bench
