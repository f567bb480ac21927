// Real delayd nodes of one cluster on a PostgreSQL the test starts: nodes,
// stubs, an acking worker, and what the database says of the leases.
#ifndef DELAYD_TESTS_E2E_CLUSTER_HARNESS_H_
#define DELAYD_TESTS_E2E_CLUSTER_HARNESS_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

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

namespace delayd::testing {

using namespace std::chrono_literals;

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

inline std::unique_ptr<v1::Delayd::Stub> StubOf(const DaemonProcess& d) {
  return v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
}

// A call's context with a 10 s deadline, and `token` as its bearer token
// if set.
inline void Prepare(grpc::ClientContext* ctx, const std::string& token = "") {
  ctx->set_deadline(std::chrono::system_clock::now() + 10s);
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
}

inline grpc::Status Set(v1::Delayd::Stub& stub, const std::string& key,
                        WallNanos fire_time, v1::SetTimerResponse* out,
                        const std::string& token = "",
                        const std::string& ns = "jobs") {
  v1::SetTimerRequest req;
  req.set_namespace_(ns);
  req.set_key(key);
  req.set_payload("p-" + key);
  *req.mutable_fire_time() = FromNanos(fire_time);
  grpc::ClientContext ctx;
  Prepare(&ctx, token);
  return stub.SetTimer(&ctx, req, out);
}

// A worker on one node: reads and acknowledges; remembers each key's
// delivery time and fire time, and how many times it came.
class Worker {
 public:
  explicit Worker(const DaemonProcess& d, std::string token = "")
      : stub_(StubOf(d)), token_(std::move(token)) {
    v1::SubscribeRequest r;
    r.set_namespace_("jobs");
    r.set_mode(v1::SubscribeRequest::WORKER);
    r.set_max_in_flight(1000);
    if (!token_.empty()) {
      ctx_.AddMetadata("authorization", "Bearer " + token_);
    }
    reader_ = stub_->Subscribe(&ctx_, r);
    thread_ = std::thread([this] { Run(); });
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
  // Deliveries of one key beyond its first.
  int again() {
    std::lock_guard lock(mu_);
    return again_;
  }

 private:
  void Run() {
    v1::SubscribeResponse msg;
    while (reader_->Read(&msg)) {
      v1::AckRequest ack;
      ack.set_namespace_("jobs");
      const WallNanos now = WallNow();
      {
        std::lock_guard lock(mu_);
        for (const auto& e : msg.events()) {
          again_ += got_.count(e.key());
          got_[e.key()] = {now, ToNanos(e.fire_time())};
          ack.add_event_ids(e.id());
        }
      }
      if (ack.event_ids_size() == 0) continue;
      grpc::ClientContext ctx;
      Prepare(&ctx, token_);
      v1::AckResponse resp;
      stub_->Ack(&ctx, ack, &resp);
    }
    reader_->Finish();
  }

  std::unique_ptr<v1::Delayd::Stub> stub_;
  const std::string token_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, std::pair<WallNanos, WallNanos>> got_;
  int again_ = 0;
};

// A Subscribe stream read on a thread of its own; keeps what it got.
class Stream {
 public:
  // On namespace "jobs".
  Stream(v1::Delayd::Stub& stub, v1::SubscribeRequest req) {
    req.set_namespace_("jobs");
    reader_ = stub.Subscribe(&ctx_, req);
    thread_ = std::thread([this] {
      v1::SubscribeResponse msg;
      while (reader_->Read(&msg)) {
        std::lock_guard lock(mu_);
        registered_ = true;
        for (auto& e : *msg.mutable_events()) events_.push_back(std::move(e));
      }
      status_ = reader_->Finish();
    });
  }
  ~Stream() { Cancel(); }
  void Cancel() {
    if (!thread_.joinable()) return;
    ctx_.TryCancel();
    thread_.join();
  }
  std::vector<v1::Event> events() {
    std::lock_guard lock(mu_);
    return events_;
  }
  std::size_t size() { return events().size(); }
  // Whether the first message (the registration) came within `timeout`.
  bool Registered(std::chrono::milliseconds timeout = 10s) {
    return Eventually(
        [&] {
          std::lock_guard lock(mu_);
          return registered_;
        },
        timeout);
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<v1::Event> events_;
  bool registered_ = false;
  grpc::Status status_;
};

class Cluster : public ::testing::Test {
 protected:
  static constexpr const char* kClusterToken = "cluster-secret-0123456789";

  void SetUp() override {
    std::string error;
    pg_ = PostgresServer::Start(&error);
    ASSERT_NE(pg_, nullptr) << error;
    db_ = pg_->NewDatabase();
    url_ = pg_->Url(db_);
    std::ofstream(dir_ / "cluster-token") << kClusterToken << "\n";
  }

