// Hand-overs answer no wrong answers: three nodes hold timers that stay
// pending while each node in turn is restarted (SIGTERM, then kill -9) and
// takes its partitions back. Meanwhile every key is read (GetTimer) and
// moved to the time it already has (MoveTimer) through every node, every
// few milliseconds, and the namespace is listed page by page. A node that
// does not hold a key's partition loaded yet must answer UNAVAILABLE
// (retryable), never NOT_FOUND, and a listing is whole or refused.
#include <signal.h>

#include <array>
#include <atomic>

#include "tests/e2e/cluster_harness.h"

namespace delayd::testing {
namespace {

// What the readers were told, by call and status code.
struct Tally {
  std::mutex mu;
  std::map<std::string, std::map<int, int>> codes;  // call -> code -> count
  std::vector<std::string> wrong;                   // the first few
  void Add(const std::string& call, const grpc::Status& s,
           const std::string& what = "") {
    std::lock_guard lock(mu);
    ++codes[call][s.error_code()];
    // (CANCELLED: a call in flight on a node stopped with no grace.)
    const bool expected =
        s.ok() || s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
        s.error_code() == grpc::StatusCode::CANCELLED;
    if ((!expected || !what.empty()) && wrong.size() < 20) {
      wrong.push_back(call + ": " + std::to_string(s.error_code()) + " " +
                      s.error_message() + " " + what);
    }
  }
  int Count(const std::string& call, grpc::StatusCode code) {
    std::lock_guard lock(mu);
    return codes[call][code];
  }
};

class HandOver : public Cluster {
 protected:
  static constexpr int kKeys = 48;

  // The stub of node i, replaced when it restarts (empty while it is down).
  std::shared_ptr<v1::Delayd::Stub> StubAt(int i) {
    std::lock_guard lock(stubs_mu_);
    return stubs_[i];
  }
  void SetStub(int i, const DaemonProcess* d) {
    std::lock_guard lock(stubs_mu_);
    stubs_[i] = d == nullptr ? nullptr : std::shared_ptr(StubOf(*d));
  }

  // Reads and moves every key through node i until `stop`.
  void Probe(int i, WallNanos fire_time, const std::atomic<bool>& stop) {
    while (!stop) {
      auto stub = StubAt(i);
      if (!stub) {
        std::this_thread::sleep_for(2ms);  // The node is down; polls again.
        continue;
      }
      for (int k = 0; k < kKeys && !stop; ++k) {
        const std::string key = "k" + std::to_string(k);
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 2s);
        v1::GetTimerRequest get;
        get.set_namespace_("jobs");
        get.set_key(key);
        v1::Timer t;
        const grpc::Status s = stub->GetTimer(&ctx, get, &t);
        tally_.Add("GetTimer", s,
                   s.ok() && t.payload() != "p-" + key
                       ? "payload " + t.payload()
                       : "");
        if (k % 8 != i) continue;
        grpc::ClientContext move_ctx;
        move_ctx.set_deadline(std::chrono::system_clock::now() + 2s);
        v1::MoveTimerRequest move;
        move.set_namespace_("jobs");
        move.set_key(key);
        *move.mutable_fire_time() = FromNanos(fire_time);
        v1::MoveTimerResponse moved;
        tally_.Add("MoveTimer", stub->MoveTimer(&move_ctx, move, &moved));
      }
    }
  }

  // Lists the namespace through node i, page by page, until `stop`: each
  // listing that succeeds whole holds every key once.
  void List(int i, const std::atomic<bool>& stop) {
    while (!stop) {
      auto stub = StubAt(i);
      if (!stub) {
        std::this_thread::sleep_for(2ms);  // The node is down; polls again.
        continue;
      }
      std::set<std::string> keys;
      std::string token;
      grpc::Status s;
      do {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 2s);
        v1::ListTimersRequest req;
        req.set_namespace_("jobs");
        req.set_page_token(token);
        v1::ListTimersResponse page;
        s = stub->ListTimers(&ctx, req, &page);
        for (const auto& t : page.timers()) keys.insert(t.key());
        token = page.next_page_token();
      } while (s.ok() && !token.empty() && !stop);
      if (stop) break;
      tally_.Add("ListTimers", s,
                 s.ok() && keys.size() != kKeys
                     ? "a whole listing held " + std::to_string(keys.size())
                     : "");
    }
  }

