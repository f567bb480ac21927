// The HTTP/JSON door end to end: the real daemon, a plain HTTP client, and
// a gRPC client beside it for what HTTP does not do (the event stream).
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <simdjson.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/http/routes.h"
#include "tests/common/daemon_process.h"
#include "tests/common/http_client.h"
#include "tests/common/temp_dir.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::HttpRequest;
using testing::HttpResponse;

// The HTTP port from the daemon's log line ("HTTP/JSON API on ... (port N").
int HttpPort(DaemonProcess& d) {
  if (!d.WaitForOutput("HTTP/JSON API on", 10s)) return 0;
  const std::string out = d.output();
  const std::size_t line = out.find("HTTP/JSON API on");
  const std::size_t at = out.find("(port ", line);
  return at == std::string::npos ? 0 : std::stoi(out.substr(at + 6));
}

template <typename M>
M Parse(const HttpResponse& r) {
  M m;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.body, &m).ok())
      << r.body;
  return m;
}

// The error body's "status" (the gRPC code's name), after checking that its
// "code" is the HTTP status. (Read as text: a google.protobuf.Struct would
// not do under ThreadSanitizer; see server/http/json_text.h.)
std::string ErrorStatus(const HttpResponse& r) {
  const std::string code =
      R"({"error":{"code":)" + std::to_string(r.status) + R"(,"status":")";
  EXPECT_EQ(r.body.rfind(code, 0), 0u) << r.body;
  if (r.body.rfind(code, 0) != 0) return "";
  const std::size_t start = code.size();
  return r.body.substr(start, r.body.find('"', start) - start);
}

class HttpTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> args) {
    args.insert(args.end(), {"--in-memory", "--http-listen", "127.0.0.1:0"});
    d_ = std::make_unique<DaemonProcess>(DELAYD_BINARY, args);
    ASSERT_TRUE(d_->ok()) << d_->output();
    port_ = HttpPort(*d_);
    ASSERT_NE(port_, 0) << d_->output();
  }
  HttpResponse Do(const std::string& method, const std::string& target,
                  const std::string& body = "",
                  const std::vector<std::string>& headers = {}) {
    return HttpRequest(port_, method, target, body, headers);
  }

  std::unique_ptr<DaemonProcess> d_;
  int port_ = 0;
};

