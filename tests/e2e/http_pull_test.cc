// The HTTP/JSON door end to end, for what stays open beyond one request:
// pulls that lease events, a watch that relays them as server-sent events,
// and the connections the door keeps (idle, slow, at its limit).
#include <gtest/gtest.h>
#include <poll.h>

#include <cerrno>
#include <chrono>
#include <set>
#include <thread>

#include "delayd/v1/delayd.grpc.pb.h"
#include "tests/common/http_client.h"
#include "tests/e2e/http_fixture.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::HttpRequest;
using testing::HttpResponse;

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

}  // namespace
}  // namespace delayd
