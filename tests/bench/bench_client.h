// What the load generator's sections share: a closed-loop gRPC client
// (Bench), a daemon over a scratch directory, and the figures' arithmetic.
#ifndef DELAYD_TESTS_BENCH_BENCH_CLIENT_H_
#define DELAYD_TESTS_BENCH_BENCH_CLIENT_H_

#include <absl/synchronization/mutex.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "delayd/v1/delayd.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/common/daemon_process.h"

namespace delayd::bench {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace v1 = delayd::v1;
namespace health = grpc::health::v1;

// A fixed pseudo-random spread of i (splitmix64), safe from any thread.
inline std::uint64_t Mix(std::uint64_t i) {
  i += 0x9E3779B97F4A7C15ull;
  i = (i ^ (i >> 30)) * 0xBF58476D1CE4E5B9ull;
  i = (i ^ (i >> 27)) * 0x94D049BB133111EBull;
  return i ^ (i >> 31);
}

// Writes the last `n` decimal digits of `v`, zero-padded, at `out`.
inline void WriteDigits(std::uint64_t v, char* out, int n) {
  for (int i = n - 1; i >= 0; --i, v /= 10)
    out[i] = static_cast<char>('0' + v % 10);
}

// "b" followed by `digits` digits of i.
inline std::string KeyOf(std::uint64_t i, int digits) {
  std::string key(1 + digits, 'b');
  WriteDigits(i, key.data() + 1, digits);
  return key;
}

inline std::int64_t WallNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline google::protobuf::Timestamp Ts(std::int64_t ns) {
  google::protobuf::Timestamp t;
  t.set_seconds(ns / 1'000'000'000);
  t.set_nanos(static_cast<std::int32_t>(ns % 1'000'000'000));
  return t;
}

inline std::int64_t ProcField(pid_t pid, const std::string& file,
                              const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  }
  return -1;
}

inline std::int64_t RssBytes(pid_t pid) {
  return ProcField(pid, "status", "VmRSS:") * 1024;
}

// CPU time of a process's threads by thread name, in seconds (schedstat's
// first field, in nanoseconds; /proc/PID/stat counts only in 10 ms ticks);
// threads that ended are not counted.
inline std::map<std::string, double> CpuByThread(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  std::map<std::string, double> by_name;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream stat(entry.path() / "schedstat");
    std::ifstream comm(entry.path() / "comm");
    std::uint64_t ns = 0;
    std::string name;
    if (stat >> ns && std::getline(comm, name)) {
      by_name[name] += static_cast<double>(ns) / 1e9;
    }
  }
  return by_name;
}

// CPU time of all of a process's threads, in seconds.
inline double CpuSeconds(pid_t pid) {
  double total = 0;
  for (const auto& [name, seconds] : CpuByThread(pid)) total += seconds;
  return total;
}

// Prints the cores each thread name used between two CpuByThread readings
// over `wall` seconds, the busiest first (those above 0.005 cores).
inline void PrintCpuByThread(const std::map<std::string, double>& before,
                             const std::map<std::string, double>& after,
                             double wall) {
  std::vector<std::pair<double, std::string>> used;
  for (const auto& [name, s] : after) {
    const auto b = before.find(name);
    used.emplace_back((s - (b == before.end() ? 0 : b->second)) / wall, name);
  }
  std::sort(used.rbegin(), used.rend());
  std::printf("  by thread:");
  for (const auto& [cores, name] : used) {
    if (cores >= 0.005) std::printf(" %s %.2f", name.c_str(), cores);
  }
  std::printf(" (cores)\n");
}

// A rate measured by `run` (operations/s over its own run) and the CPU time
// the daemon `pid` spent per operation meanwhile, in microseconds. The CPU
// figure is what an operation costs the daemon: on a shared machine it moves
// far less between rounds than the rate does.
struct Measured {
  double rate = 0;
  double cpu_us = 0;
};
template <typename Run>
Measured WithCpu(pid_t pid, Run run) {
  const double cpu0 = CpuSeconds(pid);
  const auto start = Clock::now();
  Measured m;
  m.rate = run();
  const double wall =
      std::chrono::duration<double>(Clock::now() - start).count();
  if (m.rate > 0) m.cpu_us = 1e6 * (CpuSeconds(pid) - cpu0) / (m.rate * wall);
  return m;
}

// One health Check for `service`, waited for (5 s at most); true if OK.
inline bool CheckOnce(health::Health::Stub& stub, const char* service = "") {
  health::HealthCheckRequest req;
  req.set_service(service);
  health::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return stub.Check(&ctx, req, &resp).ok();
}

// Keeps `concurrency` calls in flight for `duration`; `issue(slot, done)`
// starts one call whose completion runs `done`. Returns completed calls/s.
template <typename Issue>
double ClosedLoop(int concurrency, std::chrono::milliseconds duration,
                  Issue issue) {
  std::atomic<std::int64_t> completed{0};
  std::atomic<int> active{concurrency};
  std::mutex mu;
  std::condition_variable cv;
  const auto start = Clock::now();
  const auto deadline = start + duration;
  std::function<void(int)> next = [&](int slot) {
    if (Clock::now() >= deadline) {
      if (active.fetch_sub(1) == 1) {
        std::lock_guard lock(mu);
        cv.notify_all();
      }
      return;
    }
    issue(slot, [&, slot](bool ok) {
      if (ok) completed.fetch_add(1);
      next(slot);
    });
  };
  for (int s = 0; s < concurrency; ++s) next(s);
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return active.load() == 0; });
  const double secs =
      std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(completed.load()) / secs;
}