TEST_F(HttpTest, ATimerSetGotMovedListedAndRemoved) {
  Start({});
  HttpResponse r = Do("PUT", "/v1/namespaces/shop/timers/order-42",
                      R"({"payload": "eyJvIjo0Mn0=", "delay": "900s"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.head.find("Content-Type: application/json"), std::string::npos);
  const auto set = Parse<v1::SetTimerResponse>(r);
  EXPECT_GT(set.version(), 0u);
  EXPECT_NE(r.body.find(R"("replaced":false)"), std::string::npos);

  r = Do("GET", "/v1/namespaces/shop/timers/order-42");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto timer = Parse<v1::Timer>(r);
  EXPECT_EQ(timer.payload(), R"({"o":42})");
  EXPECT_EQ(timer.version(), set.version());

  r = Do("POST", "/v1/namespaces/shop/timers/order-42:move",
         R"({"delay": "60s"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_LT(Parse<v1::MoveTimerResponse>(r).fire_time().seconds(),
            set.fire_time().seconds());

  Do("PUT", "/v1/namespaces/shop/timers/other", R"({"delay": "900s"})");
  r = Do("GET", "/v1/namespaces/shop/timers?pageSize=1&keyPrefix=order");
  ASSERT_EQ(r.status, 200) << r.body;
  const auto list = Parse<v1::ListTimersResponse>(r);
  ASSERT_EQ(list.timers_size(), 1);
  EXPECT_EQ(list.timers(0).key(), "order-42");

  r = Do("DELETE", "/v1/namespaces/shop/timers/order-42?expectedVersion=7");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(ErrorStatus(r), "ABORTED");
  r = Do("DELETE", "/v1/namespaces/shop/timers/order-42");
  EXPECT_EQ(r.status, 200) << r.body;
  r = Do("GET", "/v1/namespaces/shop/timers/order-42");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(ErrorStatus(r), "NOT_FOUND");
}

// The door reads the plain form of SetTimer and Batch bodies itself
// (server/http/fast_json.h) and leaves every other form to protobuf: both
// roads give the same answers.
TEST_F(HttpTest, PlainAndOtherJsonFormsOfABatchAnswerAlike) {
  Start({});
  const std::string plain =
      R"({"operations": [{"set": {"namespace": "b", "key": "k1",
          "payload": "MDEy", "delay": "60s"}},
          {"remove": {"namespace": "b", "key": "gone"}}]})";
  const std::string other =  // an escaped key, a "60.s" duration
      R"({"operations": [{"set": {"namespace": "b", "key": "k\u0032",
          "payload": "MDEy", "delay": "60.s"}},
          {"remove": {"namespace": "b", "key": "gone"}}]})";
  HttpResponse a = Do("POST", "/v1/timers:batch", plain);
  HttpResponse b = Do("POST", "/v1/timers:batch", other);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  const auto ra = Parse<v1::BatchResponse>(a), rb = Parse<v1::BatchResponse>(b);
  ASSERT_EQ(ra.results_size(), 2);
  ASSERT_EQ(rb.results_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(ra.results(i).code(), rb.results(i).code());
    EXPECT_EQ(ra.results(i).message(), rb.results(i).message());
    EXPECT_EQ(ra.results(i).has_fire_time(), rb.results(i).has_fire_time());
  }
  EXPECT_EQ(ra.results(0).code(), 0);
  EXPECT_EQ(ra.results(1).code(), 5);  // NOT_FOUND
  for (const char* key : {"k1", "k2"}) {
    const HttpResponse got =
        Do("GET", std::string("/v1/namespaces/b/timers/") + key);
    ASSERT_EQ(got.status, 200) << key << ": " << got.body;
    EXPECT_EQ(Parse<v1::Timer>(got).payload(), "012");
  }
  // A plain SetTimer whose body names another namespace than its path is
  // refused as protobuf's road refuses it.
  HttpResponse r = Do("PUT", "/v1/namespaces/b/timers/k3",
                      R"({"namespace": "c", "delay": "60s"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("the body says 'c'"), std::string::npos) << r.body;
  r = Do("PUT", "/v1/namespaces/b/timers/k3", R"({"delay": "60s"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.rfind(R"({"version":")", 0), 0u) << r.body;
}

TEST_F(HttpTest, ErrorsMapToHttpStatusesWithTheGrpcCodeInTheBody) {
  Start({});
  ASSERT_EQ(
      Do("PUT", "/v1/namespaces/s/timers/k", R"({"delay": "60s"})").status,
      200);
  HttpResponse r = Do("PUT", "/v1/namespaces/s/timers/k",
                      R"({"delay": "60s", "ifAbsent": true})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(ErrorStatus(r), "ALREADY_EXISTS");
  r = Do("PUT", "/v1/namespaces/s/timers/k", R"({"delay": )");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorStatus(r), "INVALID_ARGUMENT");
  r = Do("PUT", "/v1/namespaces/s/timers/k", R"({"delay": "15m"})");
  EXPECT_EQ(r.status, 400);  // proto3 JSON durations are in seconds: "900s"
  // Malformed JSON after a well-formed value: refused, and nothing is set.
  r = Do("PUT", "/v1/namespaces/s/timers/m", R"({"delay": "5s": 1}})");
  EXPECT_EQ(r.status, 400);
  r = Do("POST", "/v1/timers:batch",
         R"({"operations": [{"set": {"namespace": "s", "key": "m",
             "delay": "5s": 1}}}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Do("GET", "/v1/namespaces/s/timers/m").status, 404);
  r = Do("PUT", "/v1/namespaces/bad%20name/timers/k", R"({"delay": "1s"})");
  EXPECT_EQ(r.status, 400);  // the service's own check
  EXPECT_NE(r.body.find("namespace"), std::string::npos) << r.body;
  r = Do("POST", "/v1:backup");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(ErrorStatus(r), "FAILED_PRECONDITION");
  r = Do("GET", "/v1/openapi.json");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find(R"("openapi":"3.0.3")"), std::string::npos);
  r = Do("GET", "/v1/nothing/here");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("no such route"), std::string::npos);
  r = Do("PATCH", "/v1/namespaces/s/timers/k", "{}");
  EXPECT_EQ(r.status, 405);
  r = Do("GET", "/v1/namespaces/s/timers?colour=red");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("colour"), std::string::npos);
}

