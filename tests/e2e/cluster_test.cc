// Two delayd nodes on one PostgreSQL (--advertise), as real processes:
// they split the partitions; a timer is taken by the node that owns its
// partition (the other refuses it: UNAVAILABLE, naming the partition); when
// a node is killed (kill -9) the other takes its partitions once their
// leases expire and fires their timers, none early, none lost; a node
// stopped with SIGTERM gives its leases back and the other takes them at
// once.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "delayd/v1/delayd.grpc.pb.h"
#include "tests/common/daemon_process.h"
#include "tests/common/postgres_server.h"
#include "tests/server/test_client.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::PostgresServer;

// Whether `done()` came true within `timeout` (checked every 10 ms).
template <typename Done>
bool Eventually(Done done, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

std::unique_ptr<DaemonProcess> Node(const std::string& url,
                                    const std::string& name) {
  return std::make_unique<DaemonProcess>(
      DELAYD_BINARY,
      std::vector<std::string>{"--store", url, "--node-id", name, "--advertise",
                               name + ".test:1", "--lease-ttl", "1s",
                               "--shutdown-grace", "0s"});
}

std::unique_ptr<v1::Delayd::Stub> StubOf(const DaemonProcess& d) {
  return v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
}

grpc::Status Set(v1::Delayd::Stub& stub, const std::string& key,
                 WallNanos fire_time, v1::SetTimerResponse* out) {
  v1::SetTimerRequest req;
  req.set_namespace_("jobs");
  req.set_key(key);
  req.set_payload("p-" + key);
  *req.mutable_fire_time() = testing::FromNanos(fire_time);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  return stub.SetTimer(&ctx, req, out);
}

// A worker on one node: reads and acknowledges; remembers each key's
// delivery time and fire time.
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
        v1::AckRequest ack;
        ack.set_namespace_("jobs");
        const WallNanos now = WallNow();
        {
          std::lock_guard lock(mu_);
          for (const auto& e : msg.events()) {
            got_[e.key()] = {now, testing::ToNanos(e.fire_time())};
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
  // Key -> (received, fire time).
  std::map<std::string, std::pair<WallNanos, WallNanos>> got() {
    std::lock_guard lock(mu_);
    return got_;
  }

 private:
  std::unique_ptr<v1::Delayd::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, std::pair<WallNanos, WallNanos>> got_;
};

class Cluster : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    pg_ = PostgresServer::Start(&error);
    ASSERT_NE(pg_, nullptr) << error;
    db_ = pg_->NewDatabase();
    url_ = pg_->Url(db_);
  }
  // Partitions each live owner holds, as the database says.
  std::string Owners() {
    return pg_->Exec(db_,
                     "SELECT string_agg(owner || ':' || n, ',' ORDER BY "
                     "owner) FROM (SELECT owner, count(*) AS n FROM "
                     "delayd_leases WHERE expires_at > now() GROUP BY owner) "
                     "AS o");
  }
  // Sets `n` timers due at `fire_time`, each on whichever node takes it
  // (as a client would, trying the nodes again while partitions move, for
  // up to 10 s); the key's node goes to `placed`.
  static void SetAll(int n, WallNanos fire_time,
                     const std::vector<v1::Delayd::Stub*>& nodes,
                     std::map<std::string, int>* placed) {
    for (int i = 0; i < n; ++i) {
      const std::string key = "job-" + std::to_string(i);
      const bool set = Eventually(
          [&] {
            for (int k = 0; k < static_cast<int>(nodes.size()); ++k) {
              v1::SetTimerResponse resp;
              const grpc::Status s = Set(*nodes[k], key, fire_time, &resp);
              if (s.ok()) {
                (*placed)[key] = k;
                return true;
              }
              EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
              EXPECT_NE(s.error_message().find("owned by another node"),
                        std::string::npos)
                  << s.error_message();
            }
            return false;
          },
          10s);
      ASSERT_TRUE(set) << key << " taken by no node";
    }
  }

  std::unique_ptr<PostgresServer> pg_;
  std::string db_, url_;
};

