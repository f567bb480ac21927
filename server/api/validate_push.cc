#include "server/api/validate_push.h"

#include <curl/curl.h>
#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <set>

#include "server/push/signature.h"

namespace delayd {
namespace {

using google::protobuf::util::TimeUtil;

constexpr std::size_t kMaxUrl = 2048;
constexpr std::size_t kMaxHeaders = 16;
constexpr std::size_t kMaxHeaderBytes = 1024;
constexpr std::size_t kMaxPem = 64 << 10;
constexpr std::size_t kMaxSecrets = 4;

Status Bad(const std::string& why) {
  return Status::InvalidArgument("push." + why);
}

std::string Lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

bool Reserved(const std::string& lower) {
  static const std::set<std::string> kNames = {
      "content-type", "content-length", "host",    "transfer-encoding",
      "connection",   "expect",         "upgrade", "te",
      "trailer"};
  return kNames.contains(lower) || lower.starts_with("delayd-") ||
         lower.starts_with("webhook-");
}

// The URL's scheme and host, through libcurl's parser (the one that sends).
Status ParseUrl(const std::string& url, bool allow_http, std::string* host) {
  if (url.size() > kMaxUrl) return Bad("url: at most 2048 bytes");
  CURLU* u = curl_url();
  if (u == nullptr) return Status::Internal("out of memory");
  Status s = Status::Ok();
  char* scheme = nullptr;
  char* h = nullptr;
  char* user = nullptr;
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_HOST, &h, 0) != CURLUE_OK) {
    s = Bad("url: not an absolute URL: " + url);
  } else if (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK) {
    s = Bad("url: no user or password part (use headers)");
  } else if (std::string(scheme) != "https" &&
             !(allow_http && std::string(scheme) == "http")) {
    s = Bad(std::string("url: scheme ") + scheme + " refused: https only" +
            (allow_http ? " or http" : " (http needs --push-allow-http)"));
  } else {
    *host = h;
  }
  curl_free(scheme);
  curl_free(h);
  curl_free(user);
  curl_url_cleanup(u);
  return s;
}

Status Headers(const v1::PushTarget& in, PushTarget* out) {
  if (in.headers_size() > static_cast<int>(kMaxHeaders)) {
    return Bad("headers: at most 16");
  }
  std::set<std::string> seen;
  for (const v1::PushHeader& header : in.headers()) {
    const std::string& name = header.name();
    const std::string& value = header.value();
    if (!seen.insert(Lower(name)).second) {
      return Bad("headers: " + name + " given twice");
    }
    const bool name_ok =
        !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
        });
    if (!name_ok) return Bad("headers: not a header name: " + name);
    if (Reserved(Lower(name))) {
      return Bad("headers: " + name + " is set by delayd");
    }
    const bool value_ok = std::all_of(value.begin(), value.end(), [](char c) {
      return c == ' ' || c == '\t' || (c > 0x20 && c < 0x7f);
    });
    if (!value_ok) {
      return Bad("headers: the value of " + name +
                 " must be visible ASCII, spaces and tabs");
    }
    if (name.size() + value.size() > kMaxHeaderBytes) {
      return Bad("headers: " + name + " is over 1 KiB");
    }
    out->headers.emplace_back(name, value);
  }
  std::sort(out->headers.begin(), out->headers.end());
  return Status::Ok();
}

Status Pems(const v1::PushTarget& in, PushTarget* out) {
  for (const auto* pem :
       {&in.ca_pem(), &in.client_cert_pem(), &in.client_key_pem()}) {
    if (pem->size() > kMaxPem) return Bad("*_pem: at most 64 KiB each");
    if (!pem->empty() && pem->find("-----BEGIN ") == std::string::npos) {
      return Bad("*_pem: not PEM (no -----BEGIN line)");
    }
  }
  if (in.client_cert_pem().empty() != in.client_key_pem().empty()) {
    return Bad("client_cert_pem and client_key_pem: both or neither");
  }
  out->ca_pem = in.ca_pem();
  out->client_cert_pem = in.client_cert_pem();
  out->client_key_pem = in.client_key_pem();
  return Status::Ok();
}

// Adds `secret` unless it is there already: a secret given twice (by value
// or by id) is one, since signing twice with it adds nothing, and the
// target then reads back with each secret once.
void AddSecretOnce(std::vector<std::string>& secrets,
                   const std::string& secret) {
  if (std::find(secrets.begin(), secrets.end(), secret) == secrets.end()) {
    secrets.push_back(secret);
  }
}

}  // namespace

