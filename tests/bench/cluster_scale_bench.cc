// Clusters of 1, 2 and 3 delayd nodes on one PostgreSQL server this bench
// starts (tests/common/postgres_server.h: 127.0.0.1, an OS-picked port,
// stopped by PID), a fresh database each time, in alternating rounds:
//   ingest   Batch (16 calls of 100 in flight in all) and unary SetTimer (64
//            in flight in all), split among clients on every node (as
//            behind a load balancer: 1 - 1/n of each one's operations are
//            forwarded); with the CPU PostgreSQL spent meanwhile, in cores;
//   firing   --fire timers (default 100k) due at the same instant, set
//            through node a, delivered to a worker on node a (the others'
//            events relayed): events/s from due to the last delivery;
//   steady   lateness at 2k timers/s set through node a, its worker on a.
//
// Usage: cluster_scale_bench [--seconds N] [--rounds N] [--fire N]
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/bench/bench_client.h"
#include "tests/bench/pg_common.h"
#include "tests/common/cluster_log.h"
#include "tests/common/postgres_server.h"

namespace delayd::bench {
namespace {

using delayd::testing::DaemonProcess;
using delayd::testing::PostgresServer;

// CPU seconds of PostgreSQL's postmaster `pid` and its children (the
// backends, the writer, the WAL writer...).
double PostgresCpu(pid_t pid) {
  double total = CpuSeconds(pid);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    // pid (comm) state ppid ...: the comm may hold spaces, not ')'.
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid) {
      try {
        total += CpuSeconds(std::stoi(name));
      } catch (const std::exception&) {
        // (It exited meanwhile.)
      }
    }
  }
  return total;
}

// `n` nodes of one cluster on a new database of `pg`, once each owns
// partitions and knows who owns the others.
std::vector<std::unique_ptr<DaemonProcess>> ClusterOf(
    PostgresServer& pg, int n, const std::string& scratch) {
  const std::string db = pg.NewDatabase();
  const std::string token = scratch + "/cluster-token";
  std::ofstream(token) << "bench-cluster-token-0123456789\n";
  std::vector<std::unique_ptr<DaemonProcess>> nodes;
  for (int i = 0; i < n; ++i) {
    nodes.push_back(std::make_unique<DaemonProcess>(
        DELAYD_BINARY,
        std::vector<std::string>{"--store", pg.Url(db), "--node-id",
                                 std::string(1, 'a' + i), "--advertise",
                                 "127.0.0.1:0", "--cluster-token-file", token},
        120s));
  }
  // Until every node holds its share (the partitions spread out over a
  // few rounds after the nodes start).
  const std::string balanced =
      "SELECT count(*) = " + std::to_string(n) +
      " AND min(c) >= " + std::to_string(64 / n) +
      " FROM (SELECT owner, count(*) AS c FROM delayd_leases WHERE "
      "expires_at > now() GROUP BY owner) AS o";
  // ... and has loaded it (its log says so).
  auto loaded = [&] {
    for (int i = 0; i < n; ++i) {
      const std::string owned =
          pg.Exec(db,
                  "SELECT count(*) FROM delayd_leases WHERE expires_at > now() "
                  "AND owner = '" +
                      std::string(1, 'a' + i) + "'");
      if (testing::PartitionsLoaded(nodes[i]->output()) !=
          std::atoi(owned.c_str())) {
        return false;
      }
    }
    return true;
  };
  for (auto until = Clock::now() + 60s;
       Clock::now() < until && (pg.Exec(db, balanced) != "t" || !loaded());) {
    std::this_thread::sleep_for(20ms);  // Polls the leases.
  }
  for (auto& node : nodes) {
    Bench probe(node->address(), 1);
    for (auto until = Clock::now() + 30s; Clock::now() < until;) {
      v1::ListTimersRequest req;
      req.set_namespace_("probe");
      v1::ListTimersResponse resp;
      grpc::ClientContext ctx;
      if (probe.stub().ListTimers(&ctx, req, &resp).ok()) break;
      std::this_thread::sleep_for(20ms);  // Until it knows the owners.
    }
  }
  return nodes;
}

