// The HTTP door against the gRPC port on one daemon: SetTimer with 64 in
// flight (HTTP: 64 keep-alive connections, one request at a time each) and
// Batch of 100 with 16 in flight, in alternating rounds, medians compared
// (`--only http`); and a worker that pulls over HTTP against a gRPC
// worker, at a steady 2k timers/s and draining a burst (`--only pull`).
#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "tests/bench/bench_client.h"
#include "tests/bench/sections.h"
#include "tests/common/daemon_process.h"
#include "tests/common/http_client.h"

namespace delayd::bench {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int HttpPort(delayd::testing::DaemonProcess& d) {
  if (!d.WaitForOutput("HTTP/JSON API on", 10s)) return 0;
  const std::string out = d.output();
  const std::size_t at = out.find("(port ", out.find("HTTP/JSON API on"));
  return at == std::string::npos ? 0 : std::stoi(out.substr(at + 6));
}

// One keep-alive connection: a request, then its whole answer (headers up
// to the blank line, then Content-Length bytes). False on any failure.
class KeepAlive {
 public:
  explicit KeepAlive(int port) : fd_(delayd::testing::HttpConnect(port)) {}
  ~KeepAlive() {
    if (fd_ >= 0) close(fd_);
  }
  bool Call(const std::string& method, const std::string& target,
            const std::string& body) {
    const std::string req = method + " " + target +
                            " HTTP/1.1\r\nHost: b\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    if (fd_ < 0 || !delayd::testing::SendAll(fd_, req)) return false;
    std::size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return false;
    }
    const bool ok = buf_.rfind("HTTP/1.1 200", 0) == 0;
    const std::size_t cl = buf_.find("Content-Length: ");
    if (cl == std::string::npos || cl > end) return false;
    const std::size_t need = end + 4 + std::stoul(buf_.substr(cl + 16));
    while (buf_.size() < need) {
      if (!Fill()) return false;
    }
    body_.assign(buf_, end + 4, need - end - 4);
    buf_.erase(0, need);
    return ok;
  }
  // The body of the last answer.
  const std::string& body() const { return body_; }

 private:
  bool Fill() {
    char tmp[16384];
    const ssize_t n = recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<std::size_t>(n));
    return true;
  }
  int fd_;
  std::string buf_;
  std::string body_;
};

// The results of a Batch answer with a code other than 0 (none in another
// answer).
std::uint64_t RefusedItems(const std::string& body) {
  std::uint64_t n = 0;
  for (std::size_t at = body.find("\"code\":"); at != std::string::npos;
       at = body.find("\"code\":", at + 7)) {
    if (body.compare(at + 7, 2, "0,") != 0) ++n;
  }
  return n;
}

// Requests/s over `connections` connections for `d`, each sending
// make(connection, seq) one at a time.
template <typename Make>
double HttpRate(int port, int connections, std::chrono::milliseconds d,
                Make make) {
  std::atomic<std::uint64_t> done{0}, failed{0}, refused{0}, seq{0};
  const auto end = Clock::now() + d;
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&] {
      KeepAlive conn(port);
      while (Clock::now() < end) {
        const auto [method, target, body] = make(seq.fetch_add(1));
        if (!conn.Call(method, target, body)) {
          failed.fetch_add(1);
          return;
        }
        done.fetch_add(1);
        refused.fetch_add(RefusedItems(conn.body()));
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failed.load() != 0) {
    std::printf("  (%llu connections failed)\n",
                static_cast<unsigned long long>(failed.load()));
  }
  if (refused.load() != 0) {
    std::printf("  (%llu batch items failed)\n",
                static_cast<unsigned long long>(refused.load()));
  }
  return static_cast<double>(done.load()) /
         std::chrono::duration<double>(d).count();
}

struct Request {
  std::string method, target, body;
};

Request HttpSet(std::uint64_t i) {
  return {"PUT", "/v1/namespaces/h/timers/u" + std::to_string(i),
          R"({"payload": "MDEyMzQ1Njc4OWFiY2RlZg==", "delay": "3600s"})"};
}

// A Batch of 100 sets, keys i*100 .. i*100+99. As on the gRPC side
// (bench_client.h BatchRate), the body is built once and each call rewrites
// its keys' digits in a copy, so that this process's CPU goes to the
// transport.
Request HttpBatch(std::uint64_t i) {
  constexpr int kDigits = 15;
  static const auto [body, digits_at] = [] {
    std::string body = R"({"operations": [)";
    std::vector<std::size_t> at;
    for (int k = 0; k < 100; ++k) {
      if (k > 0) body += ',';
      body += R"({"set": {"namespace": "hb", "key": ")";
      at.push_back(body.size() + 1);  // after the key's "b"
      body += KeyOf(0, kDigits) +
              R"(", "payload": "MDEyMzQ1Njc4OWFiY2RlZg==", "delay": "3600s"}})";
    }
    return std::pair(body + "]}", at);
  }();
  Request r{"POST", "/v1/timers:batch", body};
  for (std::size_t k = 0; k < digits_at.size(); ++k) {
    WriteDigits(i * 100 + k, r.body.data() + digits_at[k], kDigits);
  }
  return r;
}

