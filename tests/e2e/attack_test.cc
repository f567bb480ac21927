// Hostile and broken clients against the real binary: each attack is made
// while a well-behaved producer and worker go on, and the daemon's resident
// memory must stay bounded while every timer the producer set reaches the
// good worker. (Under sanitizers the memory figures are not the daemon's
// own, so only the service is checked there.)
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <future>
#include <set>
#include <thread>
#include <vector>

#include "delayd/v1/delayd.grpc.pb.h"
#include "tests/common/daemon_process.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;

// The daemon's stream write timeout here (its default is 30 s): short, so
// that a stalled reader is cut within the attack. Under ThreadSanitizer, with
// another test beside it on two cores, a good worker's write was seen to
// take over 2 s (its first event's, and one behind an ack whose round trip
// took 3.3 s), so there it is longer.
#ifdef DELAYD_SANITIZED
constexpr bool kCheckMemory = false;
constexpr const char* kWriteTimeout = "10s";
#else
constexpr bool kCheckMemory = true;
constexpr const char* kWriteTimeout = "2s";
#endif

// Resident memory of `pid` in bytes.
std::size_t Rss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;
  }
  return 0;
}

// Samples the RSS of `pid` every 20 ms until destroyed; peak() is the
// highest seen.
class RssWatch {
 public:
  explicit RssWatch(pid_t pid) : pid_(pid), base_(Rss(pid)) {
    thread_ = std::thread([this] {
      while (!stop_) {
        const std::size_t r = Rss(pid_);
        if (r > peak_) peak_ = r;
        std::this_thread::sleep_for(20ms);  // The sampling period.
      }
    });
  }
  ~RssWatch() {
    stop_ = true;
    thread_.join();
  }
  std::size_t growth() const { return peak_ > base_ ? peak_ - base_ : 0; }

 private:
  const pid_t pid_;
  const std::size_t base_;
  std::atomic<std::size_t> peak_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

v1::SubscribeRequest Subscription(v1::SubscribeRequest::Mode mode,
                                  std::uint32_t max_in_flight,
                                  std::int64_t ack_timeout_ms) {
  v1::SubscribeRequest r;
  r.set_namespace_("jobs");
  r.set_mode(mode);
  if (mode == v1::SubscribeRequest::WORKER) {
    r.set_max_in_flight(max_in_flight);
    r.mutable_ack_timeout()->set_seconds(ack_timeout_ms / 1000);
    r.mutable_ack_timeout()->set_nanos(
        static_cast<std::int32_t>(ack_timeout_ms % 1000 * 1'000'000));
  }
  return r;
}

// A channel on a connection of its own, as another process's would be
// (gRPC shares one connection among a process's channels to one address).
std::shared_ptr<grpc::Channel> OwnConnection(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(),
                                   args);
}

// A worker that reads and acknowledges everything; remembers the keys seen.
// It reads on while its acks are under way (another thread sends them, what
// came meanwhile in one call), as a worker must: one that stopped reading
// for each ack's round trip would hold each write to it that long, and a
// round trip past the daemon's write timeout, which a loaded machine under
// a sanitizer sees, would have its stream ended.
class GoodWorker {
 public:
  explicit GoodWorker(const std::string& address)
      : stub_(v1::Delayd::NewStub(OwnConnection(address))) {
    reader_ = stub_->Subscribe(
        &ctx_, Subscription(v1::SubscribeRequest::WORKER, 1000, 30000));
    reading_ = std::thread([this] {
      v1::SubscribeResponse msg;
      while (reader_->Read(&msg)) {
        std::lock_guard lock(mu_);
        for (const auto& e : msg.events()) {
          keys_.insert(e.key());
          unacked_.push_back(e.id());
        }
        cv_.notify_all();
      }
      reader_->Finish();
      std::lock_guard lock(mu_);
      read_done_ = true;
      cv_.notify_all();
    });
    acking_ = std::thread([this] {
      for (;;) {
        v1::AckRequest ack;
        ack.set_namespace_("jobs");
        {
          std::unique_lock lock(mu_);
          cv_.wait(lock, [&] { return read_done_ || !unacked_.empty(); });
          if (unacked_.empty()) return;  // (The stream is over.)
          for (std::uint64_t id : unacked_) ack.add_event_ids(id);
          unacked_.clear();
        }
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 30s);
        v1::AckResponse resp;
        stub_->Ack(&ctx, ack, &resp);
      }
    });
  }
  ~GoodWorker() {
    ctx_.TryCancel();
    reading_.join();
    acking_.join();
  }
  // Waits (bounded) until `n` distinct keys were seen; returns how many.
  std::size_t WaitFor(std::size_t n, std::chrono::seconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return keys_.size() >= n; });
    return keys_.size();
  }

 private:
  std::unique_ptr<v1::Delayd::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::SubscribeResponse>> reader_;
  std::thread reading_;
  std::thread acking_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> keys_;
  std::vector<std::uint64_t> unacked_;
  bool read_done_ = false;
};

