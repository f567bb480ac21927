// Fail-over of a delayd cluster (--nodes, default 3) on one PostgreSQL
// server this bench starts (127.0.0.1, an OS-picked port, stopped by PID),
// holding --pending far-future timers between the nodes (set once). Each
// round places 200 timers due 1 s later, through a node other than the
// round's victim (each node in turn), on which a worker reads; then:
//   kill     the victim is killed (SIGKILL) 500 ms before they are due: how
//            long after they were due the worker first got one of the
//            victim's (overdue by then), and the last of them;
//   sigterm  (alternate rounds) the victim is stopped with SIGTERM instead:
//            the same times, and how many reached the worker twice.
// The victim then starts again; the round ends once every node holds its
// share and has loaded it (how long that took is printed too). Every
// delivery is checked not early. Prints p50 and p99 of each.
//
// Usage: cluster_bench [--rounds N] [--nodes N] [--lease-ttl 5s]
//                      [--pending N]
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/common/stable_hash.h"
#include "tests/common/cluster_log.h"
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

// The nodes of one cluster on one database, restarted by name.
class Nodes {
 public:
  Nodes(PostgresServer& pg, int count, std::string ttl)
      : pg_(pg), db_(pg.NewDatabase()), ttl_(std::move(ttl)) {
    std::ofstream(dir_ / "cluster-token") << "bench-cluster-token-0123456789\n";
    for (int i = 0; i < count; ++i) names_.push_back(std::string(1, 'a' + i));
    for (const auto& name : names_) Start(name);
  }
  const std::vector<std::string>& names() const { return names_; }
  DaemonProcess& operator[](const std::string& name) { return *nodes_[name]; }
  void Start(const std::string& name) {
    nodes_[name] = std::make_unique<DaemonProcess>(
        DELAYD_BINARY,
        std::vector<std::string>{"--store", pg_.Url(db_), "--node-id", name,
                                 "--advertise", "127.0.0.1:0",
                                 "--cluster-token-file", dir_ / "cluster-token",
                                 "--lease-ttl", ttl_},
        30s);
  }
  // Whether every node owns its share of the 64 partitions and has loaded
  // what it owns (its log says so), within `timeout`.
  bool Settled(std::chrono::seconds timeout) {
    const int share = 64 / static_cast<int>(names_.size());
    for (auto until = Steady::now() + timeout; Steady::now() < until;
         std::this_thread::sleep_for(50ms)) {  // Polls the leases.
      bool all = true;
      last_.clear();
      for (const auto& name : names_) {
        const int owned = std::atoi(
            pg_.Exec(db_, "SELECT count(*) FROM delayd_leases WHERE owner = '" +
                              name + "' AND expires_at > now()")
                .c_str());
        const int loaded = testing::PartitionsLoaded(nodes_[name]->output());
        last_ += name + ": owns " + std::to_string(owned) + ", loaded " +
                 std::to_string(loaded) + "; ";
        all = all && owned >= share && loaded == owned;
      }
      if (all) return true;
    }
    return false;
  }
  // What Settled saw last.
  const std::string& last() const { return last_; }
  // The partitions `name` owns, as ",p1,p2,...,".
  std::string PartsOf(const std::string& name) {
    return "," +
           pg_.Exec(db_,
                    "SELECT string_agg(part::text, ',') FROM delayd_leases "
                    "WHERE owner = '" +
                        name + "'") +
           ",";
  }

 private:
  PostgresServer& pg_;
  const std::string db_;
  const std::string ttl_;
  testing::TempDir dir_;
  std::vector<std::string> names_;
  std::map<std::string, std::unique_ptr<DaemonProcess>> nodes_;
  std::string last_;
};

