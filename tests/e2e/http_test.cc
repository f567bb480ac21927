// The HTTP/JSON door end to end: the real daemon, a plain HTTP client, and
// a gRPC client beside it for what HTTP does not do (the event stream).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <simdjson.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/http/routes.h"
#include "tests/common/daemon_process.h"
#include "tests/common/http_client.h"
#include "tests/common/temp_dir.h"
#include "tests/e2e/http_fixture.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::HttpRequest;
using testing::HttpResponse;

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
