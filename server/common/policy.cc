#include "server/common/policy.h"

#include "server/common/record_codec.h"

namespace delayd {
namespace {

// 1: the fixed fields; 2: the same, then the push target; 3: the fixed
// fields, the dedup window, a byte (1: a push target follows), the target.
constexpr std::uint8_t kFixed = 1;
constexpr std::uint8_t kWithPush = 2;
constexpr std::uint8_t kWithDedup = 3;

using record::AppendRaw;
using record::ReadRaw;

constexpr std::size_t kSize = 1 + 4 + 8 + 8 + 8 + 8 + 8 + 8 + 4 + 4 + 1;

void AppendString(std::string& out, const std::string& s) {
  AppendRaw<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

// Reads a string of AppendString from [*p, end); false if it overruns.
bool ReadString(const char*& p, const char* end, std::string* out) {
  if (end - p < 4) return false;
  const auto n = ReadRaw<std::uint32_t>(p);
  if (static_cast<std::size_t>(end - p) < n) return false;
  out->assign(p, n);
  p += n;
  return true;
}

void AppendPush(std::string& out, const PushTarget& t) {
  AppendString(out, t.url);
  AppendString(out, t.method);
  AppendRaw<std::uint32_t>(out, static_cast<std::uint32_t>(t.headers.size()));
  for (const auto& [name, value] : t.headers) {
    AppendString(out, name);
    AppendString(out, value);
  }
  AppendString(out, t.content_type);
  AppendRaw<std::int64_t>(out, t.timeout.count());
  AppendRaw<std::uint32_t>(out, static_cast<std::uint32_t>(t.secrets.size()));
  for (const auto& secret : t.secrets) AppendString(out, secret);
  AppendRaw<std::uint8_t>(
      out, (t.retry_client_errors ? 1 : 0) | (t.follow_redirects ? 2 : 0));
  AppendString(out, t.ca_pem);
  AppendString(out, t.client_cert_pem);
  AppendString(out, t.client_key_pem);
  AppendRaw(out, t.max_in_flight);
  AppendRaw(out, t.pause_after_failures);
}

bool ReadPush(const char* p, const char* end, PushTarget* t) {
  std::uint32_t n = 0;
  if (!ReadString(p, end, &t->url) || !ReadString(p, end, &t->method) ||
      end - p < 4) {
    return false;
  }
  n = ReadRaw<std::uint32_t>(p);
  if (n > 1024) return false;
  t->headers.resize(n);
  for (auto& [name, value] : t->headers) {
    if (!ReadString(p, end, &name) || !ReadString(p, end, &value)) {
      return false;
    }
  }
  if (!ReadString(p, end, &t->content_type) || end - p < 8 + 4) return false;
  t->timeout = std::chrono::nanoseconds(ReadRaw<std::int64_t>(p));
  n = ReadRaw<std::uint32_t>(p);
  if (n > 1024) return false;
  t->secrets.resize(n);
  for (auto& secret : t->secrets) {
    if (!ReadString(p, end, &secret)) return false;
  }
  if (end - p < 1) return false;
  const auto flags = ReadRaw<std::uint8_t>(p);
  if (flags > 3) return false;
  t->retry_client_errors = (flags & 1) != 0;
  t->follow_redirects = (flags & 2) != 0;
  if (!ReadString(p, end, &t->ca_pem) ||
      !ReadString(p, end, &t->client_cert_pem) ||
      !ReadString(p, end, &t->client_key_pem) || end - p != 8) {
    return false;
  }
  t->max_in_flight = ReadRaw<std::uint32_t>(p);
  t->pause_after_failures = ReadRaw<std::uint32_t>(p);
  return !t->url.empty();
}

}  // namespace

std::string EncodePolicy(const Policy& p) {
  std::string out;
  out.reserve(kSize);
  const std::uint8_t version = p.dedup_window.count() != 0 ? kWithDedup
                               : p.push.empty()            ? kFixed
                                                           : kWithPush;
  AppendRaw(out, version);
  AppendRaw(out, p.max_attempts);
  AppendRaw<std::int64_t>(out, p.retry.initial_backoff.count());
  AppendRaw(out, p.retry.multiplier);
  AppendRaw<std::int64_t>(out, p.retry.max_backoff.count());
  AppendRaw(out, p.retry.jitter);
  AppendRaw<std::int64_t>(out, p.ack_timeout.count());
  AppendRaw(out, p.max_dispatch_rate);
  AppendRaw(out, p.dispatch_burst);
  AppendRaw(out, p.max_in_flight);
  AppendRaw<std::uint8_t>(out, p.paused ? 1 : 0);
  if (version == kWithDedup) {
    AppendRaw<std::int64_t>(out, p.dedup_window.count());
    AppendRaw<std::uint8_t>(out, p.push.empty() ? 0 : 1);
  }
  if (!p.push.empty()) AppendPush(out, p.push);
  return out;
}

std::optional<Policy> DecodePolicy(std::string_view bytes) {
  if (bytes.size() < kSize) return std::nullopt;
  const std::uint8_t version = static_cast<std::uint8_t>(bytes[0]);
  if (!(version == kFixed && bytes.size() == kSize) && version != kWithPush &&
      version != kWithDedup) {
    return std::nullopt;
  }
  const char* p = bytes.data() + 1;
  Policy out;
  out.max_attempts = ReadRaw<std::uint32_t>(p);
  out.retry.initial_backoff =
      std::chrono::nanoseconds(ReadRaw<std::int64_t>(p));
  out.retry.multiplier = ReadRaw<double>(p);
  out.retry.max_backoff = std::chrono::nanoseconds(ReadRaw<std::int64_t>(p));
  out.retry.jitter = ReadRaw<double>(p);
  out.ack_timeout = std::chrono::nanoseconds(ReadRaw<std::int64_t>(p));
  out.max_dispatch_rate = ReadRaw<double>(p);
  out.dispatch_burst = ReadRaw<std::uint32_t>(p);
  out.max_in_flight = ReadRaw<std::uint32_t>(p);
  const auto paused = ReadRaw<std::uint8_t>(p);
  if (paused > 1) return std::nullopt;
  out.paused = paused == 1;
  const char* const end = bytes.data() + bytes.size();
  bool push = version == kWithPush;
  if (version == kWithDedup) {
    if (end - p < 9) return std::nullopt;
    out.dedup_window = std::chrono::nanoseconds(ReadRaw<std::int64_t>(p));
    const auto has_push = ReadRaw<std::uint8_t>(p);
    if (out.dedup_window.count() <= 0 || has_push > 1) return std::nullopt;
    push = has_push == 1;
    if (!push && p != end) return std::nullopt;
  }
  if (push && !ReadPush(p, end, &out.push)) return std::nullopt;
  return out;
}

}  // namespace delayd