int Main(int argc, char** argv) {
  int rounds = 20, count = 3;
  std::string ttl = "5s";
  int pending = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (flag == "--lease-ttl") ttl = argv[i + 1];
    if (flag == "--pending") pending = std::atoi(argv[i + 1]);
    if (flag == "--nodes") count = std::atoi(argv[i + 1]);
  }
  std::string error;
  auto pg = PostgresServer::Start(&error);
  if (!pg) {
    std::fprintf(stderr, "PostgreSQL: %s\n", error.c_str());
    return 1;
  }
  Nodes nodes(*pg, count, ttl);
  if (!nodes.Settled(60s)) {
    std::fprintf(stderr, "the nodes did not settle: %s\n",
                 nodes.last().c_str());
    return 1;
  }
  {
    const auto started = Steady::now();
    std::vector<std::string> far;
    for (int i = 0; i < pending; ++i) far.push_back("far-" + std::to_string(i));
    auto via = StubOf(nodes["a"]);
    Place(far, WallNow() + 86'400'000'000'000, *via);
    std::printf("%d far-future timers set in %.1f s\n", pending,
                Ms(Steady::now() - started) / 1000);
  }
  std::vector<double> kill_first, kill_last, term_first, term_last, settle;
  int term_repeats = 0, early = 0, lost = 0;
  for (int round = 0; round < rounds; ++round) {
    const bool kill = round % 2 == 0;
    // Each node in turn (a kill and a stop each, over 2N rounds).
    const std::string victim = nodes.names()[(round / 2) % count];
    const std::string other = nodes.names()[(round / 2 + 1) % count];
    auto via = StubOf(nodes[other]);
    Worker worker(nodes[other]);
    std::vector<std::string> soon;
    for (int i = 0; i < 200; ++i) {
      soon.push_back("soon-" + std::to_string(round) + "-" + std::to_string(i));
    }
    const WallNanos due = WallNow() + 1'000'000'000;
    Place(soon, due, *via);
    const std::string parts = nodes.PartsOf(victim);
    std::vector<std::string> of_victim;
    for (const std::string& key : soon) {
      const std::string part =
          "," + std::to_string(StablePartition("jobs", key, 64)) + ",";
      if (parts.find(part) != std::string::npos) of_victim.push_back(key);
    }
    std::this_thread::sleep_until(
        Steady::now() + std::chrono::nanoseconds(due - WallNow()) - 500ms);
    const auto due_at = Steady::now() + 500ms;
    nodes[victim].Stop(kill ? SIGKILL : SIGTERM, 30s);
    const auto deadline = Steady::now() + 60s;
    std::map<std::string, Steady::time_point> got;
    while (Steady::now() < deadline) {
      got = worker.first();
      if (std::all_of(of_victim.begin(), of_victim.end(),
                      [&](const std::string& k) { return got.contains(k); })) {
        break;
      }
      std::this_thread::sleep_for(5ms);  // Polls the worker's deliveries.
    }
    Steady::time_point first = Steady::time_point::max(), last{};
    for (const std::string& k : of_victim) {
      auto it = got.find(k);
      if (it == got.end()) {
        ++lost;
        continue;
      }
      first = std::min(first, it->second);
      last = std::max(last, it->second);
    }
    if (!of_victim.empty() && first != Steady::time_point::max()) {
      (kill ? kill_first : term_first).push_back(Ms(first - due_at));
      (kill ? kill_last : term_last).push_back(Ms(last - due_at));
    }
    if (!kill) term_repeats += worker.repeats();
    early += worker.early();
    // The victim starts again and takes its share back.
    const auto restarted = Steady::now();
    nodes.Start(victim);
    if (!nodes.Settled(120s)) {
      std::fprintf(stderr, "round %d: the nodes did not settle: %s\n",
                   round + 1, nodes.last().c_str());
      return 1;
    }
    settle.push_back(Ms(Steady::now() - restarted));
    std::printf(
        "round %d (%s of %s): %zu of its timers, first %.0f ms after due, "
        "last %.0f ms; back and settled in %.1f s\n",
        round + 1, kill ? "kill -9" : "SIGTERM", victim.c_str(),
        of_victim.size(), Ms(first - due_at), Ms(last - due_at),
        settle.back() / 1000);
    std::fflush(stdout);
  }
  {
    // (Each node's share, summed: the far-future timers are all there.)
    v1::StatsResponse stats;
    grpc::ClientContext ctx;
    StubOf(nodes["a"])->Stats(&ctx, v1::StatsRequest(), &stats);
    std::printf("pending timers at the end, cluster-wide: %llu\n",
                static_cast<unsigned long long>(stats.pending_timers()));
  }
  std::printf("\n%d nodes, lease TTL %s, %d pending far-future timers\n", count,
              ttl.c_str(), pending);
  std::printf("(timers due 500 ms after the kill or stop; times from due)\n");
  std::printf("kill -9, first delivery of its timers: %s\n",
              Percentiles(kill_first).c_str());
  std::printf("kill -9, last of them:                 %s\n",
              Percentiles(kill_last).c_str());
  std::printf("SIGTERM, first delivery:               %s\n",
              Percentiles(term_first).c_str());
  std::printf("SIGTERM, last of them:                 %s\n",
              Percentiles(term_last).c_str());
  std::printf("restart until every node holds its share, loaded: %s\n",
              Percentiles(settle).c_str());
  std::printf("delivered twice after SIGTERM: %d; early: %d; lost: %d\n",
              term_repeats, early, lost);
  return lost == 0 && early == 0 ? 0 : 1;
}

}  // namespace
}  // namespace delayd::bench

int main(int argc, char** argv) { return delayd::bench::Main(argc, argv); }