Status PushTargetFields(const v1::PushTarget& in,
                        const push::PushOptions* options,
                        const PushTarget& current, PushTarget* out) {
  *out = PushTarget();
  if (in.url().empty()) {
    v1::PushTarget unset;
    unset.mutable_secret_ids()->CopyFrom(in.secret_ids());
    unset.set_has_client_key(in.has_client_key());
    if (in.SerializeAsString() != unset.SerializeAsString()) {
      return Bad("url: required with any other field of the target");
    }
    return Status::Ok();
  }
  if (options == nullptr) {
    return Status::FailedPrecondition("push delivery is not running here");
  }
  std::string host;
  if (Status s = ParseUrl(in.url(), options->allow_http, &host); !s.ok()) {
    return s;
  }
  if (std::array<std::uint8_t, 16> a{}; push::ParseAddress(host, &a)) {
    if (auto why = options->rules.Refuses(a, host)) return Bad("url: " + *why);
  }
  out->url = in.url();
  if (!in.method().empty() && in.method() != "POST" && in.method() != "PUT") {
    return Bad("method: POST or PUT");
  }
  if (!in.method().empty()) out->method = in.method();
  if (Status s = Headers(in, out); !s.ok()) return s;
  if (in.content_type().size() > 256 ||
      !std::all_of(in.content_type().begin(), in.content_type().end(),
                   [](char c) { return c >= 0x20 && c < 0x7f; })) {
    return Bad("content_type: visible ASCII, at most 256 bytes");
  }
  if (!in.content_type().empty()) out->content_type = in.content_type();
  if (in.has_timeout()) {
    const auto& d = in.timeout();
    if (d.seconds() < 0 || d.nanos() < 0 || d.seconds() > 300 ||
        TimeUtil::DurationToNanoseconds(d) < 100'000'000 ||
        TimeUtil::DurationToNanoseconds(d) > 300'000'000'000) {
      return Bad("timeout: must be between 100ms and 5m");
    }
    out->timeout = std::chrono::nanoseconds(TimeUtil::DurationToNanoseconds(d));
  }
  for (const std::string& secret : in.secrets()) {
    if (!push::SecretKey(secret)) {
      return Bad(
          "secrets: each must be whsec_ and the base64 of 24 to 64 bytes");
    }
    AddSecretOnce(out->secrets, secret);
  }
  for (const std::string& id : in.secret_ids()) {
    auto kept = std::find_if(
        current.secrets.begin(), current.secrets.end(),
        [&id](const std::string& s) { return push::SecretId(s) == id; });
    if (kept == current.secrets.end()) {
      return Bad("secret_ids: " + id + " names no secret of the target");
    }
    AddSecretOnce(out->secrets, *kept);
  }
  if (out->secrets.size() > kMaxSecrets) return Bad("secrets: at most 4");
  out->retry_client_errors = in.retry_client_errors();
  out->follow_redirects = in.follow_redirects();
  v1::PushTarget pems = in;
  if (in.client_key_pem().empty() && in.has_client_key()) {
    if (current.client_key_pem.empty()) {
      return Bad("has_client_key: the target has no client key to keep");
    }
    pems.set_client_key_pem(current.client_key_pem);
  }
  if (Status s = Pems(pems, out); !s.ok()) return s;
  if (in.max_in_flight() > 1000) return Bad("max_in_flight: at most 1000");
  if (in.max_in_flight() != 0) out->max_in_flight = in.max_in_flight();
  if (in.pause_after_failures() > 1'000'000) {
    return Bad("pause_after_failures: at most 1000000");
  }
  out->pause_after_failures = in.pause_after_failures();
  return Status::Ok();
}

std::string PushHost(const std::string& url) {
  std::string host;
  if (!ParseUrl(url, true, &host).ok()) return "";
  std::array<std::uint8_t, 16> a{};
  return push::ParseAddress(host, &a) ? "" : host;
}

void PushTargetToProto(const PushTarget& t, v1::PushTarget* out) {
  if (t.empty()) return;
  out->set_url(t.url);
  out->set_method(t.method);
  for (const auto& [name, value] : t.headers) {
    v1::PushHeader* h = out->add_headers();
    h->set_name(name);
    h->set_value(value);
  }
  out->set_content_type(t.content_type);
  *out->mutable_timeout() = TimeUtil::NanosecondsToDuration(t.timeout.count());
  for (const std::string& secret : t.secrets) {
    out->add_secret_ids(push::SecretId(secret));
  }
  out->set_retry_client_errors(t.retry_client_errors);
  out->set_follow_redirects(t.follow_redirects);
  out->set_ca_pem(t.ca_pem);
  out->set_client_cert_pem(t.client_cert_pem);
  out->set_has_client_key(!t.client_key_pem.empty());
  out->set_max_in_flight(t.max_in_flight);
  out->set_pause_after_failures(t.pause_after_failures);
}

}  // namespace delayd
