// Fail-over of a two-node delayd cluster on one PostgreSQL server this
// bench starts (127.0.0.1, an OS-picked port, stopped by PID). Each round
// has a fresh database and two nodes (--lease-ttl, 64 partitions, 32 each)
// holding --pending far-future timers between them, plus 200 timers due
// 1 s after they are set. Then:
//   kill     node a is killed (SIGKILL) 500 ms before those are due: how
//            long after they were due b first delivers one of a's (overdue
//            by then), and the last of them;
//   sigterm  (alternate rounds) node a is stopped with SIGTERM instead: the
//            same times, and how many of a's timers reached b's worker
//            twice.
// Every delivery is checked not early. Prints p50 and p99 of each.
//
// Usage: cluster_bench [--rounds N] [--lease-ttl 5s] [--pending N]
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/common/stable_hash.h"
#include "tests/common/daemon_process.h"
#include "tests/common/postgres_server.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_client.h"

namespace delayd::bench {
namespace {

using namespace std::chrono_literals;
using delayd::testing::DaemonProcess;
using delayd::testing::PostgresServer;
using Steady = std::chrono::steady_clock;

std::unique_ptr<v1::Delayd::Stub> StubOf(const DaemonProcess& d) {
  return v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
}

// A worker on b: the first delivery time of each key, and repeats.
class Worker {
 public:
  explicit Worker(const DaemonProcess& d) : stub_(StubOf(d)) {
    v1::SubscribeRequest r;
    r.set_namespace_("jobs");
    r.set_mode(v1::SubscribeRequest::WORKER);
    r.set_max_in_flight(1000);
    reader_ = stub_->Subscribe(&ctx_, r);
    thread_ = std::thread([this] {
      v1::SubscribeResponse msg;
      while (reader_->Read(&msg)) {
        const auto now = Steady::now();
        const WallNanos wall = WallNow();
        v1::AckRequest ack;
        ack.set_namespace_("jobs");
        {
          std::lock_guard lock(mu_);
          for (const auto& e : msg.events()) {
            if (wall < testing::ToNanos(e.fire_time())) ++early_;
            if (!first_.emplace(e.key(), now).second) ++repeats_;
            ack.add_event_ids(e.id());
          }
        }
        if (ack.event_ids_size() == 0) continue;
        grpc::ClientContext ctx;
        v1::AckResponse resp;
        stub_->Ack(&ctx, ack, &resp);
      }
      reader_->Finish();
    });
  }
  ~Worker() {
    ctx_.TryCancel();
    thread_.join();
  }
  std::map<std::string, Steady::time_point> first() {
    std::lock_guard lock(mu_);
    return first_;
  }
  int repeats() {
    std::lock_guard lock(mu_);
    return repeats_;
  }
  int early() {
    std::lock_guard lock(mu_);
    return early_;
  }

 private:
  std::unique_ptr<v1::Delayd::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, Steady::time_point> first_;
  int repeats_ = 0, early_ = 0;
};

// Sets `keys` (due at `due`) in Batches through node `via` (which sends
// each operation to its key's owner), setting again what failed while
// partitions moved.
void Place(const std::vector<std::string>& keys, WallNanos due,
           v1::Delayd::Stub& via) {
  std::vector<std::string> left = keys;
  for (int pass = 0; !left.empty() && pass < 200; ++pass) {
    std::vector<std::string> next;
    for (std::size_t from = 0; from < left.size(); from += 1000) {
      const std::size_t to = std::min(left.size(), from + 1000);
      v1::BatchRequest req;
      for (std::size_t i = from; i < to; ++i) {
        auto* set = req.add_operations()->mutable_set();
        set->set_namespace_("jobs");
        set->set_key(left[i]);
        set->set_payload("p");
        *set->mutable_fire_time() = testing::FromNanos(due);
      }
      grpc::ClientContext ctx;
      v1::BatchResponse resp;
      const bool ok = via.Batch(&ctx, req, &resp).ok();
      for (std::size_t i = from; i < to; ++i) {
        if (!ok || resp.results(static_cast<int>(i - from)).code() != 0) {
          next.push_back(left[i]);
        }
      }
    }
    left.swap(next);
    if (!left.empty()) std::this_thread::sleep_for(50ms);  // Partitions move.
  }
}

double Ms(Steady::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

std::string Percentiles(std::vector<double> v) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * v.size()))];
  };
  char out[128];
  std::snprintf(out, sizeof out, "p50 %.0f ms, p99 %.0f ms (n=%zu)", at(0.5),
                at(0.99), v.size());
  return out;
}

