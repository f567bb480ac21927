// What the HTTP/JSON door's end-to-end tests share: a daemon in memory
// with the door on an OS-picked port (HttpTest), requests to it, and
// readers of its answers.
#ifndef DELAYD_TESTS_E2E_HTTP_FIXTURE_H_
#define DELAYD_TESTS_E2E_HTTP_FIXTURE_H_

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/daemon_process.h"
#include "tests/common/http_client.h"

namespace delayd {

// The HTTP port from the daemon's log line ("HTTP/JSON API on ... (port N").
inline int HttpPort(testing::DaemonProcess& d) {
  if (!d.WaitForOutput("HTTP/JSON API on", std::chrono::seconds(10))) {
    return 0;
  }
  const std::string out = d.output();
  const std::size_t line = out.find("HTTP/JSON API on");
  const std::size_t at = out.find("(port ", line);
  return at == std::string::npos ? 0 : std::stoi(out.substr(at + 6));
}

template <typename M>
M Parse(const testing::HttpResponse& r) {
  M m;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(r.body, &m).ok())
      << r.body;
  return m;
}

// The error body's "status" (the gRPC code's name), after checking that its
// "code" is the HTTP status. (Read as text: a google.protobuf.Struct would
// not do under ThreadSanitizer; see server/http/json_text.h.)
inline std::string ErrorStatus(const testing::HttpResponse& r) {
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
    d_ = std::make_unique<testing::DaemonProcess>(DELAYD_BINARY, args);
    ASSERT_TRUE(d_->ok()) << d_->output();
    port_ = HttpPort(*d_);
    ASSERT_NE(port_, 0) << d_->output();
  }
  testing::HttpResponse Do(const std::string& method, const std::string& target,
                           const std::string& body = "",
                           const std::vector<std::string>& headers = {}) {
    return testing::HttpRequest(port_, method, target, body, headers);
  }

  std::unique_ptr<testing::DaemonProcess> d_;
  int port_ = 0;
};

}  // namespace delayd

#endif  // DELAYD_TESTS_E2E_HTTP_FIXTURE_H_
