// A namespace's push target (part of its policy): the HTTP endpoint that
// delayd calls with each of its events (server/push/). Empty url: none.
// The proto's PushTarget documents each field and its bounds; the API's
// validator enforces them before a target gets here.
#ifndef DELAYD_SERVER_COMMON_PUSH_TARGET_H_
#define DELAYD_SERVER_COMMON_PUSH_TARGET_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace delayd {

struct PushTarget {
  std::string url;
  std::string method = "POST";
  std::vector<std::pair<std::string, std::string>> headers;  // By name.
  std::string content_type = "application/octet-stream";
  std::chrono::nanoseconds timeout = std::chrono::seconds(10);
  // "whsec_…", each signing every request.
  std::vector<std::string> secrets;
  bool retry_client_errors = false;
  bool follow_redirects = false;
  std::string ca_pem;
  std::string client_cert_pem;
  std::string client_key_pem;
  std::uint32_t max_in_flight = 16;
  std::uint32_t pause_after_failures = 0;  // 0: never.

  bool empty() const { return url.empty(); }
  bool operator==(const PushTarget&) const = default;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_PUSH_TARGET_H_