int Main(int argc, char** argv) {
  int rounds = 20;
  std::string ttl = "5s";
  int pending = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (flag == "--lease-ttl") ttl = argv[i + 1];
    if (flag == "--pending") pending = std::atoi(argv[i + 1]);
  }
  std::string error;
  auto pg = PostgresServer::Start(&error);
  if (!pg) {
    std::fprintf(stderr, "PostgreSQL: %s\n", error.c_str());
    return 1;
  }
  testing::TempDir dir;
  std::ofstream(dir / "cluster-token") << "bench-cluster-token-0123456789\n";
  std::vector<double> kill_first, kill_last, term_first, term_last;
  int term_repeats = 0, early = 0, lost = 0;
  for (int round = 0; round < rounds; ++round) {
    const bool kill = round % 2 == 0;
    const std::string url = pg->Url(pg->NewDatabase());
    auto node = [&](const std::string& name) {
      return std::make_unique<DaemonProcess>(
          DELAYD_BINARY,
          std::vector<std::string>{"--store", url, "--node-id", name,
                                   "--advertise", "127.0.0.1:0",
                                   "--cluster-token-file",
                                   dir / "cluster-token", "--lease-ttl", ttl},
          30s);
    };
    auto a = node("a");
    auto b = node("b");
    if (!a->ok() || !b->ok()) {
      std::fprintf(stderr, "a node did not start\n");
      return 1;
    }
    // Until each holds its half.
    const std::string db = url.substr(url.rfind('/') + 1);
    for (auto until = Steady::now() + 30s;
         Steady::now() < until &&
         pg->Exec(db,
                  "SELECT count(*) FROM delayd_leases WHERE owner = 'b' AND "
                  "expires_at > now()") != "32";) {
      std::this_thread::sleep_for(20ms);  // Polls the leases.
    }
    auto sb = StubOf(*b);
    std::vector<std::string> far;
    for (int i = 0; i < pending; ++i) far.push_back("far-" + std::to_string(i));
    Place(far, WallNow() + 3'600'000'000'000, *sb);
    Worker worker(*b);
    std::vector<std::string> soon;
    for (int i = 0; i < 200; ++i) soon.push_back("soon-" + std::to_string(i));
    const WallNanos due = WallNow() + 1'000'000'000;
    Place(soon, due, *sb);
    // The keys of a's partitions, as the leases say.
    const std::string parts_of_a =
        "," +
        pg->Exec(db,
                 "SELECT string_agg(part::text, ',') FROM delayd_leases "
                 "WHERE owner = 'a'") +
        ",";
    std::vector<std::string> of_a;
    for (const std::string& key : soon) {
      const std::string part =
          "," + std::to_string(StablePartition("jobs", key, 64)) + ",";
      if (parts_of_a.find(part) != std::string::npos) of_a.push_back(key);
    }
    std::this_thread::sleep_until(
        Steady::now() + std::chrono::nanoseconds(due - WallNow()) - 500ms);
    const auto stopped = Steady::now();
    const auto due_at = stopped + 500ms;
    if (kill) {
      a->Stop(SIGKILL, 10s);
    } else {
      ::kill(a->pid(), SIGTERM);
    }
    const auto deadline = Steady::now() + 60s;
    std::map<std::string, Steady::time_point> got;
    while (Steady::now() < deadline) {
      got = worker.first();
      if (std::all_of(of_a.begin(), of_a.end(),
                      [&](const std::string& k) { return got.contains(k); })) {
        break;
      }
      std::this_thread::sleep_for(5ms);  // Polls the worker's deliveries.
    }
    Steady::time_point first = Steady::time_point::max(), last{};
    for (const std::string& k : of_a) {
      auto it = got.find(k);
      if (it == got.end()) {
        ++lost;
        continue;
      }
      first = std::min(first, it->second);
      last = std::max(last, it->second);
    }
    if (!of_a.empty() && first != Steady::time_point::max()) {
      (kill ? kill_first : term_first).push_back(Ms(first - due_at));
      (kill ? kill_last : term_last).push_back(Ms(last - due_at));
    }
    if (!kill) term_repeats += worker.repeats();
    early += worker.early();
    std::printf(
        "round %d (%s): %zu of a's timers, first %.0f ms after due, last "
        "%.0f ms\n",
        round + 1, kill ? "kill -9" : "SIGTERM", of_a.size(),
        Ms(first - due_at), Ms(last - due_at));
    std::fflush(stdout);
  }
  std::printf("\nlease TTL %s, %d pending far-future timers per round\n",
              ttl.c_str(), pending);
  std::printf("(timers due 500 ms after the kill or stop; times from due)\n");
  std::printf("kill -9, first delivery of a's timers: %s\n",
              Percentiles(kill_first).c_str());
  std::printf("kill -9, last of them:                 %s\n",
              Percentiles(kill_last).c_str());
  std::printf("SIGTERM, first delivery:               %s\n",
              Percentiles(term_first).c_str());
  std::printf("SIGTERM, last of them:                 %s\n",
              Percentiles(term_last).c_str());
  std::printf("delivered twice after SIGTERM: %d; early: %d; lost: %d\n",
              term_repeats, early, lost);
  return lost == 0 && early == 0 ? 0 : 1;
}

}  // namespace
}  // namespace delayd::bench

int main(int argc, char** argv) { return delayd::bench::Main(argc, argv); }