  // Node `name` of the cluster, with `extra` flags, on
  // the database at `url` (url_ if empty).
  std::unique_ptr<DaemonProcess> Node(const std::string& name,
                                      std::vector<std::string> extra = {},
                                      const std::string& url = "") {
    std::vector<std::string> args{"--store",
                                  url.empty() ? url_ : url,
                                  "--node-id",
                                  name,
                                  "--advertise",
                                  "127.0.0.1:0",
                                  "--cluster-token-file",
                                  dir_ / "cluster-token"};
    // Leases of 1 s, and no grace (a test's nodes stop at once), unless
    // `extra` says otherwise.
    for (const auto& [flag, value] : {std::pair{"--lease-ttl", "1s"},
                                      std::pair{"--shutdown-grace", "0s"}}) {
      if (std::find(extra.begin(), extra.end(), flag) == extra.end()) {
        args.insert(args.end(), {flag, value});
      }
    }
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<DaemonProcess>(DELAYD_BINARY, std::move(args));
  }

  // Nodes a and b (with `extra` flags), once each owns half the
  // partitions. Call through ASSERT_NO_FATAL_FAILURE.
  void StartTwo(std::unique_ptr<DaemonProcess>* a,
                std::unique_ptr<DaemonProcess>* b,
                const std::vector<std::string>& extra = {}) {
    *a = Node("a", extra);
    ASSERT_TRUE((*a)->WaitForPort(30s)) << (*a)->output();
    *b = Node("b", extra);
    ASSERT_TRUE((*b)->WaitForPort(30s)) << (*b)->output();
    ASSERT_TRUE(Eventually([&] { return Owners() == "a:32,b:32"; }, 20s))
        << Owners() << "\n"
        << (*a)->output() << (*b)->output();
  }

  // Partitions each live owner holds, as the database says.
  std::string Owners() {
    return pg_->Exec(db_,
                     "SELECT string_agg(owner || ':' || n, ',' ORDER BY "
                     "owner) FROM (SELECT owner, count(*) AS n FROM "
                     "delayd_leases WHERE expires_at > now() GROUP BY owner) "
                     "AS o");
  }
  // The node owning namespace `ns`'s key `key`, as the database says.
  std::string OwnerOf(const std::string& key, const std::string& ns = "jobs") {
    return pg_->Exec(db_, "SELECT owner FROM delayd_leases WHERE part = " +
                              std::to_string(StablePartition(ns, key, 64)));
  }

  // `call()`'s status, tried again for up to 10 s while partitions move
  // (UNAVAILABLE).
  template <typename Call>
  static grpc::Status Retried(Call call) {
    grpc::Status s;
    Eventually(
        [&] {
          s = call();
          return s.error_code() != grpc::StatusCode::UNAVAILABLE;
        },
        10s);
    return s;
  }

  // Sets `n` timers due at `fire_time`, key i through nodes[i % size] (any
  // node takes any call), trying again for up to 10 s while partitions
  // move (UNAVAILABLE).
  static void SetAll(int n, WallNanos fire_time,
                     const std::vector<v1::Delayd::Stub*>& nodes) {
    for (int i = 0; i < n; ++i) {
      const std::string key = "job-" + std::to_string(i);
      const bool set = Eventually(
          [&] {
            v1::SetTimerResponse resp;
            const grpc::Status s =
                Set(*nodes[i % nodes.size()], key, fire_time, &resp);
            if (!s.ok()) {
              EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE)
                  << s.error_message();
            }
            return s.ok();
          },
          10s);
      ASSERT_TRUE(set) << key << " taken by no node";
    }
  }

  std::unique_ptr<PostgresServer> pg_;
  std::string db_, url_;
  TempDir dir_;
};

// Nodes a and b of a cluster with a stub for each, once each node knows who
// owns what (a call through each that needs its owners' map succeeds: a
// node learns of the other's partitions at its own lease round, which may
// come after the database shows them).
class TwoNodes : public Cluster {
 protected:
  void SetUp() override {
    Cluster::SetUp();
    ASSERT_NO_FATAL_FAILURE(StartTwo(&a_, &b_));
    stub_a_ = StubOf(*a_);
    stub_b_ = StubOf(*b_);
    for (v1::Delayd::Stub* stub : {stub_a_.get(), stub_b_.get()}) {
      ASSERT_TRUE(Eventually(
          [&] {
            v1::ListTimersRequest req;
            req.set_namespace_("jobs");
            v1::ListTimersResponse resp;
            grpc::ClientContext ctx;
            Prepare(&ctx);
            return stub->ListTimers(&ctx, req, &resp).ok();
          },
          10s));
    }
  }

  // `n` keys of namespace "jobs" that node `node` owns.
  std::vector<std::string> KeysOf(const std::string& node, int n) {
    std::vector<std::string> keys;
    for (int i = 0; static_cast<int>(keys.size()) < n; ++i) {
      const std::string key = node + "-key-" + std::to_string(i);
      if (OwnerOf(key) == node) keys.push_back(key);
    }
    return keys;
  }

  std::unique_ptr<DaemonProcess> a_, b_;
  std::unique_ptr<v1::Delayd::Stub> stub_a_, stub_b_;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_E2E_CLUSTER_HARNESS_H_
