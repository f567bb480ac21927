// Test helpers: an in-process delayd on 127.0.0.1 with an OS-picked port, a
// stub for it, and a subscription that collects events on its own thread.
// Every wait has a deadline; none sleeps in place of a condition.
#ifndef DELAYD_TESTS_SERVER_TEST_CLIENT_H_
#define DELAYD_TESTS_SERVER_TEST_CLIENT_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "delayd/v1/delayd.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/api/server.h"
#include "server/store/rocksdb/rocks_store.h"

namespace delayd::testing {

using namespace std::chrono_literals;

inline google::protobuf::Duration Millis(std::int64_t ms) {
  google::protobuf::Duration d;
  d.set_seconds(ms / 1000);
  d.set_nanos(static_cast<std::int32_t>((ms % 1000) * 1'000'000));
  return d;
}

inline WallNanos ToNanos(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1'000'000'000 + t.nanos();
}

inline google::protobuf::Timestamp FromNanos(WallNanos ns) {
  google::protobuf::Timestamp t;
  t.set_seconds(ns / 1'000'000'000);
  t.set_nanos(static_cast<std::int32_t>(ns % 1'000'000'000));
  return t;
}

// Calls `method` (e.g. "/delayd.v1.Delayd/Batch") with `request` sent as
// bytes, whatever they are; waits up to 10 s for the status. The response's
// bytes go to `response`.
inline grpc::Status RawUnaryCall(const std::shared_ptr<grpc::Channel>& channel,
                                 const std::string& method,
                                 const std::string& request,
                                 grpc::ByteBuffer* response) {
  grpc::GenericStub generic(channel);
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1);
  grpc::ClientContext ctx;
  std::mutex mu;
  std::condition_variable cv;
  std::optional<grpc::Status> status;
  generic.UnaryCall(&ctx, method, grpc::StubOptions(), &req, response,
                    [&](grpc::Status s) {
                      std::lock_guard lock(mu);
                      status = s;
                      cv.notify_one();
                    });
  std::unique_lock lock(mu);
  if (!cv.wait_for(lock, 10s, [&] { return status.has_value(); })) {
    ctx.TryCancel();
    cv.wait(lock, [&] { return status.has_value(); });
  }
  return *status;
}

// The health of `service` ("": the server as a whole); UNKNOWN if the
// check fails.
inline grpc::health::v1::HealthCheckResponse::ServingStatus Health(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  if (!stub->Check(&ctx, req, &resp).ok()) {
    return grpc::health::v1::HealthCheckResponse::UNKNOWN;
  }
  return resp.status();
}

// Waits (up to 10 s) until both the server's and the service's health are
// `want`.
inline bool WaitForHealth(
    const std::shared_ptr<grpc::Channel>& channel,
    grpc::health::v1::HealthCheckResponse::ServingStatus want) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Health(channel, "") == want &&
        Health(channel, "delayd.v1.Delayd") == want) {
      return true;
    }
    std::this_thread::sleep_for(10ms);  // Polls the condition above.
  }
  return false;
}

// Whether the daemons of a test run on one loop: DELAYD_THREADING=loop, as
// the daemon's --threading reads it (ctest runs the service tests both
// ways: tests/server/CMakeLists.txt).
inline bool LoopFromEnv() {
  const char* threading = std::getenv("DELAYD_THREADING");
  return threading != nullptr && std::string_view(threading) == "loop";
}

// How many loops (--loop-queues) a loop daemon of a test has:
// DELAYD_LOOP_QUEUES, as the daemon reads it, else 1.
inline int LoopQueuesFromEnv() {
  const char* queues = std::getenv("DELAYD_LOOP_QUEUES");
  return queues == nullptr ? 1 : std::max(1, std::atoi(queues));
}

