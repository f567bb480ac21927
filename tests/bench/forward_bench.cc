// What forwarding costs in a two-node delayd cluster on one PostgreSQL
// server this bench starts (127.0.0.1, an OS-picked port, stopped by PID):
// the same calls, on keys node b owns, sent to b (direct) and to a (which
// forwards them to b), interleaved, --reps times each:
//   unary      SetTimer, 1 call in flight (latency) and 32 (throughput);
//   batch      Batch of 100 sets of b's keys: direct, and through a (sent
//              on whole), and 100 sets half of each node's keys through a
//              (split in two and joined);
//   delivery   20,000 ready events of b's partitions taken and acknowledged
//              by one worker (max_in_flight 1000) on b (direct) and on a
//              (relayed from b, its acks forwarded to b).
// Every set is of a key not set before.
// Prints each rate per repetition and the ratio forwarded / direct.
//
// Usage: forward_bench [--reps 3] [--seconds 3]
#include <signal.h>

#include <fstream>
#include <map>

#include "server/common/stable_hash.h"
#include "tests/bench/bench_client.h"
#include "tests/common/postgres_server.h"
#include "tests/common/temp_dir.h"

namespace delayd::bench {
namespace {

using testing::DaemonProcess;
using testing::PostgresServer;

// Keys of namespace "fwd" whose partitions are in `parts` ("," separated
// list with commas around it), `n` of them from `start`.
std::vector<std::string> KeysIn(const std::string& parts, int n, int start) {
  std::vector<std::string> keys;
  for (int i = start; static_cast<int>(keys.size()) < n; ++i) {
    // (Appended: GCC 12 warns, falsely, on "," + ... once inlined.)
    std::string key = "k";
    key += std::to_string(i);
    std::string p = ",";
    p += std::to_string(StablePartition("fwd", key, 64));
    p += ",";
    if (parts.find(p) != std::string::npos) keys.push_back(key);
  }
  return keys;
}

// Keys of one node's partitions, each handed out once (every set is a new
// timer, as most users' keys are: setting the same few rows again and again
// measures PostgreSQL's dead rows, not the calls), from any thread.
class KeyPool {
 public:
  KeyPool(const std::string& parts, int n, int start)
      : keys_(KeysIn(parts, n, start)) {}
  const std::string& Next() { return keys_[next_.fetch_add(1) % keys_.size()]; }