// Every route reaches its method: the answer is the method's (a result or
// its own error), never the router's.
TEST_F(HttpTest, EveryRouteReachesItsMethod) {
  Start({});
  for (const http::Route& route : http::Routes()) {
    std::string path = route.path;
    for (const auto& [var, value] :
         {std::pair<std::string, std::string>{"{namespace}", "n"},
          {"{key}", "k"}}) {
      if (const auto at = path.find(var); at != std::string::npos) {
        path.replace(at, var.size(), value);
      }
    }
    const std::string body = route.kind == http::Route::kPull
                                 ? R"({"wait": "0.1s"})"
                                 : (route.body ? "{}" : "");
    const HttpResponse r = Do(route.method, path, body);
    SCOPED_TRACE(std::string(route.method) + " " + path + ": " + r.body);
    ASSERT_NE(r.status, 0);
    EXPECT_NE(r.status, 405);
    EXPECT_EQ(r.body.find("no such route"), std::string::npos);
    EXPECT_EQ(r.body.find("this route takes"), std::string::npos);
  }
}

TEST_F(HttpTest, TokensAndPermissionsAreTheGrpcPorts) {
  testing::TempDir dir;
  std::ofstream(dir / "tokens") << "reader shop read\n"
                                   "writer shop write,read\n";
  Start({"--auth-tokens", dir / "tokens"});
  const std::string body = R"({"delay": "60s"})";
  HttpResponse r = Do("PUT", "/v1/namespaces/shop/timers/k", body);
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_EQ(ErrorStatus(r), "UNAUTHENTICATED");
  r = Do("PUT", "/v1/namespaces/shop/timers/k", body,
         {"Authorization: Bearer nobody"});
  EXPECT_EQ(r.status, 401) << r.body;
  r = Do("PUT", "/v1/namespaces/shop/timers/k", body,
         {"Authorization: Bearer reader"});
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(ErrorStatus(r), "PERMISSION_DENIED");
  r = Do("PUT", "/v1/namespaces/other/timers/k", body,
         {"Authorization: Bearer writer"});
  EXPECT_EQ(r.status, 403) << r.body;
  r = Do("PUT", "/v1/namespaces/shop/timers/k", body,
         {"Authorization: Bearer writer"});
  EXPECT_EQ(r.status, 200) << r.body;
  r = Do("GET", "/v1/namespaces/shop/timers/k", "",
         {"Authorization: Bearer reader"});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(HttpTest, AnOversizedBodyIsRefusedUnread) {
  // A body may be 2 x --max-batch-bytes + 64 KiB: here 192 KiB.
  Start({"--max-batch-bytes", "65536"});
  const std::string huge(300 << 10, 'x');
  HttpResponse r = Do("POST", "/v1/timers:batch", huge);
  EXPECT_EQ(r.status, 413) << r.body;
  // Within the door's bound, the service's own bounds still hold.
  std::string payload(100 << 10, 'A');  // base64 of 75 KiB
  r = Do("PUT", "/v1/namespaces/s/timers/k",
         R"({"delay": "1s", "payload": ")" + payload + R"("})");
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(ErrorStatus(r), "RESOURCE_EXHAUSTED");
  EXPECT_NE(r.body.find("larger than max"), std::string::npos) << r.body;
  r = Do("GET", "/v1/stats");
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(HttpTest, AClientThatSendsSlowlyLosesItsConnection) {
  Start({"--http-request-timeout", "500ms", "--http-threads", "2"});
  // Two connections dribble their headers, a byte at a time, each holding
  // one of the two threads until the timeout closes it.
  auto slow = [&](bool* closed, std::chrono::milliseconds* took) {
    const int fd = testing::HttpConnect(port_);
    ASSERT_GE(fd, 0);
    const std::string req = "GET /v1/stats HTTP/1.1\r\nHost: a\r\nX-Slow: ";
    const auto t0 = std::chrono::steady_clock::now();
    testing::SendAll(fd, req);
    for (int i = 0; i < 100 && !*closed; ++i) {
      // One byte per 100 ms until the server ends the request: the send
      // fails, or what it sends (an error, if any) ends in a close.
      if (!testing::SendAll(fd, "x")) {
        *closed = true;
        break;
      }
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buf[512];
        while (recv(fd, buf, sizeof buf, 0) > 0) {
        }
        *closed = true;
      }
    }
    *took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - t0);
    close(fd);
  };
  bool closed[2] = {false, false};
  std::chrono::milliseconds took[2]{};
  std::thread a(slow, &closed[0], &took[0]);
  std::thread b(slow, &closed[1], &took[1]);
  a.join();
  b.join();
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(closed[i]);
    EXPECT_LT(took[i], 5s);  // not the 10 s the client would have taken
  }
  // The threads are free again.
  EXPECT_EQ(Do("GET", "/v1/stats").status, 200);
}