TEST_F(Cluster, AKilledNodesTimersFireOnTheOtherNoneEarlyNoneLost) {
  auto a = Node(url_, "a");
  ASSERT_TRUE(a->WaitForPort(30s)) << a->output();
  auto b = Node(url_, "b");
  ASSERT_TRUE(b->WaitForPort(30s)) << b->output();
  ASSERT_TRUE(Eventually([&] { return Owners() == "a:32,b:32"; }, 20s))
      << Owners() << "\n"
      << a->output() << b->output();
  ASSERT_TRUE(a->WaitForOutput("loaded in", 10s)) << a->output();
  ASSERT_TRUE(b->WaitForOutput("loaded in", 10s)) << b->output();
  Worker at_b(*b);
  auto stub_a = StubOf(*a), stub_b = StubOf(*b);
  std::map<std::string, int> placed;
  // Due before a's leases can have expired: b fires them as overdue.
  const WallNanos due = WallNow() + 1'500'000'000;
  SetAll(100, due, {stub_a.get(), stub_b.get()}, &placed);
  int on_a = 0;
  for (const auto& [key, node] : placed) on_a += node == 0;
  EXPECT_GT(on_a, 20);
  EXPECT_LT(on_a, 80);

  a->Stop(SIGKILL, 10s);
  ASSERT_TRUE(Eventually([&] { return Owners() == "b:64"; }, 10s)) << Owners();
  ASSERT_TRUE(Eventually([&] { return at_b.got().size() == 100; }, 30s))
      << at_b.got().size() << " of 100\n"
      << b->output();
  for (const auto& [key, times] : at_b.got()) {
    EXPECT_GE(times.first, due) << key << " fired early";
    EXPECT_EQ(times.second, due) << key;
  }
  // b takes calls for every key now.
  v1::SetTimerResponse resp;
  for (const auto& [key, node] : placed) {
    ASSERT_TRUE(Set(*stub_b, key, WallNow() + 60'000'000'000, &resp).ok());
  }
}

TEST_F(Cluster, ANodeStoppedWithSigtermHandsItsPartitionsOverAtOnce) {
  auto a = Node(url_, "a");
  ASSERT_TRUE(a->WaitForPort(30s)) << a->output();
  auto b = Node(url_, "b");
  ASSERT_TRUE(b->WaitForPort(30s)) << b->output();
  ASSERT_TRUE(Eventually([&] { return Owners() == "a:32,b:32"; }, 20s))
      << Owners();
  auto stub_a = StubOf(*a), stub_b = StubOf(*b);
  std::map<std::string, int> placed;
  SetAll(40, WallNow() + 3'600'000'000'000, {stub_a.get(), stub_b.get()},
         &placed);
  EXPECT_EQ(a->Stop(SIGTERM, 30s), 0) << a->output();
  const auto stopped = std::chrono::steady_clock::now();
  // Given back and told, not expired: b takes and loads them at once (the
  // bound leaves room for a loaded machine).
  ASSERT_TRUE(Eventually(
      [&] {
        v1::GetTimerRequest req;
        req.set_namespace_("jobs");
        for (const auto& [key, node] : placed) {
          req.set_key(key);
          grpc::ClientContext ctx;
          v1::Timer t;
          if (!stub_b->GetTimer(&ctx, req, &t).ok()) return false;
        }
        return true;
      },
      10s))
      << b->output();
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 2s);
}

// Policies live in the database for the whole cluster: one set on node a
// applies on node b at once (a notification; b also reads them every
// 30 s, longer than this test waits).
TEST_F(Cluster, APolicySetOnOneNodeAppliesOnTheOther) {
  auto a = Node(url_, "a");
  ASSERT_TRUE(a->WaitForPort(30s)) << a->output();
  auto b = Node(url_, "b");
  ASSERT_TRUE(b->WaitForPort(30s)) << b->output();
  auto stub_a = StubOf(*a), stub_b = StubOf(*b);
  v1::SetPolicyRequest set;
  set.set_namespace_("jobs");
  set.mutable_policy()->set_max_attempts(3);
  set.mutable_policy()->set_paused(true);
  v1::Policy stored;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_a->SetPolicy(&ctx, set, &stored).ok());
  auto policy_at_b = [&] {
    v1::GetPolicyRequest get;
    get.set_namespace_("jobs");
    grpc::ClientContext c;
    v1::Policy p;
    EXPECT_TRUE(stub_b->GetPolicy(&c, get, &p).ok());
    return p;
  };
  ASSERT_TRUE(Eventually(
      [&] {
        const v1::Policy p = policy_at_b();
        return p.max_attempts() == 3 && p.paused();
      },
      5s))
      << b->output();
  // And back to the default.
  set.clear_policy();
  grpc::ClientContext reset;
  ASSERT_TRUE(stub_a->SetPolicy(&reset, set, &stored).ok());
  ASSERT_TRUE(Eventually(
      [&] {
        const v1::Policy p = policy_at_b();
        return p.max_attempts() == 0 && !p.paused();
      },
      5s))
      << b->output();
}

}  // namespace
}  // namespace delayd
