// The HTTP door against the gRPC port on one daemon: SetTimer with 64 in
// flight (HTTP: 64 keep-alive connections, one request at a time each) and
// Batch of 100 with 16 in flight, in alternating rounds, medians compared.
#include <atomic>
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
    buf_.erase(0, need);
    return ok;
  }

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
};

// Requests/s over `connections` connections for `d`, each sending
// make(connection, seq) one at a time.
template <typename Make>
double HttpRate(int port, int connections, std::chrono::milliseconds d,
                Make make) {
  std::atomic<std::uint64_t> done{0}, failed{0}, seq{0};
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
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failed.load() != 0) {
    std::printf("  (%llu connections failed)\n",
                static_cast<unsigned long long>(failed.load()));
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

Request HttpBatch(std::uint64_t i) {
  std::string body = R"({"operations": [)";
  for (int k = 0; k < 100; ++k) {
    if (k > 0) body += ',';
    body += R"({"set": {"namespace": "hb", "key": ")" +
            KeyOf(i * 100 + static_cast<std::uint64_t>(k), 15) +
            R"(", "payload": "MDEyMzQ1Njc4OWFiY2RlZg==", "delay": "3600s"}})";
  }
  return {"POST", "/v1/timers:batch", body + "]}"};
}

}  // namespace

void Http(const std::string& binary, std::chrono::milliseconds dur) {
  delayd::testing::DaemonProcess d(
      binary,
      {"--in-memory", "--http-listen", "127.0.0.1:0", "--http-threads", "80"});
  const int port = HttpPort(d);
  if (!d.ok() || port == 0) {
    std::fprintf(stderr, "daemon did not start:\n%s\n", d.output().c_str());
    return;
  }
  Bench bench(d.address(), 4);
  std::vector<double> grpc_set, http_set, grpc_batch, http_batch;
  bench.SetRate(64, 500ms);  // Warm-up.
  HttpRate(port, 64, 500ms, [](std::uint64_t i) { return HttpSet(i); });
  for (int round = 0; round < 5; ++round) {
    grpc_set.push_back(bench.SetRate(64, dur / 5));
    http_set.push_back(HttpRate(port, 64, dur / 5,
                                [](std::uint64_t i) { return HttpSet(i); }));
    grpc_batch.push_back(bench.BatchRate(16, 100, dur / 5, "gb"));
    http_batch.push_back(100 * HttpRate(port, 16, dur / 5, [](std::uint64_t i) {
                           return HttpBatch(i + (std::uint64_t{1} << 30));
                         }));
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
  std::printf(")\n");
}

}  // namespace delayd::bench
