// A push request as libcurl sends it, and how its answer is read (the
// proto's PushTarget says what is sent and what each answer means).
#include <sys/socket.h>

#include "server/common/rfc3339.h"
#include "server/core/schedule_record.h"
#include "server/push/push_job.h"
#include "server/push/pusher.h"
#include "server/push/signature.h"

namespace delayd::push {
namespace {

const char* ReasonText(Reason r) {
  switch (r) {
    case Reason::kDrained:
      return "drained";
    case Reason::kDeadLettered:
      return "dead_lettered";
    default:
      return "expired";
  }
}

// Kept as text (a dead letter's error is a proto string): bytes outside
// printable ASCII become '?'.
std::string Printable(std::string s) {
  for (char& c : s) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return s;
}

std::size_t OnBody(char* data, std::size_t size, std::size_t n, void* p) {
  auto* job = static_cast<PushJob*>(p);
  const std::size_t len = size * n;
  if (job->body_kept.size() < Pusher::kBodyKept) {
    job->body_kept.append(
        data, std::min(len, Pusher::kBodyKept - job->body_kept.size()));
  }
  job->body_read += len;
  if (job->body_read > Pusher::kBodyRead) {
    job->cut_off = true;
    return 0;  // Cuts the transfer off (CURLE_WRITE_ERROR).
  }
  return len;
}

// Every connection, to the address it is about to be made to.
curl_socket_t OnOpenSocket(void* p, curlsocktype, curl_sockaddr* address) {
  auto* job = static_cast<PushJob*>(p);
  if (auto why = job->rules->Refuses(&address->addr, job->config->host)) {
    job->refused = *why;
    return CURL_SOCKET_BAD;
  }
  return socket(address->family, address->socktype, address->protocol);
}

void SetBlob(CURL* easy, CURLoption option, const std::string& pem) {
  curl_blob blob{const_cast<char*>(pem.data()), pem.size(), CURL_BLOB_COPY};
  curl_easy_setopt(easy, option, &blob);
}

void AddHeaders(PushJob& job) {
  const PushTarget& t = job.config->target;
  const Event& e = job.event;
  std::string_view key = e.blob.key();
  std::uint64_t run = 0;
  if (std::string_view schedule; SplitRunKey(key, &schedule, &run)) {
    key = schedule;
  }
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  char* escaped =
      curl_easy_escape(job.easy, key.data(), static_cast<int>(key.size()));
  auto add = [&job](const std::string& line) {
    job.headers = curl_slist_append(job.headers, line.c_str());
  };
  add("Content-Type: " + t.content_type);
  add("Expect:");
  add("delayd-event-id: " + job.webhook_id);
  add("delayd-namespace: " + job.ns_name);
  add("delayd-key: " + std::string(escaped != nullptr ? escaped : ""));
  curl_free(escaped);
  if (run != 0) add("delayd-schedule-run: " + std::to_string(run));
  add("delayd-version: " + std::to_string(e.version));
  add("delayd-attempt: " + std::to_string(e.attempt));
  add("delayd-fire-time: " + Rfc3339Millis(e.fire_time));
  add(std::string("delayd-reason: ") +
      (job.test_done ? "test" : ReasonText(e.reason)));
  add("webhook-id: " + job.webhook_id);
  add("webhook-timestamp: " + std::to_string(now));
  if (!job.config->keys.empty()) {
    add("webhook-signature: " +
        Sign(job.config->keys, job.webhook_id, now, e.blob.payload()));
  }
  for (const auto& [name, value] : t.headers) add(name + ": " + value);
}

}  // namespace

std::shared_ptr<const PushConfig> MakeConfig(
    const PushTarget& target, std::chrono::nanoseconds max_backoff) {
  auto config = std::make_shared<PushConfig>();
  config->target = target;
  for (const std::string& secret : target.secrets) {
    if (auto key = SecretKey(secret)) config->keys.push_back(*key);
  }
  if (CURLU* url = curl_url()) {
    char* host = nullptr;
    if (curl_url_set(url, CURLUPART_URL, target.url.c_str(), 0) == CURLUE_OK &&
        curl_url_get(url, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
      config->host = host;
      curl_free(host);
    }
    curl_url_cleanup(url);
  }
  config->max_backoff = max_backoff;
  return config;
}

void PrepareRequest(PushJob& job, bool allow_http) {
  const PushTarget& t = job.config->target;
  CURL* easy = curl_easy_init();
  job.easy = easy;
  job.started = std::chrono::steady_clock::now();
  AddHeaders(job);
  const std::string_view body = job.event.blob.payload();
  curl_easy_setopt(easy, CURLOPT_URL, t.url.c_str());
  curl_easy_setopt(easy, CURLOPT_PRIVATE, &job);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, job.error);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, job.headers);
  curl_easy_setopt(easy, CURLOPT_POST, 1L);
  curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE,
                   static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body.data());
  if (t.method == "PUT") curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, "PUT");
  curl_easy_setopt(
      easy, CURLOPT_TIMEOUT_MS,
      static_cast<long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(t.timeout)
              .count()));
  const char* protocols = allow_http ? "http,https" : "https";
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, protocols);
  curl_easy_setopt(easy, CURLOPT_REDIR_PROTOCOLS_STR, protocols);
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, t.follow_redirects ? 1L : 0L);
  curl_easy_setopt(easy, CURLOPT_MAXREDIRS, 5L);
  // No proxy from the environment: the address connected to is the one
  // the rules vetted.
  curl_easy_setopt(easy, CURLOPT_PROXY, "");
  curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, OnOpenSocket);
  curl_easy_setopt(easy, CURLOPT_OPENSOCKETDATA, &job);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &job);
  if (!t.ca_pem.empty()) SetBlob(easy, CURLOPT_CAINFO_BLOB, t.ca_pem);
  if (!t.client_cert_pem.empty()) {
    SetBlob(easy, CURLOPT_SSLCERT_BLOB, t.client_cert_pem);
    curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM");
  }
  if (!t.client_key_pem.empty()) {
    SetBlob(easy, CURLOPT_SSLKEY_BLOB, t.client_key_pem);
    curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM");
  }
}

