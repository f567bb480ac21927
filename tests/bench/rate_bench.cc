// The dispatch-rate limit, measured: for each rate, a namespace with that
// policy (burst: the default, a second's worth) and a backlog of ready
// events larger than 12 s' worth, four workers taking them as fast as they
// can (acknowledged in batches by a thread of their own); events delivered
// per second over the 10 s that follow the first second (which holds the
// burst), against the set rate. Runs the
// real daemon (in memory) on loopback; bounded in time and count.
//
// Usage: rate_bench [--daemon PATH] [--runs N]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "delayd/v1/delayd.grpc.pb.h"
#include "tests/common/daemon_process.h"

namespace {

namespace v1 = delayd::v1;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Events delivered per second over the 10 s from the first, at `rate`.
double Measure(v1::Delayd::Stub& stub, std::shared_ptr<grpc::Channel> ch,
               const std::string& ns, double rate) {
  {
    v1::SetPolicyRequest req;
    req.set_namespace_(ns);
    req.mutable_policy()->set_max_dispatch_rate(rate);
    v1::Policy resp;
    grpc::ClientContext ctx;
    if (!stub.SetPolicy(&ctx, req, &resp).ok()) return 0;
  }
  const std::size_t backlog = static_cast<std::size_t>(rate * 13) + 100;
  for (std::size_t base = 0; base < backlog; base += 1000) {
    v1::BatchRequest req;
    for (std::size_t i = base; i < std::min(backlog, base + 1000); ++i) {
      auto* set = req.add_operations()->mutable_set();
      set->set_namespace_(ns);
      set->set_key("k" + std::to_string(i));
      set->mutable_delay();
    }
    v1::BatchResponse resp;
    grpc::ClientContext ctx;
    if (!stub.Batch(&ctx, req, &resp).ok()) return 0;
  }
  std::mutex mu;
  std::vector<Clock::time_point> at;
  at.reserve(backlog);
  std::vector<std::uint64_t> to_ack;
  std::atomic<bool> done{false};
  const auto deadline = std::chrono::system_clock::now() + 14s;
  // Acks whatever arrived, every 5 ms, in calls of at most 10,000 ids.
  std::thread acker([&] {
    while (!done.load()) {
      std::this_thread::sleep_for(5ms);  // The pace of batched acks.
      std::vector<std::uint64_t> ids;
      {
        std::lock_guard lock(mu);
        ids.swap(to_ack);
      }
      for (std::size_t from = 0; from < ids.size(); from += 10'000) {
        v1::AckRequest ack;
        ack.set_namespace_(ns);
        for (std::size_t i = from; i < std::min(ids.size(), from + 10'000);
             ++i) {
          ack.add_event_ids(ids[i]);
        }
        v1::AckResponse acked;
        grpc::ClientContext ctx;
        stub.Ack(&ctx, ack, &acked);
      }
    }
  });
  std::vector<std::thread> workers;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts(4);
  for (int w = 0; w < 4; ++w) {
    contexts[w] = std::make_unique<grpc::ClientContext>();
    contexts[w]->set_deadline(deadline);
    workers.emplace_back([&, w] {
      auto s = v1::Delayd::NewStub(ch);
      v1::SubscribeRequest req;
      req.set_namespace_(ns);
      req.set_mode(v1::SubscribeRequest::WORKER);
      req.set_max_in_flight(10'000);
      auto reader = s->Subscribe(contexts[w].get(), req);
      v1::SubscribeResponse msg;
      while (reader->Read(&msg)) {
        if (msg.events_size() == 0) continue;
        const auto now = Clock::now();
        std::lock_guard lock(mu);
        at.insert(at.end(), msg.events_size(), now);
        for (const auto& e : msg.events()) to_ack.push_back(e.id());
      }
      reader->Finish();
    });
  }
  for (auto& t : workers) t.join();
  done = true;
  acker.join();
  std::sort(at.begin(), at.end());
  if (at.empty()) return 0;
  const auto from = std::lower_bound(at.begin(), at.end(), at.front() + 1s);
  const auto to = std::lower_bound(at.begin(), at.end(), at.front() + 11s);
  return static_cast<double>(to - from) / 10.0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string daemon = DELAYD_BINARY;
  int runs = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--daemon" && i + 1 < argc) {
      daemon = argv[++i];
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: rate_bench [--daemon PATH] [--runs N]\n");
      return 2;
    }
  }
  for (const double rate : {100.0, 1000.0, 10000.0}) {
    std::vector<double> ratios;
    for (int run = 0; run < runs; ++run) {
      delayd::testing::DaemonProcess d(daemon, {"--in-memory"});
      if (!d.ok()) {
        std::fprintf(stderr, "daemon did not start: %s\n", d.output().c_str());
        return 1;
      }
      auto ch =
          grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials());
      auto stub = v1::Delayd::NewStub(ch);
      const double got = Measure(*stub, ch, "rate", rate);
      ratios.push_back(got / rate);
      std::printf("rate %6.0f/s: delivered %8.1f/s over 10 s (%.4fx)\n", rate,
                  got, got / rate);
      std::fflush(stdout);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("rate %6.0f/s: %d runs, %.4fx .. %.4fx of the set rate\n", rate,
                runs, ratios.front(), ratios.back());
  }
  return 0;
}
