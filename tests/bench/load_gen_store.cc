// load_gen's sections on durable daemons: each starts its own daemons over
// fresh data directories under the scratch directory (tests/bench/sections.h).
#include "tests/bench/bench_client.h"
#include "tests/bench/sections.h"

namespace delayd::bench {

// Durable writes against in-memory, in alternating rounds.
void Durability(const std::string& binary, const std::string& scratch,
                std::chrono::milliseconds dur) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> modes = {
      {"in-memory", {"--in-memory"}},
      {"never", {"--fsync", "never"}},
      {"100ms", {"--fsync", "100ms"}},
      {"always", {"--fsync", "always"}}};
  std::vector<std::vector<double>> unary(modes.size()), batch(modes.size());
  for (int round = 0; round < 3; ++round) {
    for (std::size_t m = 0; m < modes.size(); ++m) {
      ScratchDaemon sd(binary, scratch, "durability", modes[m].second);
      if (!sd.d().ok()) {
        std::printf("daemon did not start: %s\n", sd.d().output().c_str());
        return;
      }
      Bench bench(sd.d().address(), 4);
      bench.SetRate(64, 300ms);  // Warm-up.
      unary[m].push_back(bench.SetRate(64, dur / 2));
      batch[m].push_back(bench.BatchRate(16, 100, dur / 2, "batch"));
    }
  }
  const double base_unary = Median(unary[0]);
  const double base_batch = Median(batch[0]);
  std::printf(
      "durability (medians of 3 alternating rounds; ratio to "
      "in-memory):\n");
  for (std::size_t m = 0; m < modes.size(); ++m) {
    std::printf(
        "  %-10s SetTimer %8.0f/s (%.2fx)   Batch %9.0f items/s (%.2fx)\n",
        modes[m].first.c_str(), Median(unary[m]), Median(unary[m]) / base_unary,
        Median(batch[m]), Median(batch[m]) / base_batch);
  }
}

// RSS per pending timer with small and 1 KiB payloads, durable.
void Payload(const std::string& binary, const std::string& scratch) {
  constexpr std::uint64_t kPending = 1'000'000;
  double per_timer[2] = {0, 0};
  const std::size_t sizes[2] = {16, 1024};
  for (int i = 0; i < 2; ++i) {
    ScratchDaemon sd(binary, scratch, "payload", {"--fsync", "never"});
    if (!sd.d().ok()) return;
    Bench bench(sd.d().address(), 4);
    const std::int64_t before = RssBytes(sd.d().pid());
    const std::int64_t far = WallNanos() + 3600LL * 1'000'000'000;
    bench.Fill(
        kPending, "payload",
        [&](std::uint64_t n) {
          return far + static_cast<std::int64_t>(Mix(n) % 1'000'000'000'000);
        },
        sizes[i]);
    const std::int64_t after = RssBytes(sd.d().pid());
    per_timer[i] = static_cast<double>(after - before) / kPending;
    std::printf(
        "payload %4zu B: RSS %.1f MiB -> %.1f MiB, %.1f B per pending timer, "
        "data dir %.1f MiB\n",
        sizes[i], before / 1048576.0, after / 1048576.0, per_timer[i],
        DirBytes(sd.dir()) / 1048576.0);
  }
  std::printf("payload: 1 KiB / 16 B RSS per timer = %.2fx\n",
              per_timer[1] / per_timer[0]);
}

// Set/move/remove on the same 10k keys: the data directory stays bounded.
void Churn(const std::string& binary, const std::string& scratch) {
  ScratchDaemon sd(binary, scratch, "churn", {"--fsync", "never"});
  if (!sd.d().ok()) return;
  auto stub = v1::Delayd::NewStub(grpc::CreateChannel(
      sd.d().address(), grpc::InsecureChannelCredentials()));
  constexpr int kKeys = 10'000;
  constexpr int kPerCall = 1000;
  const std::string payload(256, 'c');
  std::uint64_t ops = 0;
  const auto start = Clock::now();
  for (int million = 1; million <= 5; ++million) {
    while (ops < static_cast<std::uint64_t>(million) * 1'000'000) {
      v1::BatchRequest req;
      for (int i = 0; i < kPerCall; ++i, ++ops) {
        const std::string key =
            std::string("c").append(std::to_string(Mix(ops) % kKeys));
        switch (ops % 3) {
          case 0: {
            auto* set = req.add_operations()->mutable_set();
            set->set_namespace_("churn");
            set->set_key(key);
            set->set_payload(payload);
            set->mutable_delay()->set_seconds(3600);
            break;
          }
          case 1: {
            auto* move = req.add_operations()->mutable_move();
            move->set_namespace_("churn");
            move->set_key(key);
            move->mutable_delay()->set_seconds(7200);
            break;
          }
          default: {
            auto* rm = req.add_operations()->mutable_remove();
            rm->set_namespace_("churn");
            rm->set_key(key);
          }
        }
      }
      v1::BatchResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 60s);
      if (!stub->Batch(&ctx, req, &resp).ok()) {
        std::printf("churn: batch failed\n");
        return;
      }
    }
    v1::StatsResponse stats;
    grpc::ClientContext ctx;
    stub->Stats(&ctx, v1::StatsRequest(), &stats);
    std::printf(
        "churn: %dM ops on %d keys (256 B payloads): %llu pending, data dir "
        "%.1f MiB, %.0f s\n",
        million, kKeys, static_cast<unsigned long long>(stats.pending_timers()),
        DirBytes(sd.dir()) / 1048576.0,
        std::chrono::duration<double>(Clock::now() - start).count());
  }
}

// Start-up time with many pending timers.
void Recovery(const std::string& binary, const std::string& scratch) {
  for (std::uint64_t n : {1'000'000ull, 10'000'000ull}) {
    const std::string dir = scratch + "/recovery";
    std::filesystem::remove_all(dir);
    {
      delayd::testing::DaemonProcess d(
          binary, {"--data-dir", dir, "--fsync", "never"}, 60s);
      if (!d.ok()) return;
      Bench bench(d.address(), 4);
      const std::int64_t far = WallNanos() + 3600LL * 1'000'000'000;
      bench.Fill(n, "recovery", [&](std::uint64_t i) {
        return far + static_cast<std::int64_t>(Mix(i) % 1'000'000'000'000);
      });
      d.Stop(SIGTERM, 120s);
    }
    const auto t0 = Clock::now();
    delayd::testing::DaemonProcess d(binary, {"--data-dir", dir}, 300s);
    const double took =
        std::chrono::duration<double>(Clock::now() - t0).count();
    std::string logged = "?";
    const auto at = d.output().find("recovered ");
    if (at != std::string::npos) {
      logged = d.output().substr(at, d.output().find('\n', at) - at);
    }
    std::printf(
        "recovery %lluM: ready to serve %.2f s after exec; RSS %.0f MiB, data "
        "dir %.0f MiB; logged: %s\n",
        static_cast<unsigned long long>(n / 1'000'000), took,
        RssBytes(d.pid()) / 1048576.0, DirBytes(dir) / 1048576.0,
        logged.c_str());
    d.Stop(SIGTERM, 120s);
    std::filesystem::remove_all(dir);
  }
}

}  // namespace delayd::bench