TEST_F(HttpTest, AnEventSetOverHttpIsDeliveredOverGrpcAndAckedOverHttp) {
  Start({});
  auto channel =
      grpc::CreateChannel(d_->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Delayd::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 20s);
  v1::SubscribeRequest sub;
  sub.set_namespace_("jobs");
  auto reader = stub->Subscribe(&ctx, sub);
  v1::SubscribeResponse msg;
  ASSERT_TRUE(reader->Read(&msg));  // registered
  ASSERT_EQ(Do("PUT", "/v1/namespaces/jobs/timers/now",
               R"({"payload": "aGk=", "delay": "0s"})")
                .status,
            200);
  ASSERT_TRUE(reader->Read(&msg));
  ASSERT_EQ(msg.events_size(), 1);
  EXPECT_EQ(msg.events(0).payload(), "hi");
  const std::string id = std::to_string(msg.events(0).id());
  HttpResponse r = Do("POST", "/v1/namespaces/jobs/events:ack",
                      R"({"eventIds": [")" + id + R"("]})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Parse<v1::AckResponse>(r).acked(), 1u);
  ctx.TryCancel();
}

TEST_F(HttpTest, TheConsoleIsServedFromTheBinaryAndMayRunOnlyItsOwnScript) {
  Start({});
  HttpResponse r = Do("GET", "/");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.head.find("Content-Type: text/html"), std::string::npos);
  EXPECT_NE(r.body.find("/console/console.js"), std::string::npos);
  // No inline script, no other origin, no framing.
  EXPECT_NE(r.head.find("Content-Security-Policy: default-src 'none'; "
                        "script-src 'self'"),
            std::string::npos)
      << r.head;
  EXPECT_NE(r.head.find("frame-ancestors 'none'"), std::string::npos);
  EXPECT_NE(r.head.find("X-Content-Type-Options: nosniff"), std::string::npos);
  // HEAD: the length, not the body.
  const std::size_t length = r.body.size();
  r = Do("HEAD", "/");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.head.find("Content-Length: " + std::to_string(length)),
            std::string::npos)
      << r.head;
  EXPECT_TRUE(r.body.empty());
  r = Do("GET", "/console/console.js");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.head.find("Content-Type: text/javascript"), std::string::npos);
  EXPECT_NE(r.body.find("function route()"), std::string::npos);
  EXPECT_EQ(Do("GET", "/console/console.css").status, 200);
  r = Do("GET", "/console/missing.js");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(ErrorStatus(r), "NOT_FOUND");
  // The console's files answer GET alone.
  EXPECT_EQ(Do("POST", "/", "{}").status, 404);
}