Verdict Judge(const PushJob& job, int curl_code) {
  const auto code = static_cast<CURLcode>(curl_code);
  Verdict v;
  curl_easy_getinfo(job.easy, CURLINFO_RESPONSE_CODE, &v.status);
  // A body cut off at kBodyRead: the answer is its status.
  v.answered = code == CURLE_OK || (job.cut_off && v.status != 0);
  if (v.answered && v.status >= 200 && v.status < 300) {
    v.kind = Verdict::kOk;
    return v;
  }
  if (v.answered) {
    v.error = "HTTP " + std::to_string(v.status);
    if (!job.body_kept.empty()) v.error += ": " + Printable(job.body_kept);
    const bool transient =
        v.status >= 500 || v.status == 408 || v.status == 429;
    v.kind = transient || job.config->target.retry_client_errors
                 ? Verdict::kRetry
                 : Verdict::kReject;
    curl_off_t retry_after = 0;
    curl_easy_getinfo(job.easy, CURLINFO_RETRY_AFTER, &retry_after);
    if (retry_after > 0) {
      v.retry_after = std::min<std::chrono::nanoseconds>(
          std::chrono::seconds(retry_after), job.config->max_backoff);
    }
    return v;
  }
  v.kind = Verdict::kRetry;
  if (!job.refused.empty()) {
    v.error = job.refused;
  } else {
    v.error = curl_easy_strerror(code);
    if (job.error[0] != '\0') v.error += std::string(": ") + job.error;
  }
  return v;
}

void FreeJob(PushJob* job) {
  curl_easy_cleanup(job->easy);
  curl_slist_free_all(job->headers);
  delete job;
}

}  // namespace delayd::push
