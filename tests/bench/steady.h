// The steady-rate lateness figure the PostgreSQL benches share.
#ifndef DELAYD_TESTS_BENCH_STEADY_H_
#define DELAYD_TESTS_BENCH_STEADY_H_

#include "tests/bench/bench_client.h"

namespace delayd::bench {

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

#endif  // DELAYD_TESTS_BENCH_STEADY_H_