struct Percentiles {
  double p50, p99, p999, max;
  std::size_t n;
};
inline Percentiles Summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v.empty() ? 0.0
                     : v[std::min(v.size() - 1,
                                  static_cast<std::size_t>(q * v.size()))];
  };
  return {at(0.5), at(0.99), at(0.999), v.empty() ? 0 : v.back(), v.size()};
}

// One call in flight: a fresh context per call, request and response kept
// alive until it completes.
template <typename Request, typename Response>
struct CallSlot {
  std::unique_ptr<grpc::ClientContext> ctx;
  Request req;
  Response resp;
  // `authorization`: a header value to send, if not empty.
  grpc::ClientContext* NewContext(const std::string& authorization) {
    ctx = std::make_unique<grpc::ClientContext>();
    if (!authorization.empty())
      ctx->AddMetadata("authorization", authorization);
    return ctx.get();
  }
};

class Bench {
 public:
  // `credentials`: plaintext if null.
  Bench(const std::string& address, int channels,
        std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr) {
    if (!credentials) credentials = grpc::InsecureChannelCredentials();
    for (int c = 0; c < channels; ++c) {
      grpc::ChannelArguments args;
      args.SetInt("grpc.channel_id", c);  // Distinct connections.
      auto ch = grpc::CreateCustomChannel(address, credentials, args);
      stubs_.push_back(v1::Delayd::NewStub(ch));
      generic_.push_back(std::make_unique<grpc::GenericStub>(ch));
      health_.push_back(health::Health::NewStub(ch));
    }
  }

  // Sends `token` as a bearer token in each call's metadata from now on (what
  // a client that does not use gRPC's call credentials does).
  void SetBearer(const std::string& token) {
    authorization_ = "Bearer " + token;
  }

  double HealthRate(int concurrency, std::chrono::milliseconds d) {
    std::vector<
        CallSlot<health::HealthCheckRequest, health::HealthCheckResponse>>
        slots(concurrency);
    return ClosedLoop(concurrency, d, [&](int s, auto done) {
      auto& slot = slots[s];
      health_[s % health_.size()]->async()->Check(
          slot.NewContext(authorization_), &slot.req, &slot.resp,
          [done](grpc::Status st) { done(st.ok()); });
    });
  }

