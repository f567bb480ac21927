// One request to a push target (pusher.h): what it sends and what came
// back. Internal to server/push/.
#ifndef DELAYD_SERVER_PUSH_PUSH_JOB_H_
#define DELAYD_SERVER_PUSH_PUSH_JOB_H_

#include <curl/curl.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/common/push_target.h"
#include "server/common/types.h"
#include "server/push/address_rules.h"

namespace delayd::push {

// What requests to one target are sent with: the target, its secrets'
// keys, its URL's host, and the policy's cap on a Retry-After. Immutable
// once built.
struct PushConfig {
  PushTarget target;
  std::vector<std::string> keys;
  std::string host;
  std::chrono::nanoseconds max_backoff{0};
};
std::shared_ptr<const PushConfig> MakeConfig(
    const PushTarget& target, std::chrono::nanoseconds max_backoff);

// How an attempt ended.
struct Verdict {
  enum Kind { kOk, kRetry, kReject } kind = kRetry;
  bool answered = false;  // An HTTP answer came (else: no connection,
                          // reset, timeout, TLS failure, refused address).
  long status = 0;
  std::string error;  // Empty when kOk.
  std::optional<std::chrono::nanoseconds> retry_after;
};

// One attempt of one event: owned by the pusher's inbox, then by its
// curl handle (CURLOPT_PRIVATE) until it finishes.
struct PushJob {
  PushJob(std::string ns, Event e)
      : ns_name(std::move(ns)), event(std::move(e)) {}
  std::string ns_name;
  Event event;             // Its blob holds the payload.
  std::string webhook_id;  // The event's id; a test's own.
  std::shared_ptr<const PushConfig> config;
  const AddressRules* rules = nullptr;
  // A test request's answer (Pusher::Test), instead of the dispatcher's.
  std::function<void(Verdict, std::chrono::nanoseconds)> test_done;

  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string body_kept;
  std::size_t body_read = 0;
  bool cut_off = false;
  std::string refused;  // Why a connection was not made (address rules).
  std::chrono::steady_clock::time_point started;
  char error[CURL_ERROR_SIZE] = {};
};

// Sets up job.easy for its request (job.config, rules set).
void PrepareRequest(PushJob& job, bool allow_http);
// Reads the outcome of job's transfer, ended with `curl_code`.
Verdict Judge(const PushJob& job, int curl_code);
// Ends a job whose handle is out of the multi handle: frees it.
void FreeJob(PushJob* job);

}  // namespace delayd::push

#endif  // DELAYD_SERVER_PUSH_PUSH_JOB_H_