TEST_F(HttpTest, CrossOriginCallsAreRefusedUnlessTheOriginIsListed) {
  Start({});
  const std::vector<std::string> preflight = {
      "Origin: https://ops.example", "Access-Control-Request-Method: PUT"};
  // Off by default: no CORS header, and a preflight is refused.
  HttpResponse r = Do("OPTIONS", "/v1/namespaces/n/timers/k", "", preflight);
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.head.find("Access-Control-Allow-Origin"), std::string::npos);
  r = Do("GET", "/v1/stats", "", {"Origin: https://ops.example"});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.head.find("Access-Control-Allow-Origin"), std::string::npos);

  Start({"--http-cors-origin", "https://ops.example,http://localhost:3000"});
  r = Do("OPTIONS", "/v1/namespaces/n/timers/k", "", preflight);
  EXPECT_EQ(r.status, 204);
  EXPECT_NE(r.head.find("Access-Control-Allow-Origin: https://ops.example"),
            std::string::npos)
      << r.head;
  EXPECT_NE(r.head.find("Access-Control-Allow-Headers: Authorization"),
            std::string::npos);
  r = Do("GET", "/v1/stats", "", {"Origin: https://ops.example"});
  EXPECT_NE(r.head.find("Access-Control-Allow-Origin: https://ops.example"),
            std::string::npos);
  EXPECT_NE(r.head.find("Vary: Origin"), std::string::npos);
  // Another origin gets nothing, on the same kept-alive connection too.
  r = Do("GET", "/v1/stats", "", {"Origin: https://evil.example"});
  EXPECT_EQ(r.head.find("Access-Control-Allow-Origin"), std::string::npos);
  r = Do(
      "OPTIONS", "/v1/stats", "",
      {"Origin: https://evil.example", "Access-Control-Request-Method: GET"});
  EXPECT_EQ(r.status, 403);
  // A call that changes something, sent by a page of an origin not listed
  // without a preflight (a form's POST), is refused and changes nothing;
  // the door's own pages (the console) are let through.
  r = Do("POST", "/v1/namespaces/n:drain", "{}",
         {"Origin: https://evil.example", "Content-Type: text/plain"});
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(r.body.find("other origins"), std::string::npos) << r.body;
  // (The test client's Host header is "127.0.0.1".)
  r = Do("PUT", "/v1/namespaces/n/timers/k", R"({"delay": "60s"})",
         {"Origin: http://127.0.0.1"});
  EXPECT_EQ(r.status, 200) << r.body;
  r = Do("POST", "/v1/namespaces/n:drain", "{}",
         {"Origin: https://ops.example"});
  EXPECT_EQ(r.status, 200) << r.body;
  // A bad origin is refused at start.
  DaemonProcess bad(DELAYD_BINARY,
                    {"--in-memory", "--http-listen", "127.0.0.1:0",
                     "--http-cors-origin", "https://ops.example/path"},
                    5s);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.Stop(0, 5s), 1);
  EXPECT_NE(bad.output().find("scheme://host"), std::string::npos)
      << bad.output();
}

TEST_F(HttpTest, APullLeasesEventsUntilAckedNackedOrPastTheirDeadline) {
  Start({});
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_EQ(Do("PUT", std::string("/v1/namespaces/jobs/timers/") + key,
                 R"({"delay": "0s"})")
                  .status,
              200);
  }
  // Up to maxEvents a pull: as many pulls as the events come in messages
  // (each pull answers with the first message that has events, and what
  // was written to its stream with it), each event once.
  std::vector<v1::Event> got;
  for (int pulls = 0; pulls < 3 && got.size() < 3; ++pulls) {
    auto pulled =
        Parse<v1::PullResponse>(Do("POST", "/v1/namespaces/jobs/events:pull",
                                   R"({"maxEvents": 2, "wait": "5s"})"));
    ASSERT_GE(pulled.events_size(), 1);
    ASSERT_LE(pulled.events_size(), 2);
    got.insert(got.end(), pulled.events().begin(), pulled.events().end());
  }
  ASSERT_EQ(got.size(), 3u);
  std::set<std::uint64_t> distinct;
  for (const auto& e : got) distinct.insert(e.id());
  ASSERT_EQ(distinct.size(), 3u);
  std::string ids;
  for (std::size_t i = 0; i + 1 < got.size(); ++i) {
    ids += std::string(ids.empty() ? "" : ",") + "\"" +
           std::to_string(got[i].id()) + "\"";
  }
  HttpResponse r = Do("POST", "/v1/namespaces/jobs/events:ack",
                      R"({"eventIds": [)" + ids + "]}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Parse<v1::AckResponse>(r).acked(), 2u);
  // Nacked: back at once with its next attempt.
  const std::string third = std::to_string(got.back().id());
  r = Do("POST", "/v1/namespaces/jobs/events:nack",
         R"({"eventIds": [")" + third + R"("], "retryAfter": "0s"})");
  ASSERT_EQ(r.status, 200) << r.body;
  auto again =
      Parse<v1::PullResponse>(Do("POST", "/v1/namespaces/jobs/events:pull",
                                 R"({"wait": "10s", "ackTimeout": "0.2s"})"));
  ASSERT_EQ(again.events_size(), 1);
  EXPECT_EQ(again.events(0).attempt(), 2u);
  // Not acknowledged within its ack timeout: back after the backoff.
  auto late = Parse<v1::PullResponse>(
      Do("POST", "/v1/namespaces/jobs/events:pull", R"({"wait": "20s"})"));
  ASSERT_EQ(late.events_size(), 1);
  EXPECT_EQ(late.events(0).id(), again.events(0).id());
  EXPECT_EQ(late.events(0).attempt(), 3u);
}

