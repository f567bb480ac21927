// The metrics endpoint scraped by a real Prometheus (Debian's `prometheus`,
// on loopback): after a known load, Prometheus's HTTP API gives the pending
// gauge the test left and a lateness quantile that agrees with what the
// test's worker measured.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "delayd/v1/delayd.grpc.pb.h"
#include "tests/common/daemon_process.h"
#include "tests/common/metrics_scrape.h"
#include "tests/common/temp_dir.h"

namespace delayd::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::int64_t WallNowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A port the OS picked and freed just now.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::string UrlEncode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

// A Prometheus server scraping `target` every second; stopped (and waited
// for) by the destructor.
class Prometheus {
 public:
  Prometheus(const TempDir& dir, const std::string& target) {
    port_ = FreePort();
    const std::string config = dir / "prometheus.yml";
    std::ofstream(config) << "global:\n  scrape_interval: 1s\n"
                          << "scrape_configs:\n  - job_name: delayd\n"
                          << "    static_configs:\n      - targets: ['"
                          << target << "']\n";
    std::vector<std::string> args = {
        "prometheus", "--config.file=" + config,
        "--storage.tsdb.path=" + (dir / "tsdb"),
        "--web.listen-address=127.0.0.1:" + std::to_string(port_),
        "--log.level=warn"};
    const std::string log = dir / "prometheus.log";
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      execvp("prometheus", argv.data());
      _exit(127);
    }
  }
  ~Prometheus() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + 10s;
    int status;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(20ms);  // The pause of a bounded poll.
    }
  }
  // Waits (up to `timeout`) until Prometheus answers as ready.
  bool WaitReady(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (HttpGet(port_, "/-/ready")) return true;
      std::this_thread::sleep_for(100ms);  // The pause of a bounded poll.
    }
    return false;
  }
  // The value of an instant query whose result is one sample.
  std::optional<double> Query(const std::string& promql) {
    auto body = HttpGet(port_, "/api/v1/query?query=" + UrlEncode(promql));
    if (!body) return std::nullopt;
    const auto at = body->find("\"value\":[");
    if (at == std::string::npos) return std::nullopt;
    const auto open = body->find('"', body->find(',', at));
    const auto end = body->find('"', open + 1);
    return std::stod(body->substr(open + 1, end - open - 1));
  }
  // The raw answer to an instant query.
  std::string Answer(const std::string& promql) {
    return HttpGet(port_, "/api/v1/query?query=" + UrlEncode(promql))
        .value_or("");
  }
  // Polls `promql` until it equals `want` (up to `timeout`); the last value.
  std::optional<double> WaitFor(const std::string& promql, double want,
                                std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::optional<double> v;
    while (Clock::now() < deadline) {
      v = Query(promql);
      if (v == want) break;
      std::this_thread::sleep_for(200ms);  // The pause of a bounded poll.
    }
    return v;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST(Prometheus, ScrapesThePendingGaugeAndALatenessQuantile) {
  TempDir dir;
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir / "data", "--fsync",
                                  "never", "--metrics-listen", "127.0.0.1:0"});
  ASSERT_TRUE(d.ok()) << d.output();
  int metrics_port = 0;
  for (auto deadline = Clock::now() + 5s;
       metrics_port == 0 && Clock::now() < deadline;) {
    metrics_port = MetricsPortIn(d.output());
    std::this_thread::sleep_for(10ms);  // The pause of a bounded poll.
  }
  ASSERT_NE(metrics_port, 0) << d.output();
  Prometheus prometheus(dir, "127.0.0.1:" + std::to_string(metrics_port));
  ASSERT_TRUE(prometheus.WaitReady(30s));

  // The load: 300 timers due in 0.5-0.8 s, taken and acked by a worker, and
  // 40 left pending for an hour.
  auto stub = v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
  constexpr int kFired = 300;
  constexpr int kPending = 40;
  grpc::ClientContext sub_ctx;
  v1::SubscribeRequest sub;
  sub.set_namespace_("p");
  sub.set_max_in_flight(1000);
  auto reader = stub->Subscribe(&sub_ctx, sub);
  v1::SubscribeResponse msg;
  ASSERT_TRUE(reader->Read(&msg));  // Registered.
  for (int i = 0; i < kFired + kPending; ++i) {
    v1::SetTimerRequest req;
    req.set_namespace_("p");
    req.set_key("k" + std::to_string(i));
    req.mutable_delay()->set_nanos(i < kFired ? 500'000'000 + i * 1'000'000
                                              : 0);
    if (i >= kFired) req.mutable_delay()->set_seconds(3600);
    v1::SetTimerResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->SetTimer(&ctx, req, &resp).ok());
  }
  std::vector<double> late;  // Seconds, as the worker measured them.
  std::atomic<std::size_t> count{0};
  std::thread watchdog([&] {
    // Bounds the reads below.
    const auto deadline = Clock::now() + 20s;
    while (Clock::now() < deadline && count.load() < kFired) {
      std::this_thread::sleep_for(50ms);  // The pause of a bounded poll.
    }
    sub_ctx.TryCancel();
  });
  std::size_t received = 0;
  while (received < kFired && reader->Read(&msg)) {
    const std::int64_t now = WallNowNanos();
    v1::AckRequest ack;
    ack.set_namespace_("p");
    for (const auto& e : msg.events()) {
      late.push_back(
          static_cast<double>(now - (e.fire_time().seconds() * 1'000'000'000 +
                                     e.fire_time().nanos())) /
          1e9);
      ack.add_event_ids(e.id());
    }
    received = late.size();
    count.store(received);
    v1::AckResponse ack_resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->Ack(&ctx, ack, &ack_resp).ok());
  }
  sub_ctx.TryCancel();
  watchdog.join();
  ASSERT_EQ(received, static_cast<std::size_t>(kFired));

  // Prometheus has what the test did, once it scraped after it.
  EXPECT_EQ(prometheus.WaitFor("delayd_events_acked_total{namespace=\"p\"}",
                               kFired, 30s),
            kFired);
  EXPECT_EQ(
      prometheus.Query("delayd_pending_timers{namespace=\"p\",job=\"delayd\"}"),
      kPending);
  EXPECT_EQ(prometheus.Query("delayd_delivery_lateness_seconds_count"), kFired);
  // The median delivery lateness: delayd measures it at the hand-over to the
  // stream, before the worker reads it, so it is no later than the worker's
  // own median, to within the bucket Prometheus interpolates in.
  std::sort(late.begin(), late.end());
  const double worker_median = late[late.size() / 2];
  const auto median = prometheus.Query(
      "histogram_quantile(0.5, delayd_delivery_lateness_seconds_bucket)");
  ASSERT_TRUE(median.has_value());
  EXPECT_GE(*median, 0.0);
  // delayd's buckets (server/common/metrics.cc).
  const std::vector<double> bounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
      0.25,   0.5,     1,      2.5,   5,      10,    30,   60,    300};
  const double bucket_top =
      *std::lower_bound(bounds.begin(), bounds.end(), worker_median);
  EXPECT_LE(*median, bucket_top) << "worker median " << worker_median;
  // Every delivery was under a second late on this idle daemon, and the
  // firing histogram agrees.
  EXPECT_EQ(prometheus.Query("delayd_firing_lateness_seconds_bucket{le=\"1\"}"),
            kFired);

  // Every query of the dashboard (docker/grafana/) is valid PromQL, and
  // those without a rate find their series.
  std::ifstream file(std::string(DELAYD_SOURCE_DIR) +
                     "/docker/grafana/dashboards/delayd.json");
  const std::string dashboard((std::istreambuf_iterator<char>(file)),
                              std::istreambuf_iterator<char>());
  int queries = 0;
  for (auto at = dashboard.find("\"expr\": \""); at != std::string::npos;
       at = dashboard.find("\"expr\": \"", at + 1)) {
    const auto start = at + 9;
    std::string expr =
        dashboard.substr(start, dashboard.find("\",", start) - start);
    for (auto q = expr.find("\\\""); q != std::string::npos;
         q = expr.find("\\\"")) {
      expr.replace(q, 2, "\"");
    }
    for (auto m = expr.find("$__rate_interval"); m != std::string::npos;
         m = expr.find("$__rate_interval")) {
      expr.replace(m, 16, "1m");
    }
    ++queries;
    const std::string answer = prometheus.Answer(expr);
    EXPECT_NE(answer.find("\"status\":\"success\""), std::string::npos)
        << expr << ": " << answer;
    // (A rate needs two scrapes within its window: only the series it
    // reads must exist.)
    if (expr.find("rate(") == std::string::npos) {
      EXPECT_EQ(answer.find("\"result\":[]"), std::string::npos)
          << expr << " matched nothing";
    }
  }
  EXPECT_GE(queries, 20);
}

}  // namespace
}  // namespace delayd::testing