// Sets `n` timers due at once with `payload_bytes` payloads, spread evenly
// over `over` (an attack is held that long); returns how many were
// acknowledged.
int Produce(v1::Delayd::Stub& stub, int n, std::size_t payload_bytes,
            std::chrono::milliseconds over = 0ms) {
  const std::string payload(payload_bytes, 'x');
  const auto start = std::chrono::steady_clock::now();
  int ok = 0;
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_until(start + over * i / n);  // The pace.
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    v1::SetTimerRequest r;
    r.set_namespace_("jobs");
    r.set_key("job-" + std::to_string(i));
    r.set_payload(payload);
    r.mutable_delay();  // Due now.
    v1::SetTimerResponse resp;
    if (stub.SetTimer(&ctx, r, &resp).ok()) ++ok;
  }
  return ok;
}

class Attack : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> args) {
    args.insert(args.end(),
                {"--in-memory", "--stream-write-timeout", kWriteTimeout});
    daemon_ = std::make_unique<DaemonProcess>(DELAYD_BINARY, args);
    ASSERT_TRUE(daemon_->ok()) << daemon_->output();
    channel_ = grpc::CreateChannel(daemon_->address(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Delayd::NewStub(channel_);
  }
  void TearDown() override {
    if (HasFailure() && daemon_) {
      const std::string out = daemon_->output();
      std::printf(
          "daemon output (last 4 KB of %zu bytes):\n%s\n", out.size(),
          out.substr(out.size() - std::min<std::size_t>(out.size(), 4096))
              .c_str());
    }
  }
  std::unique_ptr<DaemonProcess> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Delayd::Stub> stub_;
};

grpc::Status RawBatch(const std::shared_ptr<grpc::Channel>& channel,
                      const std::string& bytes) {
  grpc::GenericStub generic(channel);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer req(&slice, 1), resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  std::promise<grpc::Status> done;
  generic.UnaryCall(&ctx, "/delayd.v1.Delayd/Batch", grpc::StubOptions(), &req,
                    &resp, [&](grpc::Status s) { done.set_value(s); });
  return done.get_future().get();
}

TEST_F(Attack, HugeBatchesOfEmptyOperationsAreRefusedAtOnce) {
  Start({});
  GoodWorker good(daemon_->address());
  RssWatch rss(daemon_->pid());
  std::string empty_ops;
  for (int i = 0; i < 30'000'000; ++i) empty_ops += std::string("\x0a\x00", 2);
  // 60 MB: over the receive limit (--max-batch-bytes, 4 MiB by default).
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(RawBatch(channel_, empty_ops).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  // 4 MB, within it: the reader stops at max-batch-ops + 1 operations.
  const grpc::Status s = RawBatch(channel_, empty_ops.substr(0, 4'000'000));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("max-batch-ops"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  // Served meanwhile, and after.
  EXPECT_EQ(Produce(*stub_, 100, 100), 100);
  EXPECT_EQ(good.WaitFor(100, 10s), 100u);
  if (kCheckMemory) {
    EXPECT_LT(rss.growth(), 150u << 20);
  }
  std::printf("huge batches: RSS growth %.1f MB\n", rss.growth() / 1e6);
}

// Requests of every unary method made of small unknown fields, each just
// under gRPC's receive limit (which must let a full Batch in): parsed, each
// would take several times its bytes (protobuf keeps every unknown field as
// an entry of its own). Every method but Batch refuses them by size before
// parsing; Batch, within its limit, is parsed without its unknown fields
// and has no operations.
TEST_F(Attack, OversizedRequestsAreRefusedBeforeParsing) {
  Start({});
  GoodWorker good(daemon_->address());
  RssWatch rss(daemon_->pid());
  std::string unknown_fields;
  while (unknown_fields.size() < 4'000'000) {
    unknown_fields += std::string("\x78\x00", 2);  // Field 15, varint 0.
  }
  const char* methods[] = {"SetTimer", "MoveTimer",  "RemoveTimer", "Drain",
                           "GetTimer", "ListTimers", "Ack",         "Stats",
                           "Backup",   "Batch"};
  std::vector<std::thread> attackers;
  std::atomic<int> refused{0};
  for (int t = 0; t < 8; ++t) {
    attackers.emplace_back([&, t] {
      grpc::GenericStub generic(grpc::CreateChannel(
          daemon_->address(), grpc::InsecureChannelCredentials()));
      for (int i = 0; i < 10; ++i) {
        const std::string method = methods[(t + i) % 10];
        grpc::Slice slice(unknown_fields);
        grpc::ByteBuffer req(&slice, 1), resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + 30s);
        std::promise<grpc::Status> done;
        generic.UnaryCall(&ctx, "/delayd.v1.Delayd/" + method,
                          grpc::StubOptions(), &req, &resp,
                          [&](grpc::Status s) { done.set_value(s); });
        const grpc::Status s = done.get_future().get();
        const bool batch = method == "Batch";
        EXPECT_EQ(s.error_code(), batch ? grpc::StatusCode::INVALID_ARGUMENT
                                        : grpc::StatusCode::RESOURCE_EXHAUSTED)
            << method << ": " << s.error_message();
        EXPECT_NE(s.error_message().find(batch ? "operations: empty" : method),
                  std::string::npos)
            << s.error_message();
        if (!s.ok()) ++refused;
      }
    });
  }
  // Served meanwhile, and after.
  EXPECT_EQ(Produce(*stub_, 100, 100), 100);
  for (auto& a : attackers) a.join();
  EXPECT_EQ(refused.load(), 8 * 10);
  EXPECT_EQ(good.WaitFor(100, 10s), 100u);
  // (Parsed, the other methods' requests grew the daemon by 296 MB; with
  // those refused by size, Batch's parsed with their unknown fields still
  // took 129 MB. Now 51-164 MB (19 runs here, 56-164): the buffers
  // gRPC received them into, eight connections' at once at the peak, which
  // the timing of the attackers decides, Batch's copy in one piece, gRPC's
  // own. The bound is under what parsing took.)
  if (kCheckMemory) {
    EXPECT_LT(rss.growth(), 250u << 20);
  }
  std::printf("oversized requests: RSS growth %.1f MB\n", rss.growth() / 1e6);
}

TEST_F(Attack, StalledWorkerHoldsBoundedMemoryAndLosesNoJob) {
  Start({});
  GoodWorker good(daemon_->address());
  RssWatch rss(daemon_->pid());
  // Subscribes, then never reads: its process is wedged, the connection
  // alive. Its events time out every 100 ms.
  auto stalled_stub = v1::Delayd::NewStub(OwnConnection(daemon_->address()));
  grpc::ClientContext stalled_ctx;
  auto stalled = stalled_stub->Subscribe(
      &stalled_ctx, Subscription(v1::SubscribeRequest::WORKER, 100, 100));
  constexpr int kJobs = 4000;  // 64 KiB each: 262 MB in all, over 5 s.
  EXPECT_EQ(Produce(*stub_, kJobs, 64 * 1024, 5000ms), kJobs);
  EXPECT_EQ(good.WaitFor(kJobs, 60s), static_cast<std::size_t>(kJobs));
  if (kCheckMemory) {
    EXPECT_LT(rss.growth(), 150u << 20);
  }
  std::printf("stalled worker: RSS growth %.1f MB\n", rss.growth() / 1e6);
  stalled_ctx.TryCancel();
}

TEST_F(Attack, NeverReadingWatcherHoldsBoundedMemory) {
  Start({});
  GoodWorker good(daemon_->address());
  RssWatch rss(daemon_->pid());
  auto watcher_stub = v1::Delayd::NewStub(OwnConnection(daemon_->address()));
  grpc::ClientContext watcher_ctx;
  auto watcher = watcher_stub->Subscribe(
      &watcher_ctx, Subscription(v1::SubscribeRequest::WATCHER, 0, 0));
  constexpr int kJobs = 4000;
  EXPECT_EQ(Produce(*stub_, kJobs, 64 * 1024, 5000ms), kJobs);
  EXPECT_EQ(good.WaitFor(kJobs, 60s), static_cast<std::size_t>(kJobs));
  if (kCheckMemory) {
    EXPECT_LT(rss.growth(), 200u << 20);
  }
  std::printf("never-reading watcher: RSS growth %.1f MB\n",
              rss.growth() / 1e6);
  watcher_ctx.TryCancel();
}

}  // namespace
}  // namespace delayd