// `rate(bench, ns)` run at once by a client on every node (as behind a load
// balancer), each on a namespace of its own: the sum.
template <typename Rate>
double OnEveryNode(const std::vector<std::unique_ptr<DaemonProcess>>& nodes,
                   Rate rate) {
  std::vector<double> rates(nodes.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    threads.emplace_back([&, i] {
      Bench bench(nodes[i]->address(), 4);
      rates[i] = rate(bench, "n" + std::to_string(i));
    });
  }
  for (auto& t : threads) t.join();
  double sum = 0;
  for (double r : rates) sum += r;
  return sum;
}

// The figures of one cluster size over the rounds.
struct Figures {
  std::vector<double> batch, unary, batch_pg, unary_pg, fire, p50, p99;
};

void Round(PostgresServer& pg, const std::string& scratch, int n,
           std::chrono::milliseconds dur, std::uint64_t fire_n, Figures& f,
           int round) {
  auto nodes = ClusterOf(pg, n, scratch);
  const double seconds = std::chrono::duration<double>(dur).count();
  double cpu = PostgresCpu(pg.pid());
  f.batch.push_back(OnEveryNode(nodes, [&](Bench& b, auto ns) {
    return b.BatchRate(16 / n, 100, dur, ns, 100);
  }));
  f.batch_pg.push_back((PostgresCpu(pg.pid()) - cpu) / seconds);
  cpu = PostgresCpu(pg.pid());
  f.unary.push_back(OnEveryNode(nodes, [&](Bench& b, auto ns) {
    return b.SetRate(64 / n, dur, 100, ns);
  }));
  f.unary_pg.push_back((PostgresCpu(pg.pid()) - cpu) / seconds);
  Bench bench(nodes[0]->address(), 4);
  const std::int64_t due = WallNanos() + 15'000'000'000;
  bench.Lateness("fire", fire_n, 120s, [&] {
    bench.Fill(
        fire_n, "fire", [&](std::uint64_t) { return due; }, 100);
  });
  f.fire.push_back(static_cast<double>(fire_n) * 1e9 /
                   static_cast<double>(bench.last_arrival() - due));
  const Percentiles p = SteadyLateness(bench, dur);
  f.p50.push_back(p.p50);
  f.p99.push_back(p.p99);
  std::printf(
      "  round %d, %d node(s): Batch %.0f items/s (PostgreSQL %.2f cores), "
      "unary %.0f/s (%.2f cores), firing %.0f events/s, 2k/s lateness p50 "
      "%.2f ms p99 %.2f ms\n",
      round + 1, n, f.batch.back(), f.batch_pg.back(), f.unary.back(),
      f.unary_pg.back(), f.fire.back(), p.p50, p.p99);
  std::fflush(stdout);
  for (auto& node : nodes) node->Stop(SIGTERM, 60s);
}

int Main(int argc, char** argv) {
  const std::chrono::milliseconds dur(
      1000 * std::stoi(Arg(argc, argv, "--seconds", "3")));
  const int rounds = std::stoi(Arg(argc, argv, "--rounds", "3"));
  const std::uint64_t fire_n = std::stoull(Arg(argc, argv, "--fire", "100000"));
  const std::string scratch =
      std::filesystem::temp_directory_path() / "delayd-cluster-scale-bench";
  std::filesystem::create_directories(scratch);
  auto pg = StartPostgres();
  if (!pg) return 1;
  Figures f[3];
  for (int round = 0; round < rounds; ++round) {
    for (int n = 1; n <= 3; ++n)
      Round(*pg, scratch, n, dur, fire_n, f[n - 1], round);
  }
  // Ratios to one node in the same round, as ranges over the rounds.
  auto range = [&](std::vector<double> Figures::*field, int n) {
    double lo = 1e18, hi = 0;
    for (int r = 0; r < rounds; ++r) {
      const double x = (f[n - 1].*field)[r] / (f[0].*field)[r];
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    char out[64];
    std::snprintf(out, sizeof out, "%.2f-%.2fx", lo, hi);
    return std::string(out);
  };
  for (int n = 2; n <= 3; ++n) {
    std::printf(
        "%d nodes against 1, per round: Batch %s, unary %s, firing %s, 2k/s "
        "lateness p50 %s, p99 %s\n",
        n, range(&Figures::batch, n).c_str(), range(&Figures::unary, n).c_str(),
        range(&Figures::fire, n).c_str(), range(&Figures::p50, n).c_str(),
        range(&Figures::p99, n).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace delayd::bench

int main(int argc, char** argv) { return delayd::bench::Main(argc, argv); }
