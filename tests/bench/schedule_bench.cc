// What computing a schedule's next instant costs (server/schedule/), against
// the naive way in the same run: stepping minute by minute through wall
// time in the zone until the expression matches. Google Benchmark; each
// iteration asks for the next instant after a different moment, spread
// over a year, so zone transitions and month ends are crossed.
#include <benchmark/benchmark.h>
#include <date/tz.h>

#include "server/schedule/spec.h"

namespace {

using delayd::WallNanos;
using delayd::schedule::CronExpr;
using delayd::schedule::Spec;

constexpr WallNanos kSecond = 1'000'000'000;
constexpr WallNanos kYear2026 = 1'767'225'600 * kSecond;

struct Case {
  const char* expr;
  const char* zone;
};
constexpr Case kCases[] = {
    {"0 9 * * MON-FRI", "Europe/Berlin"},  // weekdays at nine
    {"*/15 * * * *", "America/New_York"},  // every quarter hour
    {"0 0 L * *", "Australia/Sydney"},     // the last day of each month
    {"30 2 1 JAN *", "UTC"},               // once a year
};

// Moments spread over 2026.
WallNanos Moment(std::int64_t i) {
  return kYear2026 + (i * 7919 % 525600) * 60 * kSecond + 17 * kSecond;
}

void BM_Next(benchmark::State& state) {
  const Case& c = kCases[state.range(0)];
  Spec spec;
  if (!Spec::Cron(c.expr, c.zone, &spec).ok()) state.SkipWithError("spec");
  std::int64_t i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(spec.Next(Moment(i++)));
  state.SetLabel(std::string(c.expr) + " " + c.zone);
}

// Minute by minute from the next whole minute, in wall time (each step
// converts to the zone), until the expression matches.
void BM_NaiveMinuteSearch(benchmark::State& state) {
  const Case& c = kCases[state.range(0)];
  CronExpr expr;
  if (!CronExpr::Parse(c.expr, &expr).ok()) state.SkipWithError("expr");
  const date::time_zone* zone = date::locate_zone(c.zone);
  std::int64_t i = 0;
  for (auto _ : state) {
    auto t = date::floor<std::chrono::minutes>(
                 date::sys_time<std::chrono::nanoseconds>(
                     std::chrono::nanoseconds(Moment(i++)))) +
             std::chrono::minutes(1);
    for (int steps = 0; steps < 600'000;
         ++steps, t += std::chrono::minutes(1)) {
      const auto wall = date::floor<std::chrono::seconds>(zone->to_local(t));
      if (expr.Matches(wall)) break;
    }
    benchmark::DoNotOptimize(t);
  }
  state.SetLabel(std::string(c.expr) + " " + c.zone);
}

BENCHMARK(BM_Next)->DenseRange(0, 3);
BENCHMARK(BM_NaiveMinuteSearch)->DenseRange(0, 3);

}  // namespace

BENCHMARK_MAIN();