 private:
  const std::vector<std::string> keys_;
  std::atomic<std::size_t> next_{0};
};

// SetTimer/s to `stub` with `concurrency` calls in flight, keys from `keys`.
double UnaryRate(v1::Delayd::Stub& stub, KeyPool& keys, int concurrency,
                 std::chrono::milliseconds d) {
  std::vector<CallSlot<v1::SetTimerRequest, v1::SetTimerResponse>> slots(
      concurrency);
  std::atomic<int> failed{0};
  const double rate = ClosedLoop(concurrency, d, [&](int s, auto done) {
    auto& slot = slots[s];
    slot.req.set_namespace_("fwd");
    slot.req.set_key(keys.Next());
    slot.req.set_payload("payload-16-bytes");
    slot.req.mutable_delay()->set_seconds(3600);
    stub.async()->SetTimer(slot.NewContext(""), &slot.req, &slot.resp,
                           [done, &failed](grpc::Status st) {
                             if (!st.ok()) failed.fetch_add(1);
                             done(st.ok());
                           });
  });
  if (failed.load() != 0) {
    std::fprintf(stderr, "%d calls failed\n", failed.load());
  }
  return rate;
}

// Items/s of Batches of 100 sets to `stub`, 4 calls in flight, keys from
// `pools` in turn.
double BatchRate(v1::Delayd::Stub& stub, const std::vector<KeyPool*>& pools,
                 std::chrono::milliseconds d) {
  constexpr int kPerCall = 100;
  constexpr int kInFlight = 4;
  std::vector<CallSlot<v1::BatchRequest, v1::BatchResponse>> slots(kInFlight);
  for (auto& slot : slots) {
    for (int i = 0; i < kPerCall; ++i) {
      auto* set = slot.req.add_operations()->mutable_set();
      set->set_namespace_("fwd");
      set->set_payload("payload-16-bytes");
      set->mutable_delay()->set_seconds(3600);
    }
  }
  std::atomic<int> failed{0};
  const double calls = ClosedLoop(kInFlight, d, [&](int s, auto done) {
    auto& slot = slots[s];
    for (int i = 0; i < kPerCall; ++i) {
      slot.req.mutable_operations(i)->mutable_set()->set_key(
          pools[i % pools.size()]->Next());
    }
    stub.async()->Batch(slot.NewContext(""), &slot.req, &slot.resp,
                        [done, &slot, &failed](grpc::Status st) {
                          bool ok = st.ok();
                          for (const auto& r : slot.resp.results()) {
                            ok = ok && r.code() == 0;
                          }
                          if (!ok) failed.fetch_add(1);
                          done(ok);
                        });
  });
  if (failed.load() != 0) {
    std::fprintf(stderr, "%d calls failed\n", failed.load());
  }
  return calls * kPerCall;
}

// Sets `n` timers of `keys` due now through `setter` (Batch, on b), waits
// until they are ready events, then has one worker on `worker` take and
// acknowledge them all: events/s from its Subscribe to the last Ack.
double DeliveryRate(v1::Delayd::Stub& setter, v1::Delayd::Stub& worker,
                    KeyPool& keys, int n) {
  for (int done = 0; done < n; done += 100) {
    v1::BatchRequest req;
    for (int i = 0; i < 100; ++i) {
      auto* set = req.add_operations()->mutable_set();
      set->set_namespace_("fwd");
      set->set_key(keys.Next());
      set->set_payload("payload-16-bytes");
      set->mutable_delay();  // Due now.
    }
    grpc::ClientContext ctx;
    v1::BatchResponse resp;
    if (!setter.Batch(&ctx, req, &resp).ok()) return 0;
    for (const auto& r : resp.results()) {
      if (r.code() != 0) {
        std::fprintf(stderr, "a set failed: %s\n", r.message().c_str());
        return 0;
      }
    }
  }
  for (const auto until = Clock::now() + 60s; Clock::now() < until;) {
    v1::StatsRequest req;
    req.set_namespace_("fwd");
    grpc::ClientContext ctx;
    v1::StatsResponse resp;
    if (setter.Stats(&ctx, req, &resp).ok() && resp.namespaces_size() == 1 &&
        resp.namespaces(0).ready_events() >= static_cast<std::uint64_t>(n)) {
      break;
    }
    std::this_thread::sleep_for(10ms);  // Polls the figures.
  }
  const auto start = Clock::now();
  v1::SubscribeRequest sub;
  sub.set_namespace_("fwd");
  sub.set_max_in_flight(1000);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 120s);
  auto reader = worker.Subscribe(&ctx, sub);
  v1::SubscribeResponse msg;
  int got = 0;
  while (got < n && reader->Read(&msg)) {
    if (msg.events_size() == 0) continue;
    v1::AckRequest ack;
    ack.set_namespace_("fwd");
    for (const auto& e : msg.events()) ack.add_event_ids(e.id());
    grpc::ClientContext actx;
    v1::AckResponse acked;
    if (!worker.Ack(&actx, ack, &acked).ok()) return 0;
    got += static_cast<int>(acked.acked());
  }
  if (got < n) {
    std::fprintf(stderr, "the worker got %d of %d events\n", got, n);
    return 0;
  }
  const double rate =
      n / std::chrono::duration<double>(Clock::now() - start).count();
  ctx.TryCancel();
  reader->Finish();
  return rate;
}

std::string Range(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f-%.2f", *lo, *hi);
  return buf;
}

int Main(int argc, char** argv) {
  int reps = 3;
  int seconds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--reps") reps = std::atoi(argv[i + 1]);
    if (flag == "--seconds") seconds = std::atoi(argv[i + 1]);
  }
  const std::chrono::milliseconds d(seconds * 1000);
  std::string error;
  auto pg = PostgresServer::Start(&error);
  if (!pg) {
    std::fprintf(stderr, "PostgreSQL: %s\n", error.c_str());
    return 1;
  }
  const std::string db = pg->NewDatabase();
  testing::TempDir dir;
  std::ofstream(dir / "cluster-token") << "bench-cluster-token-0123456789\n";
  auto node = [&](const std::string& name) {
    return std::make_unique<DaemonProcess>(
        DELAYD_BINARY,
        std::vector<std::string>{"--store", pg->Url(db), "--node-id", name,
                                 "--advertise", "127.0.0.1:0",
                                 "--cluster-token-file", dir / "cluster-token"},
        30s);
  };
  auto a = node("a");
  auto b = node("b");
  if (!a->ok() || !b->ok()) {
    std::fprintf(stderr, "a node did not start\n");
    return 1;
  }
  const auto until = Clock::now() + 30s;
  while (Clock::now() < until &&
         pg->Exec(db, "SELECT count(*) FROM delayd_leases WHERE owner = 'b'") !=
             "32") {
    std::this_thread::sleep_for(20ms);  // Polls the leases.
  }
  auto parts = [&](const char* owner) {
    std::string list = ",";
    list += pg->Exec(db, std::string("SELECT string_agg(part::text, ',') FROM "
                                     "delayd_leases WHERE owner = '") +
                             owner + "'");
    list += ",";
    return list;
  };
  const std::string of_a = parts("a"), of_b = parts("b");
  KeyPool b_keys(of_b, 1'500'000, 0), a_keys(of_a, 500'000, 0);
  auto stub = [](const DaemonProcess& p) {
    return v1::Delayd::NewStub(
        grpc::CreateChannel(p.address(), grpc::InsecureChannelCredentials()));
  };
  auto sa = stub(*a), sb = stub(*b);
  // Each node knows the owners after its next lease round.
  while (UnaryRate(*sa, b_keys, 1, 200ms) == 0) {
  }
  std::map<std::string, std::vector<double>> rate, ratio;
  for (int r = 0; r < reps; ++r) {
    for (int c : {1, 32}) {
      const std::string name = "unary c=" + std::to_string(c);
      const double direct = UnaryRate(*sb, b_keys, c, d);
      const double fwd = UnaryRate(*sa, b_keys, c, d);
      rate[name + " direct"].push_back(direct);
      rate[name + " forwarded"].push_back(fwd);
      ratio[name].push_back(fwd / direct);
    }
    const double direct = BatchRate(*sb, {&b_keys}, d);
    const double whole = BatchRate(*sa, {&b_keys}, d);
    const double split = BatchRate(*sa, {&b_keys, &a_keys}, d);
    rate["batch direct"].push_back(direct);
    rate["batch forwarded whole"].push_back(whole);
    rate["batch split in two"].push_back(split);
    ratio["batch forwarded whole"].push_back(whole / direct);
    ratio["batch split in two"].push_back(split / direct);
    const double worker_direct = DeliveryRate(*sb, *sb, b_keys, 20'000);
    const double worker_relayed = DeliveryRate(*sb, *sa, b_keys, 20'000);
    rate["delivery to a worker direct"].push_back(worker_direct);
    rate["delivery to a worker relayed"].push_back(worker_relayed);
    ratio["delivery relayed"].push_back(worker_relayed / worker_direct);
  }
  std::printf("two nodes on one PostgreSQL; keys of node b's partitions\n");
  for (const auto& [name, v] : rate) {
    std::printf("%-28s", name.c_str());
    for (double x : v) std::printf(" %9.0f/s", x);
    std::printf("\n");
  }
  for (const auto& [name, v] : ratio) {
    std::printf("ratio %-22s %s (forwarded / direct, %d reps)\n", name.c_str(),
                Range(v).c_str(), reps);
  }
  b->Stop(SIGTERM, 30s);
  a->Stop(SIGTERM, 30s);
  return 0;
}

}  // namespace
}  // namespace delayd::bench

int main(int argc, char** argv) { return delayd::bench::Main(argc, argv); }
