// What the PostgreSQL benches (pg_bench, cluster_scale_bench) share: their
// flags, their PostgreSQL server, and the steady-rate lateness figure.
#ifndef DELAYD_TESTS_BENCH_PG_COMMON_H_
#define DELAYD_TESTS_BENCH_PG_COMMON_H_

#include <cstdio>
#include <memory>
#include <string>

#include "tests/bench/bench_client.h"
#include "tests/common/postgres_server.h"

namespace delayd::bench {

// The value after flag `name` on the command line, else `fallback`.
inline std::string Arg(int argc, char** argv, const std::string& name,
                       const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return fallback;
}

// A PostgreSQL server for the bench (127.0.0.1, an OS-picked port, stopped
// by PID when dropped); null, and the reason on stderr, if it did not start.
inline std::unique_ptr<testing::PostgresServer> StartPostgres() {
  std::string error;
  auto pg = testing::PostgresServer::Start(&error);
  if (!pg) std::fprintf(stderr, "PostgreSQL: %s\n", error.c_str());
  return pg;
}

// Timers set one at a time at a steady 2k/s for `dur` (due 50 ms after
// each is set), read by a worker on the same node: their lateness (ms).
inline Percentiles SteadyLateness(Bench& bench, std::chrono::milliseconds dur) {
  const std::size_t n = static_cast<std::size_t>(2 * dur.count());
  auto late = bench.Lateness("steady", n, dur + 10s, [&] {
    const auto start = Clock::now();
    for (std::size_t i = 0; i < n; ++i) {
      std::this_thread::sleep_until(start + std::chrono::microseconds(500 * i));
      v1::SetTimerRequest req;
      req.set_namespace_("steady");
      req.set_key(std::string("s").append(std::to_string(i)));
      req.set_payload(Bench::Payload(100));
      req.mutable_delay()->set_nanos(50'000'000);
      v1::SetTimerResponse resp;
      grpc::ClientContext ctx;
      bench.stub().SetTimer(&ctx, req, &resp);
    }
  });
  return Summarize(late);
}

}  // namespace delayd::bench

#endif  // DELAYD_TESTS_BENCH_PG_COMMON_H_