  // SetTimer/s, `concurrency` calls in flight, each a new key with a
  // payload of `payload_bytes`, due in an hour.
  double SetRate(int concurrency, std::chrono::milliseconds d,
                 std::size_t payload_bytes = 16,
                 const std::string& ns = "unary") {
    const std::string payload = Payload(payload_bytes);
    std::vector<CallSlot<v1::SetTimerRequest, v1::SetTimerResponse>> slots(
        concurrency);
    std::atomic<std::uint64_t> seq{0};
    return ClosedLoop(concurrency, d, [&](int s, auto done) {
      auto& slot = slots[s];
      slot.req.set_namespace_(ns);
      // Appended, not "u" + ...: GCC 12 warns (-Wrestrict) on that once
      // inlined here, a false positive of that compiler.
      std::string key = "u";
      key += std::to_string(seq.fetch_add(1));
      slot.req.set_key(std::move(key));
      slot.req.set_payload(payload);
      slot.req.mutable_delay()->set_seconds(3600);
      stubs_[s % stubs_.size()]->async()->SetTimer(
          slot.NewContext(authorization_), &slot.req, &slot.resp,
          [done](grpc::Status st) { done(st.ok()); });
    });
  }

  // Items/s through Batch with `per_call` sets each, every key new (16 B:
  // "b" and 15 digits). Requests go out pre-encoded: one BatchRequest is
  // serialized once and each call rewrites the key digits in a copy of it,
  // so this process spends its CPU on the transport rather than on building
  // and serializing messages, and the figure is the daemon's. Every result is
  // still decoded and checked.
  double BatchRate(int concurrency, int per_call, std::chrono::milliseconds d,
                   const std::string& ns, std::size_t payload_bytes = 16) {
    constexpr int kDigits = 15;
    v1::BatchRequest proto;
    for (int i = 0; i < per_call; ++i) {
      auto* set = proto.add_operations()->mutable_set();
      set->set_namespace_(ns);
      set->set_key(KeyOf(i, kDigits));
      set->set_payload(Payload(payload_bytes));
      set->mutable_delay()->set_seconds(3600);
    }
    const std::string encoded = proto.SerializeAsString();
    std::vector<std::size_t> digits_at;  // Where each key's digits start.
    for (int i = 0; i < per_call; ++i) {
      const std::size_t at = encoded.find(
          KeyOf(i, kDigits), digits_at.empty() ? 0 : digits_at.back());
      if (at == std::string::npos) std::abort();  // Cannot happen: built above.
      digits_at.push_back(at + 1);
    }
    struct Slot {
      std::unique_ptr<grpc::ClientContext> ctx;
      std::string req;
      grpc::ByteBuffer req_buf, resp_buf;
    };
    std::vector<Slot> slots(concurrency);
    std::atomic<std::uint64_t>& seq = batch_keys_;  // New keys every run.
    std::atomic<std::uint64_t> failed{0};
    const double calls = ClosedLoop(concurrency, d, [&](int s, auto done) {
      Slot& slot = slots[s];
      slot.req = encoded;
      const std::uint64_t base = seq.fetch_add(per_call);
      for (int i = 0; i < per_call; ++i) {
        WriteDigits(base + i, slot.req.data() + digits_at[i], kDigits);
      }
      grpc::Slice slice(slot.req);
      slot.req_buf = grpc::ByteBuffer(&slice, 1);
      slot.ctx = std::make_unique<grpc::ClientContext>();
      if (!authorization_.empty()) {
        slot.ctx->AddMetadata("authorization", authorization_);
      }
      generic_[s % generic_.size()]->UnaryCall(
          slot.ctx.get(), "/delayd.v1.Delayd/Batch", grpc::StubOptions(),
          &slot.req_buf, &slot.resp_buf, [&, done](grpc::Status st) {
            v1::BatchResponse resp;
            if (st.ok() &&
                !grpc::SerializationTraits<v1::BatchResponse>::Deserialize(
                     &slot.resp_buf, &resp)
                     .ok()) {
              st = grpc::Status(grpc::StatusCode::INTERNAL, "bad response");
            }
            for (const auto& r : resp.results()) {
              if (r.code() != 0 && failed.fetch_add(1) == 0) {
                std::printf("  (a batch item failed: code %d, %s)\n", r.code(),
                            r.message().c_str());
              }
            }
            if (st.ok() && resp.results_size() != per_call) failed.fetch_add(1);
            done(st.ok());
          });
    });
    if (failed.load() != 0) {
      std::printf("  (%llu batch items failed)\n",
                  static_cast<unsigned long long>(failed.load()));
    }
    return calls * per_call;
  }

