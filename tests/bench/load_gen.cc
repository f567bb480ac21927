// Load generator for the delayd daemon. Starts the real binary on 127.0.0.1
// (OS-picked port) and measures, in one run against one daemon:
//   unary     SetTimer/s vs grpc.health.v1 Check/s (a trivial RPC on the
//             same server), the same concurrency for both;
//   batch     SetTimer items/s through Batch (100 per call, calls in flight);
//   lateness  delivered-to-worker minus fire time: steady 2k timers/s, and
//             100k timers due within one second;
//   memory    RSS per pending timer with 1M pending (16 B key, 16 B payload);
//   idle      daemon CPU over 10 s idle with those 1M pending.
// Those run against one daemon started with the given daemon args (default
// --in-memory). Then, each starting its own daemons over a fresh data
// directory:
//   durability  SetTimer/s and Batch items/s under --fsync always, 100ms and
//               never, as ratios of --in-memory (alternating rounds);
//   payload     RSS per pending timer, 1M timers, 16 B vs 1 KiB payloads;
//   churn       data directory size through millions of set/move/remove on
//               the same keys;
//   recovery    start-up time with 1M and 10M pending timers.
// Every loop is bounded in time and count; only loopback is used.
//
//   security    SetTimer/s and Batch items/s with TLS and tokens, as ratios
//               of plaintext (alternating, 3 rounds or --rounds N);
//   ab          with --daemon-b: two builds side by side (alternating, 5
//               rounds or --rounds N), with the daemon args (default
//               --in-memory; without it, each round on a fresh data
//               directory);
//   ab-firing   as ab, firing only (not run unless named); --fire N timers
//               per round (default 200k).
// security and ab also print the daemon's CPU time per operation.
//
// Usage: load_gen [--daemon PATH] [--daemon-b PATH] [--seconds N]
//                 [--rounds N] [--fire N] [--only NAME] [--scratch DIR]
//                 [-- daemon args]
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
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "delayd/v1/delayd.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/common/daemon_process.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace v1 = delayd::v1;
namespace health = grpc::health::v1;

// A fixed pseudo-random spread of i (splitmix64), safe from any thread.
std::uint64_t Mix(std::uint64_t i) {
  i += 0x9E3779B97F4A7C15ull;
  i = (i ^ (i >> 30)) * 0xBF58476D1CE4E5B9ull;
  i = (i ^ (i >> 27)) * 0x94D049BB133111EBull;
  return i ^ (i >> 31);
}

// Writes the last `n` decimal digits of `v`, zero-padded, at `out`.
void WriteDigits(std::uint64_t v, char* out, int n) {
  for (int i = n - 1; i >= 0; --i, v /= 10)
    out[i] = static_cast<char>('0' + v % 10);
}

// "b" followed by `digits` digits of i.
std::string KeyOf(std::uint64_t i, int digits) {
  std::string key(1 + digits, 'b');
  WriteDigits(i, key.data() + 1, digits);
  return key;
}

std::int64_t WallNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