// A daemon in this process, stopped by the destructor.
class TestDaemon {
 public:
  explicit TestDaemon(DelaydServer::Options options = DefaultOptions())
      : partitions_(options.scheduler.partitions) {
    options.listen = "127.0.0.1:0";
    if (LoopFromEnv()) {
      options.loop = true;
      options.loop_queues = LoopQueuesFromEnv();
      // (Nothing may wait for the loop's bound: it waits a minute here.)
      options.loop_max_wait = std::chrono::minutes(1);
    }
    server_ = std::make_unique<DelaydServer>(options);
    Status s = server_->Start();
    EXPECT_TRUE(s.ok()) << s.message();
    started_ = s.ok();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Delayd::NewStub(channel_);
  }
  static DelaydServer::Options DefaultOptions() {
    DelaydServer::Options o;
    o.scheduler.partitions = 2;
    o.scheduler.threads = 2;
    return o;
  }
  bool started() const { return started_; }
  std::uint32_t partitions() const { return partitions_; }
  int port() const { return server_->port(); }
  // The address stub() calls, for a channel of a test's own.
  std::string target() const { return "127.0.0.1:" + std::to_string(port()); }
  v1::Delayd::Stub& stub() { return *stub_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  DelaydServer& server() { return *server_; }
  void Shutdown(std::chrono::milliseconds grace = 1000ms) {
    server_->Shutdown(grace);
  }

 private:
  const std::uint32_t partitions_;
  std::unique_ptr<DelaydServer> server_;
  bool started_ = false;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Delayd::Stub> stub_;
};

// A Subscribe stream read on its own thread.
class TestStream {
 public:
  TestStream(v1::Delayd::Stub& stub, v1::SubscribeRequest request) {
    reader_ = stub.Subscribe(&ctx_, request);
    thread_ = std::thread([this] {
      v1::SubscribeResponse msg;
      while (reader_->Read(&msg)) {
        std::lock_guard lock(mu_);
        registered_ = true;
        for (const auto& e : msg.events()) {
          events_.push_back(e);
          received_at_.push_back(WallNow());
        }
        cv_.notify_all();
      }
      grpc::Status status = reader_->Finish();
      std::lock_guard lock(mu_);
      status_ = status;
      done_ = true;
      cv_.notify_all();
    });
  }
  static v1::SubscribeRequest Worker(const std::string& ns,
                                     std::uint32_t max_in_flight = 100,
                                     std::int64_t ack_timeout_ms = 30000) {
    v1::SubscribeRequest r;
    r.set_namespace_(ns);
    r.set_mode(v1::SubscribeRequest::WORKER);
    r.set_max_in_flight(max_in_flight);
    *r.mutable_ack_timeout() = Millis(ack_timeout_ms);
    return r;
  }
  static v1::SubscribeRequest Watcher(const std::string& ns) {
    v1::SubscribeRequest r;
    r.set_namespace_(ns);
    r.set_mode(v1::SubscribeRequest::WATCHER);
    return r;
  }
  ~TestStream() {
    ctx_.TryCancel();
    thread_.join();
  }

  // Waits for the registration message (or the stream's end).
  bool WaitRegistered(std::chrono::milliseconds timeout = 5000ms) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return registered_ || done_; }) &&
           registered_;
  }
  // Waits until at least `n` events arrived; returns all received so far.
  std::vector<v1::Event> WaitFor(std::size_t n,
                                 std::chrono::milliseconds timeout = 5000ms) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return events_.size() >= n || done_; });
    return events_;
  }
  std::vector<v1::Event> Events() {
    std::lock_guard lock(mu_);
    return events_;
  }
  std::vector<WallNanos> ReceivedAt() {
    std::lock_guard lock(mu_);
    return received_at_;
  }
  // Waits for the stream to end; returns its status (UNKNOWN on timeout).
  grpc::Status WaitDone(std::chrono::milliseconds timeout = 5000ms) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
      return grpc::Status(grpc::StatusCode::UNKNOWN, "stream did not end");
    }
    return status_;
  }
  void Cancel() { ctx_.TryCancel(); }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool registered_ = false;
  bool done_ = false;
  grpc::Status status_;
  std::vector<v1::Event> events_;
  std::vector<WallNanos> received_at_;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_SERVER_TEST_CLIENT_H_
