// The calls tests make of a daemon, one function each, and the bounded poll
// they wait with. Each call has a deadline, so a daemon that stops
// answering fails the test instead of hanging it.
#ifndef DELAYD_TESTS_SERVER_CALLS_H_
#define DELAYD_TESTS_SERVER_CALLS_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "delayd/v1/delayd.grpc.pb.h"
#include "tests/server/test_client.h"

namespace delayd::testing {

// A client context whose call must be answered within `within`.
inline std::unique_ptr<grpc::ClientContext> Within(
    std::chrono::milliseconds within = 30s) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + within);
  return ctx;
}

// SetTimer of `key` in namespace `ns` ("": the default), due in
// `delay_ms`.
inline grpc::Status Set(v1::Delayd::Stub& stub, const std::string& ns,
                        const std::string& key, std::int64_t delay_ms,
                        const std::string& payload = "p",
                        v1::SetTimerResponse* out = nullptr,
                        bool if_absent = false) {
  v1::SetTimerRequest req;
  req.set_namespace_(ns);
  req.set_key(key);
  req.set_payload(payload);
  *req.mutable_delay() = Millis(delay_ms);
  req.set_if_absent(if_absent);
  v1::SetTimerResponse resp;
  const grpc::Status s = stub.SetTimer(Within().get(), req, &resp);
  if (out != nullptr) *out = resp;
  return s;
}

inline grpc::Status Get(v1::Delayd::Stub& stub, const std::string& ns,
                        const std::string& key, v1::Timer* out = nullptr) {
  v1::GetTimerRequest req;
  req.set_namespace_(ns);
  req.set_key(key);
  v1::Timer t;
  const grpc::Status s = stub.GetTimer(Within().get(), req, &t);
  if (out != nullptr) *out = t;
  return s;
}

inline grpc::Status Ack(v1::Delayd::Stub& stub, const std::string& ns,
                        const std::vector<std::uint64_t>& ids,
                        v1::AckResponse* out = nullptr,
                        std::chrono::milliseconds within = 30s) {
  v1::AckRequest req;
  req.set_namespace_(ns);
  for (auto id : ids) req.add_event_ids(id);
  v1::AckResponse resp;
  const grpc::Status s = stub.Ack(Within(within).get(), req, &resp);
  if (out != nullptr) *out = resp;
  return s;
}

inline grpc::Status AckEvents(v1::Delayd::Stub& stub, const std::string& ns,
                              const std::vector<v1::Event>& events) {
  std::vector<std::uint64_t> ids;
  for (const auto& e : events) ids.push_back(e.id());
  return Ack(stub, ns, ids);
}

// The daemon-wide figures (admin on `*`).
inline v1::StatsResponse Stats(v1::Delayd::Stub& stub) {
  v1::StatsResponse resp;
  EXPECT_TRUE(stub.Stats(Within().get(), v1::StatsRequest(), &resp).ok());
  return resp;
}

// One namespace's figures (zero if it is not in use).
inline v1::NamespaceStats NamespaceStats(v1::Delayd::Stub& stub,
                                         const std::string& ns) {
  v1::StatsRequest req;
  req.set_namespace_(ns);
  v1::StatsResponse resp;
  EXPECT_TRUE(stub.Stats(Within().get(), req, &resp).ok());
  return resp.namespaces_size() == 1 ? resp.namespaces(0)
                                     : v1::NamespaceStats();
}

// Polls `done` until it holds, for up to `within`; false if it never did.
template <typename F>
bool Eventually(F done, std::chrono::milliseconds within = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);  // The pause of a bounded poll.
  }
  return true;
}

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_SERVER_CALLS_H_