google::protobuf::Timestamp Ts(std::int64_t ns) {
  google::protobuf::Timestamp t;
  t.set_seconds(ns / 1'000'000'000);
  t.set_nanos(static_cast<std::int32_t>(ns % 1'000'000'000));
  return t;
}

std::int64_t ProcField(pid_t pid, const std::string& file,
                       const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  }
  return -1;
}

std::int64_t RssBytes(pid_t pid) {
  return ProcField(pid, "status", "VmRSS:") * 1024;
}

// CPU time of all of a process's threads, in nanoseconds (schedstat's
// first field; /proc/PID/stat counts only in 10 ms ticks).
double CpuSeconds(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  double total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path() / "schedstat");
    std::uint64_t ns = 0;
    if (in >> ns) total += static_cast<double>(ns) / 1e9;
  }
  return total;
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
Percentiles Summarize(std::vector<double> v) {
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

  double SetRate(int concurrency, std::chrono::milliseconds d) {
    std::vector<CallSlot<v1::SetTimerRequest, v1::SetTimerResponse>> slots(
        concurrency);
    std::atomic<std::uint64_t> seq{0};
    return ClosedLoop(concurrency, d, [&](int s, auto done) {
      auto& slot = slots[s];
      slot.req.set_namespace_("unary");
      slot.req.set_key("u" + std::to_string(seq.fetch_add(1)));
      slot.req.set_payload("0123456789abcdef");
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
                   const std::string& ns) {
    constexpr int kDigits = 15;
    v1::BatchRequest proto;
    for (int i = 0; i < per_call; ++i) {
      auto* set = proto.add_operations()->mutable_set();
      set->set_namespace_(ns);
      set->set_key(KeyOf(i, kDigits));
      set->set_payload("0123456789abcdef");
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
              if (r.code() != 0) failed.fetch_add(1);
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

  // Subscribes a worker to `ns` and records lateness (ms) of `expect`
  // events, acking as it goes; gives up after `timeout`.
  std::vector<double> Lateness(const std::string& ns, std::size_t expect,
                               std::chrono::milliseconds timeout,
                               const std::function<void()>& after_subscribe) {
    grpc::ClientContext ctx;
    v1::SubscribeRequest req;
    req.set_namespace_(ns);
    req.set_max_in_flight(10000);
    auto reader = stubs_[0]->Subscribe(&ctx, req);
    v1::SubscribeResponse msg;
    std::vector<double> late;
    late.reserve(expect);
    fired_late_.clear();
    std::atomic<std::size_t> count{0};
    if (!reader->Read(&msg)) return late;  // Registered.
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
        v1::AckResponse ack_resp;
        grpc::ClientContext ack_ctx;
        stubs_[1 % stubs_.size()]->Ack(&ack_ctx, ack, &ack_resp);
      }
    });
    while (late.size() < expect && reader->Read(&msg)) {
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
    reader->Finish();
    return late;
  }

  v1::Delayd::Stub& stub() { return *stubs_[0]; }
  // fired_at minus fire time of the events of the last Lateness() run.
  const std::vector<double>& fired_late() const { return fired_late_; }

 private:
  std::vector<double> fired_late_;
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

std::uint64_t DirBytes(const std::string& dir) {
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    if (f.is_regular_file(ec)) total += f.file_size(ec);
  }
  return total;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Durable writes against in-memory, in alternating rounds.
void Durability(const std::string& binary, const std::string& scratch,
                std::chrono::milliseconds dur) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> modes = {
      {"in-memory", {"--in-memory"}},
      {"never", {"--fsync", "never"}},
      {"100ms", {"--fsync", "100ms"}},
      {"always", {"--fsync", "always"}}};
  std::vector<std::vector<double>> unary(modes.size()), batch(modes.size());
  for (int round = 0; round < 3; ++round) {
    for (std::size_t m = 0; m < modes.size(); ++m) {
      ScratchDaemon sd(binary, scratch, "durability", modes[m].second);
      if (!sd.d().ok()) {
        std::printf("daemon did not start: %s\n", sd.d().output().c_str());
        return;
      }
      Bench bench(sd.d().address(), 4);
      bench.SetRate(64, 300ms);  // Warm-up.
      unary[m].push_back(bench.SetRate(64, dur / 2));
      batch[m].push_back(bench.BatchRate(16, 100, dur / 2, "batch"));
    }
  }
  const double base_unary = Median(unary[0]);
  const double base_batch = Median(batch[0]);
  std::printf(
      "durability (medians of 3 alternating rounds; ratio to "
      "in-memory):\n");
  for (std::size_t m = 0; m < modes.size(); ++m) {
    std::printf(
        "  %-10s SetTimer %8.0f/s (%.2fx)   Batch %9.0f items/s (%.2fx)\n",
        modes[m].first.c_str(), Median(unary[m]), Median(unary[m]) / base_unary,
        Median(batch[m]), Median(batch[m]) / base_batch);
  }
}

// What TLS and token checks cost: the same daemon flags with and without
// --tls-cert/--tls-key/--auth-tokens, in alternating rounds.
void Security(const std::string& binary, const std::string& scratch,
              std::chrono::milliseconds dur, int rounds) {
  const std::string dir = scratch + "/security";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string make_certs =
      "cd '" + dir +
      "' && openssl req -x509 -newkey ec -pkeyopt "
      "ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem -days 2 "
      "-subj /CN=bench-ca 2>/dev/null && openssl req -newkey ec -pkeyopt "
      "ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.csr "
      "-subj /CN=localhost 2>/dev/null && printf "
      "'subjectAltName=IP:127.0.0.1\\n' > ext && openssl x509 -req -in "
      "server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem "
      "-days 2 -extfile ext 2>/dev/null && printf 'bench-token * admin\\n' > "
      "tokens";
  if (std::system(make_certs.c_str()) != 0) {
    std::printf("security: openssl failed\n");
    return;
  }
  std::ifstream ca_in(dir + "/ca.pem");
  std::stringstream ca;
  ca << ca_in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ca.str();
  const auto tls = grpc::SslCredentials(ssl);
  // Mode 1 sends the token through gRPC's call credentials, mode 2 as an
  // `authorization` header set on each call, as clients without call
  // credentials do. The daemon checks the same header either way; how the
  // client sends it may still cost both sides differently (for unary calls
  // the header mode measured 2-3 % lower: tests/bench/README.md).
  const auto with_call_credentials = grpc::CompositeChannelCredentials(
      tls, grpc::AccessTokenCredentials("bench-token"));
  const std::vector<std::string> plain_args = {"--in-memory"};
  const std::vector<std::string> secure_args = {
      "--in-memory",       "--tls-cert",    dir + "/server.pem", "--tls-key",
      dir + "/server.key", "--auth-tokens", dir + "/tokens"};
  constexpr int kModes = 3;
  std::vector<double> unary[kModes], batch[kModes], unary_cpu[kModes],
      batch_cpu[kModes];
  for (int round = 0; round < rounds; ++round) {
    for (int m = 0; m < kModes; ++m) {
      delayd::testing::DaemonProcess d(binary,
                                       m == 0 ? plain_args : secure_args);
      if (!d.ok()) {
        std::printf("daemon did not start: %s\n", d.output().c_str());
        return;
      }
      Bench bench(d.address(), 4,
                  m == 0   ? nullptr
                  : m == 1 ? with_call_credentials
                           : tls);
      if (m == 2) bench.SetBearer("bench-token");
      bench.SetRate(64, 300ms);  // Warm-up (and the TLS handshakes).
      const Measured u =
          WithCpu(d.pid(), [&] { return bench.SetRate(64, dur / 2); });
      const Measured b = WithCpu(
          d.pid(), [&] { return bench.BatchRate(16, 100, dur / 2, "batch"); });
      unary[m].push_back(u.rate);
      unary_cpu[m].push_back(u.cpu_us);
      batch[m].push_back(b.rate);
      batch_cpu[m].push_back(b.cpu_us);
    }
  }
  // Throughput as a ratio of plaintext; CPU per operation as plaintext's
  // over this mode's (the throughput ratio the daemon would reach if it had
  // the CPU to itself).
  std::printf("security (medians of %d alternating rounds):\n", rounds);
  const char* names[kModes] = {"plaintext", "TLS + tokens (call credentials)",
                               "TLS + tokens (header)"};
  for (int m = 0; m < kModes; ++m) {
    std::printf(
        "  %-32s SetTimer %7.0f/s (%.3fx)  Batch %8.0f items/s (%.3fx)\n"
        "  %-32s   daemon CPU per SetTimer %.2f us (%.3fx), per Batch item "
        "%.3f us (%.3fx)\n",
        names[m], Median(unary[m]), Median(unary[m]) / Median(unary[0]),
        Median(batch[m]), Median(batch[m]) / Median(batch[0]), "",
        Median(unary_cpu[m]), Median(unary_cpu[0]) / Median(unary_cpu[m]),
        Median(batch_cpu[m]), Median(batch_cpu[0]) / Median(batch_cpu[m]));
  }
}

// Two builds of the daemon side by side (the bound checks' cost):
// plaintext, in memory, alternating rounds.
// Daemons run with `args` (after `--`); without --in-memory each round
// gets a fresh data directory under `scratch`.
// `firing_only`: no unary or Batch rounds (ab-firing).
void AB(const std::string& a, const std::string& b,
        std::chrono::milliseconds dur, const std::string& scratch,
        const std::vector<std::string>& args,
        const std::vector<std::string>& b_args, int rounds, bool firing_only,
        std::uint64_t fire_count) {
  const bool in_memory =
      std::find(args.begin(), args.end(), "--in-memory") != args.end();
  std::vector<double> unary[2], batch[2], firing[2];
  std::vector<double> unary_cpu[2], batch_cpu[2], firing_cpu[2];
  for (int round = 0; round < rounds; ++round) {
    for (int m = 0; m < 2; ++m) {
      std::unique_ptr<ScratchDaemon> sd;
      std::unique_ptr<delayd::testing::DaemonProcess> plain;
      std::vector<std::string> own = args;
      if (m == 1) own.insert(own.end(), b_args.begin(), b_args.end());
      if (in_memory) {
        plain = std::make_unique<delayd::testing::DaemonProcess>(m == 0 ? a : b,
                                                                 own);
      } else {
        sd =
            std::make_unique<ScratchDaemon>(m == 0 ? a : b, scratch, "ab", own);
      }
      delayd::testing::DaemonProcess& d = in_memory ? *plain : sd->d();
      if (!d.ok()) {
        std::printf("daemon did not start: %s\n", d.output().c_str());
        return;
      }
      Bench bench(d.address(), 4);
      bench.SetRate(64, 300ms);  // Warm-up.
      if (!firing_only) {
        const Measured u =
            WithCpu(d.pid(), [&] { return bench.SetRate(64, dur / 2); });
        const Measured b = WithCpu(d.pid(), [&] {
          return bench.BatchRate(16, 100, dur / 2, "batch");
        });
        unary[m].push_back(u.rate);
        unary_cpu[m].push_back(u.cpu_us);
        batch[m].push_back(b.rate);
        batch_cpu[m].push_back(b.cpu_us);
      }
      // Firing: `fire_count` timers due at one instant, set beforehand,
      // taken by one worker; events per second from the fire time to the
      // last delivery. (50k took about 0.1 s, too short to be read within a
      // few percent.) The fill takes about 1 us per timer.
      const std::int64_t t0 = WallNanos() + 1'500'000'000 +
                              static_cast<std::int64_t>(2'000 * fire_count);
      const std::string ns = "fire" + std::to_string(round);
      // The daemon's CPU from the end of the fill (it idles until t0) to
      // the last ack.
      std::atomic<double> cpu0{0};
      auto late = bench.Lateness(ns, fire_count, 30s, [&] {
        bench.Fill(fire_count, ns, [&](std::uint64_t) { return t0; });
        cpu0 = CpuSeconds(d.pid());
      });
      const double cpu = CpuSeconds(d.pid()) - cpu0.load();
      const double last_ms =
          late.empty() ? 0 : *std::max_element(late.begin(), late.end());
      const bool all = late.size() == fire_count && last_ms > 0;
      firing[m].push_back(all ? fire_count / (last_ms / 1000) : 0);
      firing_cpu[m].push_back(all ? 1e6 * cpu / fire_count : 0);
    }
  }
  // CPU per operation as a ratio a/b: above 1, b costs the daemon less.
  auto cpu_line = [](const char* what, const std::vector<double>* cpu) {
    std::printf("  daemon CPU per %s: a %.3f us, b %.3f us (a/b %.3fx)\n", what,
                Median(cpu[0]), Median(cpu[1]),
                Median(cpu[0]) / Median(cpu[1]));
  };
  if (firing_only) {
    std::printf(
        "a/b firing (medians of %d alternating rounds): a %.0f/s, b %.0f/s "
        "(%.3fx)\n",
        rounds, Median(firing[0]), Median(firing[1]),
        Median(firing[1]) / Median(firing[0]));
    cpu_line("fired event", firing_cpu);
    return;
  }
  std::printf(
      "a/b (medians of %d alternating rounds; b as a ratio of a):\n"
      "  a %s: SetTimer %8.0f/s   Batch %9.0f items/s   firing %9.0f/s\n"
      "  b %s: SetTimer %8.0f/s (%.3fx)   Batch %9.0f items/s (%.3fx)   "
      "firing %9.0f/s (%.3fx)\n",
      rounds, a.c_str(), Median(unary[0]), Median(batch[0]), Median(firing[0]),
      b.c_str(), Median(unary[1]), Median(unary[1]) / Median(unary[0]),
      Median(batch[1]), Median(batch[1]) / Median(batch[0]), Median(firing[1]),
      Median(firing[1]) / Median(firing[0]));
  cpu_line("SetTimer", unary_cpu);
  cpu_line("Batch item", batch_cpu);
  cpu_line("fired event", firing_cpu);
}

// RSS per pending timer with small and 1 KiB payloads, durable.
void Payload(const std::string& binary, const std::string& scratch) {
  constexpr std::uint64_t kPending = 1'000'000;
  double per_timer[2] = {0, 0};
  const std::size_t sizes[2] = {16, 1024};
  for (int i = 0; i < 2; ++i) {
    ScratchDaemon sd(binary, scratch, "payload", {"--fsync", "never"});
    if (!sd.d().ok()) return;
    Bench bench(sd.d().address(), 4);
    const std::int64_t before = RssBytes(sd.d().pid());
    const std::int64_t far = WallNanos() + 3600LL * 1'000'000'000;
    bench.Fill(
        kPending, "payload",
        [&](std::uint64_t n) {
          return far + static_cast<std::int64_t>(Mix(n) % 1'000'000'000'000);
        },
        sizes[i]);
    const std::int64_t after = RssBytes(sd.d().pid());
    per_timer[i] = static_cast<double>(after - before) / kPending;
    std::printf(
        "payload %4zu B: RSS %.1f MiB -> %.1f MiB, %.1f B per pending timer, "
        "data dir %.1f MiB\n",
        sizes[i], before / 1048576.0, after / 1048576.0, per_timer[i],
        DirBytes(sd.dir()) / 1048576.0);
  }
  std::printf("payload: 1 KiB / 16 B RSS per timer = %.2fx\n",
              per_timer[1] / per_timer[0]);
}

// Set/move/remove on the same 10k keys: the data directory stays bounded.
void Churn(const std::string& binary, const std::string& scratch) {
  ScratchDaemon sd(binary, scratch, "churn", {"--fsync", "never"});
  if (!sd.d().ok()) return;
  auto stub = v1::Delayd::NewStub(grpc::CreateChannel(
      sd.d().address(), grpc::InsecureChannelCredentials()));
  constexpr int kKeys = 10'000;
  constexpr int kPerCall = 1000;
  const std::string payload(256, 'c');
  std::uint64_t ops = 0;
  const auto start = Clock::now();
  for (int million = 1; million <= 5; ++million) {
    while (ops < static_cast<std::uint64_t>(million) * 1'000'000) {
      v1::BatchRequest req;
      for (int i = 0; i < kPerCall; ++i, ++ops) {
        const std::string key =
            std::string("c").append(std::to_string(Mix(ops) % kKeys));
        switch (ops % 3) {
          case 0: {
            auto* set = req.add_operations()->mutable_set();
            set->set_namespace_("churn");
            set->set_key(key);
            set->set_payload(payload);
            set->mutable_delay()->set_seconds(3600);
            break;
          }
          case 1: {
            auto* move = req.add_operations()->mutable_move();
            move->set_namespace_("churn");
            move->set_key(key);
            move->mutable_delay()->set_seconds(7200);
            break;
          }
          default: {
            auto* rm = req.add_operations()->mutable_remove();
            rm->set_namespace_("churn");
            rm->set_key(key);
          }
        }
      }
      v1::BatchResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 60s);
      if (!stub->Batch(&ctx, req, &resp).ok()) {
        std::printf("churn: batch failed\n");
        return;
      }
    }
    v1::StatsResponse stats;
    grpc::ClientContext ctx;
    stub->Stats(&ctx, v1::StatsRequest(), &stats);
    std::printf(
        "churn: %dM ops on %d keys (256 B payloads): %llu pending, data dir "
        "%.1f MiB, %.0f s\n",
        million, kKeys, static_cast<unsigned long long>(stats.pending_timers()),
        DirBytes(sd.dir()) / 1048576.0,
        std::chrono::duration<double>(Clock::now() - start).count());
  }
}

// Start-up time with many pending timers.
void Recovery(const std::string& binary, const std::string& scratch) {
  for (std::uint64_t n : {1'000'000ull, 10'000'000ull}) {
    const std::string dir = scratch + "/recovery";
    std::filesystem::remove_all(dir);
    {
      delayd::testing::DaemonProcess d(
          binary, {"--data-dir", dir, "--fsync", "never"}, 60s);
      if (!d.ok()) return;
      Bench bench(d.address(), 4);
      const std::int64_t far = WallNanos() + 3600LL * 1'000'000'000;
      bench.Fill(n, "recovery", [&](std::uint64_t i) {
        return far + static_cast<std::int64_t>(Mix(i) % 1'000'000'000'000);
      });
      d.Stop(SIGTERM, 120s);
    }
    const auto t0 = Clock::now();
    delayd::testing::DaemonProcess d(binary, {"--data-dir", dir}, 300s);
    const double took =
        std::chrono::duration<double>(Clock::now() - t0).count();
    std::string logged = "?";
    const auto at = d.output().find("recovered ");
    if (at != std::string::npos) {
      logged = d.output().substr(at, d.output().find('\n', at) - at);
    }
    std::printf(
        "recovery %lluM: ready to serve %.2f s after exec; RSS %.0f MiB, data "
        "dir %.0f MiB; logged: %s\n",
        static_cast<unsigned long long>(n / 1'000'000), took,
        RssBytes(d.pid()) / 1048576.0, DirBytes(dir) / 1048576.0,
        logged.c_str());
    d.Stop(SIGTERM, 120s);
    std::filesystem::remove_all(dir);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // As in the daemon: Debian's Abseil checks lock order on every absl::Mutex
  // operation, CPU this process would take from the daemon it measures.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::string daemon = DELAYD_BINARY;
  std::string daemon_b;
  std::string only;
  std::string scratch = std::filesystem::temp_directory_path() / "delayd-bench";
  int seconds = 3;
  int rounds = 0;  // 0: each section's own (ab 5, security 3).
  std::uint64_t fire_count = 200'000;  // Timers per firing round of ab.
  std::vector<std::string> daemon_args = {"--in-memory"};
  std::vector<std::string> b_args;  // Given to --daemon-b only.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--daemon" && i + 1 < argc) {
      daemon = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::stoi(argv[++i]);
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--fire" && i + 1 < argc) {
      fire_count = std::max(1000ULL, std::stoull(argv[++i]));
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--daemon-b" && i + 1 < argc) {
      daemon_b = argv[++i];
    } else if (a == "--b-arg" && i + 1 < argc) {
      b_args.push_back(argv[++i]);
    } else if (a == "--scratch" && i + 1 < argc) {
      scratch = argv[++i];
    } else if (a == "--") {
      daemon_args.assign(argv + i + 1, argv + argc);
      break;
    }
  }
  std::filesystem::create_directories(scratch);
  const std::chrono::milliseconds dur(seconds * 1000);
  auto want = [&](const char* name) { return only.empty() || only == name; };

  if (want("unary") || want("batch") || want("lateness") || want("memory")) {
    delayd::testing::DaemonProcess d(daemon, daemon_args);
    if (!d.ok()) {
      std::fprintf(stderr, "daemon did not start:\n%s\n", d.output().c_str());
      return 1;
    }
    std::printf("delayd pid %d on %s\n", d.pid(), d.address().c_str());
    Bench bench(d.address(), 4);
    if (want("unary")) {
      // Alternating rounds, medians compared: the machine is shared and noisy.
      bench.HealthRate(64, 500ms);  // Warm-up.
      std::vector<double> health, set;
      for (int round = 0; round < 5; ++round) {
        health.push_back(bench.HealthRate(64, dur / 5));
        set.push_back(bench.SetRate(64, dur / 5));
      }
      std::sort(health.begin(), health.end());
      std::sort(set.begin(), set.end());
      std::printf(
          "unary: health Check %.0f/s, SetTimer %.0f/s (medians of 5 "
          "alternating rounds), ratio %.2f\n",
          health[2], set[2], set[2] / health[2]);
    }
    if (want("batch")) {
      for (int in_flight : {8, 16}) {
        const double daemon_cpu = CpuSeconds(d.pid());
        const double own_cpu = CpuSeconds(getpid());
        const auto start = Clock::now();
        const double items = bench.BatchRate(in_flight, 100, dur, "batch");
        const double wall =
            std::chrono::duration<double>(Clock::now() - start).count();
        std::printf(
            "batch: %.0f items/s (100 per call, %d calls in flight); CPU "
            "daemon %.2f cores (%.2f us per item), load_gen %.2f cores\n",
            items, in_flight, (CpuSeconds(d.pid()) - daemon_cpu) / wall,
            1e6 * (CpuSeconds(d.pid()) - daemon_cpu) / (items * wall),
            (CpuSeconds(getpid()) - own_cpu) / wall);
      }
    }
    if (want("lateness")) {
      // Steady: 2k timers/s for `seconds`, each 50 ms ahead.
      const std::size_t n = static_cast<std::size_t>(2000 * seconds);
      auto late = bench.Lateness("steady", n, dur + 10s, [&] {
        const auto start = Clock::now();
        for (std::size_t i = 0; i < n; ++i) {
          std::this_thread::sleep_until(start +
                                        std::chrono::microseconds(500 * i));
          v1::SetTimerRequest req;
          req.set_namespace_("steady");
          req.set_key(std::string("s").append(std::to_string(i)));
          req.mutable_delay()->set_nanos(50'000'000);
          v1::SetTimerResponse resp;
          grpc::ClientContext ctx;
          bench.stub().SetTimer(&ctx, req, &resp);
        }
      });
      Percentiles p = Summarize(late);
      std::printf(
          "lateness steady 2k/s: n=%zu p50 %.3f ms p99 %.3f ms p99.9 %.3f ms "
          "max %.3f ms\n",
          p.n, p.p50, p.p99, p.p999, p.max);
      p = Summarize(bench.fired_late());
      std::printf(
          "  of which firing (fired_at - fire time): p50 %.3f ms p99 "
          "%.3f ms max %.3f ms\n",
          p.p50, p.p99, p.max);
      // Burst: 100k due within one second, set beforehand.
      constexpr std::uint64_t kBurst = 100'000;
      const std::int64_t t0 = WallNanos() + 4'000'000'000;
      late = bench.Lateness("burst", kBurst, 30s, [&] {
        bench.Fill(kBurst, "burst", [&](std::uint64_t i) {
          return t0 + static_cast<std::int64_t>(i * 1'000'000'000 / kBurst);
        });
      });
      p = Summarize(late);
      std::printf(
          "lateness burst 100k in 1 s: n=%zu p50 %.3f ms p99 %.3f ms p99.9 "
          "%.3f ms max %.3f ms\n",
          p.n, p.p50, p.p99, p.p999, p.max);
      p = Summarize(bench.fired_late());
      std::printf(
          "  of which firing (fired_at - fire time): p50 %.3f ms p99 "
          "%.3f ms max %.3f ms\n",
          p.p50, p.p99, p.max);
    }
    if (want("memory")) {
      constexpr std::uint64_t kPending = 1'000'000;
      const std::int64_t before = RssBytes(d.pid());
      const std::int64_t far = WallNanos() + 3600LL * 1'000'000'000;
      bench.Fill(kPending, "memory", [&](std::uint64_t i) {
        return far + static_cast<std::int64_t>(Mix(i) % 1'000'000'000'000);
      });
      const std::int64_t after = RssBytes(d.pid());
      std::printf(
          "memory: RSS %.1f MiB -> %.1f MiB, %.1f B per pending timer\n",
          before / 1048576.0, after / 1048576.0,
          static_cast<double>(after - before) / kPending);
      // Idle: nothing due for an hour.
      const double cpu_before = CpuSeconds(d.pid());
      const auto idle_start = Clock::now();
      std::this_thread::sleep_for(10s);  // The measurement window itself.
      const double wall =
          std::chrono::duration<double>(Clock::now() - idle_start).count();
      const double cpu = CpuSeconds(d.pid()) - cpu_before;
      std::printf("idle: %.4f%% of a core over %.1f s with 1M pending\n",
                  100.0 * cpu / wall, wall);
    }
    const auto code = d.Stop(SIGTERM, 10s);
    std::printf("daemon exit code %d\n", code ? *code : -1);
  }
  if (want("durability")) Durability(daemon, scratch, dur);
  if (want("payload")) Payload(daemon, scratch);
  if (want("churn")) Churn(daemon, scratch);
  if (want("recovery")) Recovery(daemon, scratch);
  if (want("security")) {
    Security(daemon, scratch, dur, rounds > 0 ? rounds : 3);
  }
  if (rounds == 0) rounds = 5;
  if (!daemon_b.empty() && want("ab")) {
    AB(daemon, daemon_b, dur, scratch, daemon_args, b_args, rounds, false,
       fire_count);
  }
  if (!daemon_b.empty() && only == "ab-firing") {
    AB(daemon, daemon_b, dur, scratch, daemon_args, b_args, rounds, true,
       fire_count);
  }
  return 0;
}