TEST_F(HttpTest, PullsGetEveryEventWithNoneLeftLeasedToAClosedPull) {
  // Events handed to a pull's stream as it answers are either in its answer
  // or back with the others, not leased until their ack timeout (30 s). To
  // have events handed over while a pull answers, they fall due one by one
  // over 1.5 s, and a puller takes them as they come.
  Start({});
  constexpr int kEvents = 3000;
  for (int b = 0; b < kEvents / 500; ++b) {
    std::string ops;
    for (int k = 0; k < 500; ++k) {
      const int i = b * 500 + k;
      ops += std::string(ops.empty() ? "" : ",") +
             R"({"set": {"namespace": "due", "key": "k)" + std::to_string(i) +
             R"(", "delay": ")" + std::to_string(1 + i / 2000.0) + R"(s"}})";
    }
    ASSERT_EQ(Do("POST", "/v1/timers:batch", R"({"operations": [)" + ops + "]}")
                  .status,
              200);
  }
  std::set<std::uint64_t> got;
  const auto deadline = std::chrono::steady_clock::now() + 15s;
  while (got.size() < kEvents && std::chrono::steady_clock::now() < deadline) {
    auto pulled =
        Parse<v1::PullResponse>(Do("POST", "/v1/namespaces/due/events:pull",
                                   R"({"maxEvents": 1000, "wait": "1s"})"));
    ASSERT_LE(pulled.events_size(), 1000);
    std::string ids;
    for (const auto& e : pulled.events()) {
      EXPECT_TRUE(got.insert(e.id()).second) << "delivered twice: " << e.id();
      EXPECT_EQ(e.attempt(), 1u);  // an event taken back counts no attempt
      ids += std::string(ids.empty() ? "" : ",") + "\"" +
             std::to_string(e.id()) + "\"";
    }
    if (!ids.empty()) {
      ASSERT_EQ(Do("POST", "/v1/namespaces/due/events:ack",
                   R"({"eventIds": [)" + ids + "]}")
                    .status,
                200);
    }
  }
  EXPECT_EQ(got.size(), static_cast<std::size_t>(kEvents));
}