// The events of a PullResponse in JSON: each id (a string) and fire time.
struct Pulled {
  std::vector<std::string> ids;
  std::vector<std::int64_t> fire_ns;
};
Pulled ParsePull(const std::string& json) {
  Pulled out;
  auto field = [&](std::size_t from, const char* name, std::string* value) {
    const std::size_t at = json.find(name, from);
    if (at == std::string::npos) return std::string::npos;
    const std::size_t start = at + std::strlen(name);
    const std::size_t end = json.find('"', start);
    *value = json.substr(start, end - start);
    return end;
  };
  std::size_t pos = 0;
  std::string id, fire;
  while ((pos = field(pos, "{\"id\":\"", &id)) != std::string::npos) {
    pos = field(pos, "\"fireTime\":\"", &fire);
    if (pos == std::string::npos) break;
    google::protobuf::Timestamp t;
    google::protobuf::util::TimeUtil::FromString(fire, &t);
    out.ids.push_back(id);
    out.fire_ns.push_back(t.seconds() * 1'000'000'000 + t.nanos());
  }
  return out;
}

// A worker that pulls over HTTP (up to 1000 events, waiting up to 1 s) and
// acknowledges what it got, on one keep-alive connection, until `expect`
// events came or `timeout` passed. Lateness of each: arrival minus fire
// time, ms.
std::vector<double> PullWorker(int port, const std::string& ns,
                               std::size_t expect,
                               std::chrono::milliseconds timeout) {
  KeepAlive conn(port);
  std::vector<double> late;
  const auto deadline = Clock::now() + timeout;
  const std::string path = "/v1/namespaces/" + ns + "/events";
  while (late.size() < expect && Clock::now() < deadline) {
    if (!conn.Call("POST", path + ":pull",
                   R"({"maxEvents": 1000, "wait": "1s"})")) {
      break;
    }
    const std::int64_t now = WallNanos();
    const Pulled p = ParsePull(conn.body());
    if (p.ids.empty()) continue;
    std::string ack = R"({"eventIds": [)";
    for (std::size_t i = 0; i < p.ids.size(); ++i) {
      late.push_back(static_cast<double>(now - p.fire_ns[i]) / 1e6);
      ack += i ? ",\"" : "\"";
      ack += p.ids[i];
      ack += '"';
    }
    if (!conn.Call("POST", path + ":ack", ack + "]}")) break;
  }
  return late;
}

// Sets n timers, 2k/s, one at a time over gRPC, each 50 ms ahead.
void SetSteady(Bench& bench, const std::string& ns, std::size_t n) {
  const auto start = Clock::now();
  for (std::size_t i = 0; i < n; ++i) {
    std::this_thread::sleep_until(start + std::chrono::microseconds(500 * i));
    v1::SetTimerRequest req;
    req.set_namespace_(ns);
    req.set_key(std::string("s").append(std::to_string(i)));
    req.mutable_delay()->set_nanos(50'000'000);
    v1::SetTimerResponse resp;
    grpc::ClientContext ctx;
    bench.stub().SetTimer(&ctx, req, &resp);
  }
}

void PrintLate(const char* what, std::vector<double> late, double seconds) {
  const Percentiles p = Summarize(std::move(late));
  std::printf(
      "  %-34s n=%zu in %.2f s (%.0f/s): p50 %.2f ms p99 %.2f ms max %.2f "
      "ms\n",
      what, p.n, seconds, static_cast<double>(p.n) / seconds, p.p50, p.p99,
      p.max);
}

}  // namespace