  // Sets `n` timers (16 B keys, payloads of `payload_bytes`) due at
  // `fire(i)`, in batches.
  void Fill(std::uint64_t n, const std::string& ns,
            const std::function<std::int64_t(std::uint64_t)>& fire,
            std::size_t payload_bytes = 16) {
    constexpr int kPerCall = 1000;
    constexpr int kInFlight = 8;
    std::atomic<std::uint64_t> next{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kInFlight; ++t) {
      threads.emplace_back([&, t] {
        for (;;) {
          const std::uint64_t base = next.fetch_add(kPerCall);
          if (base >= n) return;
          v1::BatchRequest req;
          for (std::uint64_t i = base;
               i < std::min<std::uint64_t>(n, base + kPerCall); ++i) {
            auto* set = req.add_operations()->mutable_set();
            set->set_namespace_(ns);
            char key[32];
            std::snprintf(key, sizeof key, "key-%012llu",
                          static_cast<unsigned long long>(i));
            set->set_key(key);
            // Incompressible, like most real payloads.
            std::string* payload = set->mutable_payload();
            payload->resize(payload_bytes);
            for (std::size_t b = 0; b < payload_bytes; b += 8) {
              const std::uint64_t r = Mix(i * 1024 + b);
              std::memcpy(payload->data() + b, &r,
                          std::min<std::size_t>(8, payload_bytes - b));
            }
            *set->mutable_fire_time() = Ts(fire(i));
          }
          v1::BatchResponse resp;
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() + 60s);
          grpc::Status s = stubs_[t % stubs_.size()]->Batch(&ctx, req, &resp);
          if (!s.ok())
            std::printf("  fill failed: %s\n", s.error_message().c_str());
        }
      });
    }
    for (auto& t : threads) t.join();
  }

  // Whether Lateness() acknowledges on a Work stream (each ack a message on
  // the worker's own stream, as the client libraries do) instead of
  // subscribing and calling Ack.
  void set_work_acks(bool on) { work_acks_ = on; }

  // Subscribes a worker to `ns` and records lateness (ms) of `expect`
  // events, acking as it goes; gives up after `timeout`.
  std::vector<double> Lateness(const std::string& ns, std::size_t expect,
                               std::chrono::milliseconds timeout,
                               const std::function<void()>& after_subscribe) {
    grpc::ClientContext ctx;
    v1::SubscribeRequest req;
    req.set_namespace_(ns);
    req.set_max_in_flight(10000);
    std::unique_ptr<grpc::ClientReaderInterface<v1::SubscribeResponse>> reader;
    std::unique_ptr<
        grpc::ClientReaderWriter<v1::WorkRequest, v1::SubscribeResponse>>
        work;
    if (work_acks_) {
      work = stubs_[0]->Work(&ctx);
      v1::WorkRequest first;
      *first.mutable_subscribe() = req;
      if (!work->Write(first)) return {};
    } else {
      reader = stubs_[0]->Subscribe(&ctx, req);
    }
    // (A Work stream reads as a Subscribe stream; its writes are acks.)
    auto read = [&](v1::SubscribeResponse* m) {
      return work ? work->Read(m) : reader->Read(m);
    };
    std::uint64_t ref = 0;
    v1::SubscribeResponse msg;
    std::vector<double> late;
    late.reserve(expect);
    fired_late_.clear();
    std::atomic<std::size_t> count{0};
    if (!read(&msg)) return late;  // Registered.
    std::thread driver(after_subscribe);
    const auto deadline = Clock::now() + timeout;
    std::thread watchdog([&] {
      while (Clock::now() < deadline && count.load() < expect) {
        std::this_thread::sleep_for(50ms);  // Polls a bound, not a condition.
      }
      ctx.TryCancel();
    });
    // Acks go out from their own thread, many ids per call, while reading
    // goes on: a worker that acks each message before reading the next
    // spends its time in round trips.
    std::mutex ack_mu;
    std::condition_variable ack_cv;
    std::vector<std::uint64_t> to_ack;
    bool reading = true;
    std::thread acker([&] {
      for (;;) {
        std::vector<std::uint64_t> ids;
        {
          std::unique_lock lock(ack_mu);
          ack_cv.wait(lock, [&] { return !to_ack.empty() || !reading; });
          if (to_ack.empty()) return;
          ids.swap(to_ack);
        }
        v1::AckRequest ack;
        ack.set_namespace_(ns);
        for (auto id : ids) ack.add_event_ids(id);
        if (work) {  // Not waiting for the answer (read and dropped).
          v1::WorkRequest w;
          w.set_ref(++ref);
          *w.mutable_ack() = std::move(ack);
          if (!work->Write(w)) return;
          continue;
        }
        v1::AckResponse ack_resp;
        grpc::ClientContext ack_ctx;
        stubs_[1 % stubs_.size()]->Ack(&ack_ctx, ack, &ack_resp);
      }
    });
    while (late.size() < expect && read(&msg)) {
      const std::int64_t now = WallNanos();
      std::lock_guard lock(ack_mu);
      for (const auto& e : msg.events()) {
        const std::int64_t fire =
            e.fire_time().seconds() * 1'000'000'000 + e.fire_time().nanos();
        late.push_back(static_cast<double>(now - fire) / 1e6);
        fired_late_.push_back(
            static_cast<double>(e.fired_at().seconds() * 1'000'000'000 +
                                e.fired_at().nanos() - fire) /
            1e6);
        to_ack.push_back(e.id());
      }
      last_arrival_ = now;
      count.store(late.size());
      ack_cv.notify_one();
    }
    {
      std::lock_guard lock(ack_mu);
      reading = false;
      ack_cv.notify_one();
    }
    acker.join();
    ctx.TryCancel();
    watchdog.join();
    driver.join();
    if (work) {
      work->Finish();
    } else {
      reader->Finish();
    }
    return late;
  }

  v1::Delayd::Stub& stub() { return *stubs_[0]; }
  health::Health::Stub& health() { return *health_[0]; }
  // `n` bytes of text ("0123456789abcdef" repeated).
  static std::string Payload(std::size_t n) {
    std::string p;
    while (p.size() < n) p += "0123456789abcdef";
    p.resize(n);
    return p;
  }
  // fired_at minus fire time of the events of the last Lateness() run.
  const std::vector<double>& fired_late() const { return fired_late_; }
  // When the last event of the last Lateness() run arrived (wall ns).
  std::int64_t last_arrival() const { return last_arrival_; }

 private:
  std::vector<double> fired_late_;
  std::int64_t last_arrival_ = 0;
  bool work_acks_ = false;
  std::atomic<std::uint64_t> batch_keys_{0};
  std::string authorization_;  // Sent with every call when not empty.
  std::vector<std::unique_ptr<v1::Delayd::Stub>> stubs_;
  std::vector<std::unique_ptr<grpc::GenericStub>> generic_;
  std::vector<std::unique_ptr<health::Health::Stub>> health_;
};

// A daemon over its own data directory under `scratch` (removed after).
class ScratchDaemon {
 public:
  ScratchDaemon(const std::string& binary, const std::string& scratch,
                const std::string& name, std::vector<std::string> args)
      : dir_(scratch + "/" + name) {
    std::filesystem::remove_all(dir_);
    args.insert(args.end(), {"--data-dir", dir_});
    d_ = std::make_unique<delayd::testing::DaemonProcess>(binary, args, 120s);
  }
  ~ScratchDaemon() {
    Stop();
    std::filesystem::remove_all(dir_);
  }
  delayd::testing::DaemonProcess& d() { return *d_; }
  const std::string& dir() const { return dir_; }
  void Stop() {
    if (d_) d_->Stop(SIGTERM, 60s);
  }

 private:
  std::string dir_;
  std::unique_ptr<delayd::testing::DaemonProcess> d_;
};

inline std::uint64_t DirBytes(const std::string& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    if (f.is_regular_file(ec)) total += f.file_size(ec);
  }
  return total;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace delayd::bench

#endif  // DELAYD_TESTS_BENCH_BENCH_CLIENT_H_