TEST_F(HttpTest, APullWaitsForTheFirstEventOrAnswersEmpty) {
  Start({});
  HttpResponse r =
      Do("POST", "/v1/namespaces/idle/events:pull", R"({"wait": "0.2s"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Parse<v1::PullResponse>(r).events_size(), 0);
  EXPECT_NE(r.body.find(R"("events":[])"), std::string::npos);
  v1::PullResponse got;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread puller([&] {
    got = Parse<v1::PullResponse>(
        Do("POST", "/v1/namespaces/q/events:pull", R"({"wait": "30s"})"));
  });
  // Set once the pull is waiting: the namespace has a worker.
  for (int i = 0; i < 500; ++i) {
    const auto stats = Parse<v1::StatsResponse>(Do("GET", "/v1/stats"));
    bool waiting = false;
    for (const auto& ns : stats.namespaces()) {
      waiting |= ns.namespace_() == "q" && ns.workers() == 1;
    }
    if (waiting) break;
    std::this_thread::sleep_for(10ms);  // (polls a condition, bounded)
  }
  ASSERT_EQ(Do("PUT", "/v1/namespaces/q/timers/k", R"({"delay": "0s"})").status,
            200);
  puller.join();
  ASSERT_EQ(got.events_size(), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  r = Do("POST", "/v1/namespaces/q/events:pull", R"({"maxEvents": 5000})");
  EXPECT_EQ(r.status, 400);
  r = Do("POST", "/v1/namespaces/q/events:pull", R"({"wait": "61s"})");
  EXPECT_EQ(r.status, 400);
}

// Reads from `fd` until `text` has arrived (or 10 s, the socket's timeout).
bool ReadUntil(int fd, const std::string& text, std::string* got) {
  char buf[4096];
  while (got->find(text) == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    got->append(buf, static_cast<std::size_t>(n));
  }
  return true;
}

TEST_F(HttpTest, AWatchRelaysEventsAsServerSentEvents) {
  Start({"--http-max-watches", "1"});
  const int fd = testing::HttpConnect(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(testing::SendAll(
      fd, "GET /v1/namespaces/w/events?watch=1 HTTP/1.1\r\nHost: a\r\n\r\n"));
  std::string got;
  ASSERT_TRUE(ReadUntil(fd, ": watching w", &got)) << got;
  EXPECT_NE(got.find("Content-Type: text/event-stream"), std::string::npos);
  // One watch at a time (--http-max-watches): another is refused.
  HttpResponse r = Do("GET", "/v1/namespaces/w/events?watch=1");
  EXPECT_EQ(r.status, 429) << r.body;
  ASSERT_EQ(Do("PUT", "/v1/namespaces/w/timers/k",
               R"({"delay": "0s", "payload": "aGk="})")
                .status,
            200);
  ASSERT_TRUE(ReadUntil(fd, "\n\n", &got));
  ASSERT_TRUE(ReadUntil(fd, R"("key":"k")", &got)) << got;
  EXPECT_NE(got.find("event: expired\n"), std::string::npos) << got;
  EXPECT_NE(got.find(R"("payload":"aGk=")"), std::string::npos) << got;
  close(fd);
  r = Do("GET", "/v1/namespaces/w/events");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("events:pull"), std::string::npos);
}

// Connections that send nothing, or a request a byte at a time, hold no
// thread: thousands of them open, a request from anyone is answered in its
// normal time.
TEST_F(HttpTest, IdleAndSlowConnectionsKeepNoRequestWaiting) {
  Start({});
  std::vector<int> held;
  struct Close {
    std::vector<int>& fds;
    ~Close() {
      for (int fd : fds) close(fd);
    }
  } closer{held};
  for (int i = 0; i < 1500; ++i) {  // Idle: connected, nothing sent.
    const int fd = testing::HttpConnect(port_);
    ASSERT_GE(fd, 0) << i;
    held.push_back(fd);
  }
  for (int i = 0; i < 500; ++i) {  // Slow: a request's first bytes.
    const int fd = testing::HttpConnect(port_);
    ASSERT_GE(fd, 0) << i;
    ASSERT_TRUE(testing::SendAll(fd, "GET /v1/stats HTTP/1.1\r\nHost: a\r\n"));
    held.push_back(fd);
  }
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const HttpResponse r = Do("GET", "/v1/stats");
    EXPECT_EQ(r.status, 200);
    // (Within 3 s even under a sanitizer; a connection that held a thread
    // would make it wait for the slow requests' 10 s timeout.)
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  }
  // And a watch, a pull and a set, all at once, beside them.
  std::thread pull([&] {
    EXPECT_EQ(Do("POST", "/v1/namespaces/p/events:pull", R"({"wait": "0.3s"})")
                  .status,
              200);
  });
  EXPECT_EQ(
      Do("PUT", "/v1/namespaces/p/timers/k", R"({"delay": "60s"})").status,
      200);
  pull.join();
}

// At the connection limit, a new connection closes the oldest idle one
// first (it sees its connection end); the newest idle ones stay.
TEST_F(HttpTest, AtTheConnectionLimitTheOldestIdleConnectionGoesFirst) {
  Start({"--http-max-connections", "100"});
  std::vector<int> fds;
  struct Close {
    std::vector<int>& fds;
    ~Close() {
      for (int fd : fds) close(fd);
    }
  } closer{fds};
  for (int i = 0; i < 100; ++i) {
    fds.push_back(testing::HttpConnect(port_));
    ASSERT_GE(fds.back(), 0);
    // (One at a time, so that each is older than the next.)
    ASSERT_EQ(testing::HttpRequestOn(fds.back(), "GET", "/v1/stats").status,
              200)
        << i;
  }
  // Twenty more connections, opened back to back (each admitted before
  // the connection closed for the one before it has gone), then each kept
  // open after its request: twenty of the oldest idle connections are
  // closed for them, never one twice.
  for (int i = 0; i < 20; ++i) {
    fds.push_back(testing::HttpConnect(port_));
    ASSERT_GE(fds.back(), 0);
  }
  for (int i = 100; i < 120; ++i) {
    EXPECT_EQ(testing::HttpRequestOn(fds[i], "GET", "/v1/stats").status, 200)
        << i;
  }
  // Closed: the peer's FIN (or a reset) is there to read. The closes run
  // on the door's threads, later than the admissions: one deadline for
  // all twenty, not a short wait for each.
  auto closed = [](int fd, int wait_ms) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, wait_ms) <= 0) return false;
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  };
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::vector<bool> seen(20, false);
  int oldest_closed = 0, newest_open = 0;
  while (oldest_closed < 20 && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 20; ++i) {
      if (!seen[i] && closed(fds[i], 10)) {
        seen[i] = true;
        ++oldest_closed;
      }
    }
  }
  for (int i = 80; i < 120; ++i) {
    newest_open +=
        testing::HttpRequestOn(fds[i], "GET", "/v1/stats").status == 200;
  }
  EXPECT_EQ(oldest_closed, 20);
  EXPECT_EQ(newest_open, 40);
}