void Pull(const std::string& binary, std::chrono::milliseconds dur) {
  delayd::testing::DaemonProcess d(
      binary, {"--in-memory", "--http-listen", "127.0.0.1:0"});
  const int port = HttpPort(d);
  if (!d.ok() || port == 0) {
    std::fprintf(stderr, "daemon did not start:\n%s\n", d.output().c_str());
    return;
  }
  Bench bench(d.address(), 4);
  const std::size_t n = static_cast<std::size_t>(
      2 * std::chrono::duration_cast<std::chrono::milliseconds>(dur).count());
  constexpr std::size_t kBurst = 50'000;
  for (int round = 0; round < 3; ++round) {
    std::printf("round %d\n", round + 1);
    // Steady 2k/s: a gRPC worker, then an HTTP pull worker.
    auto t0 = Clock::now();
    auto late = bench.Lateness("sg" + std::to_string(round), n, dur + 20s, [&] {
      SetSteady(bench, "sg" + std::to_string(round), n);
    });
    PrintLate("steady 2k/s, gRPC worker", std::move(late),
              std::chrono::duration<double>(Clock::now() - t0).count());
    const std::string sh = "sh" + std::to_string(round);
    t0 = Clock::now();
    std::thread setter([&] { SetSteady(bench, sh, n); });
    late = PullWorker(port, sh, n, dur + 20s);
    setter.join();
    PrintLate("steady 2k/s, HTTP pull worker", std::move(late),
              std::chrono::duration<double>(Clock::now() - t0).count());
    // A burst: kBurst timers due at one instant 2 s ahead (set
    // beforehand), drained by one worker; its rate is kBurst over the last
    // event's lateness.
    for (const bool http : {false, true}) {
      const std::string ns = (http ? "bh" : "bg") + std::to_string(round);
      const std::int64_t due = WallNanos() + 2'000'000'000;
      auto fill = [&] {
        bench.Fill(kBurst, ns, [&](std::uint64_t) { return due; });
      };
      std::vector<double> got;
      if (http) {
        std::thread filler(fill);
        got = PullWorker(port, ns, kBurst, 60s);
        filler.join();
      } else {
        got = bench.Lateness(ns, kBurst, 60s, fill);
      }
      const double last =
          got.empty() ? 0 : *std::max_element(got.begin(), got.end()) / 1e3;
      PrintLate(http ? "burst 50k, HTTP pull worker" : "burst 50k, gRPC worker",
                std::move(got), last);
    }
  }
}

void Http(const std::string& binary, std::chrono::milliseconds dur) {
  delayd::testing::DaemonProcess d(
      binary,
      // Room for every timer the rounds set: a refused set costs the
      // daemon less than a kept one and would flatter the figure.
      {"--in-memory", "--http-listen", "127.0.0.1:0", "--max-pending-timers",
       "200000000"});
  const int port = HttpPort(d);
  if (!d.ok() || port == 0) {
    std::fprintf(stderr, "daemon did not start:\n%s\n", d.output().c_str());
    return;
  }
  Bench bench(d.address(), 4);
  std::vector<double> grpc_set, http_set, grpc_batch, http_batch;
  bench.SetRate(64, 500ms);  // Warm-up.
  HttpRate(port, 64, 500ms, [](std::uint64_t i) { return HttpSet(i); });
  // Each side goes first in every other round: the daemon slows a little as
  // it fills, and the side measured later would pay for it.
  for (int round = 0; round < 5; ++round) {
    auto grpc = [&] {
      grpc_set.push_back(bench.SetRate(64, dur / 5));
      grpc_batch.push_back(bench.BatchRate(16, 100, dur / 5, "gb"));
    };
    auto http = [&] {
      http_set.push_back(HttpRate(port, 64, dur / 5,
                                  [](std::uint64_t i) { return HttpSet(i); }));
      http_batch.push_back(100 *
                           HttpRate(port, 16, dur / 5, [](std::uint64_t i) {
                             return HttpBatch(i + (std::uint64_t{1} << 30));
                           }));
    };
    if (round % 2 == 0) {
      grpc();
      http();
    } else {
      http();
      grpc();
    }
  }
  const double gs = Median(grpc_set), hs = Median(http_set);
  const double gb = Median(grpc_batch), hb = Median(http_batch);
  std::printf(
      "http: SetTimer %.0f/s against gRPC %.0f/s = %.2fx (64 in flight; "
      "target >= 0.5x)\n",
      hs, gs, hs / gs);
  std::printf(
      "http: Batch %.0f items/s against gRPC %.0f items/s = %.2fx (100 per "
      "call, 16 in flight; target >= 0.7x)\n",
      hb, gb, hb / gb);
  std::printf("  (medians of 5 alternating rounds; rounds:");
  for (int r = 0; r < 5; ++r) {
    std::printf(" %.2f/%.2f", http_set[r] / grpc_set[r],
                http_batch[r] / grpc_batch[r]);
  }
  std::printf(")\n  (Batch k items/s by round, HTTP/gRPC:");
  for (int r = 0; r < 5; ++r) {
    std::printf(" %.0f/%.0f", http_batch[r] / 1e3, grpc_batch[r] / 1e3);
  }
  std::printf(")\n");
}

}  // namespace delayd::bench
