// The fixture of the service tests (service_test, delivery_test,
// batch_test): a daemon on loopback and helpers for its calls. Built with
// DELAYD_API_ON_CLUSTER (cluster_api_test), the daemon is a cluster of
// three nodes called through one (cluster_daemon.h).
#ifndef DELAYD_TESTS_SERVER_SERVICE_FIXTURE_H_
#define DELAYD_TESTS_SERVER_SERVICE_FIXTURE_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "tests/server/calls.h"
#include "tests/server/test_client.h"
#ifdef DELAYD_API_ON_CLUSTER
#include "tests/common/cluster_daemon.h"
#endif

namespace delayd::testing {

#ifdef DELAYD_API_ON_CLUSTER
using ApiDaemon = ClusterDaemon;
#else
using ApiDaemon = TestDaemon;
#endif

using grpc::StatusCode;

class DelaydTest : public ::testing::Test {
 protected:
  grpc::Status Set(const std::string& key, std::int64_t delay_ms,
                   const std::string& payload = "p", const std::string& ns = "",
                   bool if_absent = false,
                   v1::SetTimerResponse* out = nullptr) {
    return testing::Set(d_.stub(), ns, key, delay_ms, payload, out, if_absent);
  }
  grpc::Status Move(const std::string& key, std::int64_t delay_ms,
                    std::uint64_t expected_version = 0,
                    v1::MoveTimerResponse* out = nullptr) {
    v1::MoveTimerRequest req;
    req.set_key(key);
    *req.mutable_delay() = Millis(delay_ms);
    req.set_expected_version(expected_version);
    v1::MoveTimerResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = d_.stub().MoveTimer(&ctx, req, &resp);
    if (out) *out = resp;
    return s;
  }
  grpc::Status Remove(const std::string& key, std::uint64_t expected = 0) {
    v1::RemoveTimerRequest req;
    req.set_key(key);
    req.set_expected_version(expected);
    v1::RemoveTimerResponse resp;
    grpc::ClientContext ctx;
    return d_.stub().RemoveTimer(&ctx, req, &resp);
  }
  grpc::Status Get(const std::string& key, v1::Timer* out = nullptr,
                   const std::string& ns = "") {
    return testing::Get(d_.stub(), ns, key, out);
  }
  grpc::Status Ack(const std::vector<std::uint64_t>& ids,
                   v1::AckResponse* out = nullptr, const std::string& ns = "") {
    return testing::Ack(d_.stub(), ns, ids, out);
  }
  v1::StatsResponse Stats() { return testing::Stats(d_.stub()); }
  // Waits (up to 10 s) until the dispatcher holds `n` events, ready or in
  // flight (firing happens on a partition; events reach the namespace's
  // dispatcher after that). Returns whether it did.
  bool WaitDispatched(std::uint64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    for (auto s = Stats(); s.in_flight_events() + s.ready_events() < n;
         s = Stats()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }
  // Waits (up to 10 s) until `w` has received `n` events whose key is one of
  // `keys`, and returns those, in arrival order.
  std::vector<v1::Event> WaitForKeys(TestStream& w,
                                     const std::set<std::string>& keys,
                                     std::size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    std::vector<v1::Event> mine;
    std::size_t seen = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      const auto events = w.WaitFor(seen + 1, left);
      mine.clear();
      for (const auto& e : events) {
        if (keys.count(e.key())) mine.push_back(e);
      }
      if (mine.size() >= n || events.size() == seen) break;
      seen = events.size();
    }
    return mine;
  }
  std::vector<std::uint64_t> Ids(const std::vector<v1::Event>& events) {
    std::vector<std::uint64_t> ids;
    for (const auto& e : events) ids.push_back(e.id());
    return ids;
  }

  ApiDaemon d_;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_SERVER_SERVICE_FIXTURE_H_