// A body over the limit is refused with 413 and the connection closes
// (nothing more of it is read); the 405 of a method a path does not take
// names the ones it takes; an error body is JSON whatever the request held.
TEST_F(HttpTest, RefusalsCloseWhatMustCloseAndSayWhatIsAllowed) {
  Start({"--max-batch-bytes", "65536"});
  const int fd = testing::HttpConnect(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(testing::SendAll(fd,
                               "POST /v1/timers:batch HTTP/1.1\r\nHost: a\r\n"
                               "Content-Length: 10000000\r\n\r\n"));
  const HttpResponse big = testing::ReadResponse(fd);  // Read to the close.
  close(fd);
  EXPECT_EQ(big.status, 413);
  EXPECT_NE(big.head.find("Connection: close"), std::string::npos) << big.head;

  HttpResponse r = Do("PATCH", "/v1/namespaces/s/timers/k", "{}");
  EXPECT_EQ(r.status, 405);
  EXPECT_NE(r.head.find("Allow: PUT, GET, DELETE"), std::string::npos)
      << r.head;
  r = Do("GET", "/v1/namespaces/s:drain");
  EXPECT_EQ(r.status, 405);
  EXPECT_NE(r.head.find("Allow: POST"), std::string::npos) << r.head;

  // Invalid UTF-8 in a key and in a body: 400, and the body is UTF-8 JSON.
  for (const auto& [target, body] :
       std::vector<std::pair<std::string, std::string>>{
           {"/v1/namespaces/s/timers/k%ff%fe", R"({"delay": "1s"})"},
           {"/v1/namespaces/s/timers/k", "{\"delay\": \"1s\xff\xfe\"}"},
           {"/v1/namespaces/s/timers/k", "{\"\xc3\x28\": 1}"}}) {
    r = Do("PUT", target, body);
    EXPECT_EQ(r.status, 400) << target;
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    EXPECT_EQ(parser.parse(r.body).get(doc), simdjson::SUCCESS)
        << "not JSON: " << r.body;
  }
}

// One namespace's figures leave out what is daemon-wide (not zeros).
TEST_F(HttpTest, OneNamespacesStatsLeaveOutTheDaemonsFigures) {
  Start({});
  ASSERT_EQ(
      Do("PUT", "/v1/namespaces/s/timers/k", R"({"delay": "60s"})").status,
      200);
  HttpResponse r = Do("GET", "/v1/namespaces/s/stats");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.find("\"durable\""), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("\"partitions\""), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"pendingTimers\":\"1\""), std::string::npos)
      << r.body;
  r = Do("GET", "/v1/stats");
  EXPECT_NE(r.body.find("\"durable\":false"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace delayd