  std::mutex stubs_mu_;
  std::array<std::shared_ptr<v1::Delayd::Stub>, 3> stubs_;
  Tally tally_;
};

TEST_F(HandOver, RestartedNodesNeverAnswerNotFoundForPendingTimers) {
  const std::array<std::string, 3> names = {"a", "b", "c"};
  std::array<std::unique_ptr<DaemonProcess>, 3> nodes;
  for (int i = 0; i < 3; ++i) {
    nodes[i] = Node(names[i]);
    ASSERT_TRUE(nodes[i]->WaitForPort(30s)) << nodes[i]->output();
    SetStub(i, nodes[i].get());
  }
  auto owners = [&] {
    const std::string o = Owners();
    return o.empty() ? 0 : std::count(o.begin(), o.end(), ',') + 1;
  };
  ASSERT_TRUE(Eventually([&] { return owners() == 3; }, 20s)) << Owners();
  const WallNanos fire_time = WallNow() + 3'600'000'000'000;
  std::vector<v1::Delayd::Stub*> all;
  for (int i = 0; i < 3; ++i) all.push_back(StubAt(i).get());
  std::vector<std::shared_ptr<v1::Delayd::Stub>> keep = {StubAt(0), StubAt(1),
                                                         StubAt(2)};
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = "k" + std::to_string(k);
    ASSERT_TRUE(Eventually(
        [&] {
          v1::SetTimerResponse resp;
          return Set(*all[k % 3], key, fire_time, &resp).ok();
        },
        10s))
        << key;
  }

  std::atomic<bool> stop{false};
  std::vector<std::thread> probes;
  for (int i = 0; i < 3; ++i) {
    probes.emplace_back([&, i] { Probe(i, fire_time, stop); });
    probes.emplace_back([&, i] { List(i, stop); });
  }
  // Each node in turn: SIGTERM and start again, then kill -9 and start
  // again; each time the test waits until it holds partitions once more.
  for (int round = 0; round < 6; ++round) {
    const int i = round % 3;
    SetStub(i, nullptr);
    const int signo = round < 3 ? SIGTERM : SIGKILL;
    nodes[i]->Stop(signo, 30s);
    if (signo == SIGKILL) {
      // The others take its partitions once its leases lapse.
      ASSERT_TRUE(Eventually([&] { return owners() == 2; }, 20s)) << Owners();
    }
    nodes[i] = Node(names[i]);
    ASSERT_TRUE(nodes[i]->WaitForPort(30s)) << nodes[i]->output();
    SetStub(i, nodes[i].get());
    ASSERT_TRUE(Eventually([&] { return owners() == 3; }, 20s)) << Owners();
    ASSERT_TRUE(nodes[i]->WaitForOutput("loaded in", 20s))
        << nodes[i]->output();
  }
  stop = true;
  for (auto& t : probes) t.join();

  std::lock_guard lock(tally_.mu);
  for (const std::string& w : tally_.wrong) ADD_FAILURE() << w;
  for (const char* call : {"GetTimer", "MoveTimer", "ListTimers"}) {
    EXPECT_EQ(tally_.codes[call][grpc::StatusCode::NOT_FOUND], 0) << call;
    EXPECT_GT(tally_.codes[call][grpc::StatusCode::OK], 0) << call;
    std::string seen;
    for (const auto& [code, n] : tally_.codes[call]) {
      seen += " " + std::to_string(code) + ":" + std::to_string(n);
    }
    std::printf("%s:%s\n", call, seen.c_str());
  }
}

}  // namespace
}  // namespace delayd::testing
