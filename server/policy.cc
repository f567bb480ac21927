#include "server/policy.h"

#include <cstring>

namespace delayd {
namespace {

constexpr std::uint8_t kVersion = 1;

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T Get(const char*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

constexpr std::size_t kSize = 1 + 4 + 8 + 8 + 8 + 8 + 8 + 8 + 4 + 4 + 1;

}  // namespace

std::string EncodePolicy(const Policy& p) {
  std::string out;
  out.reserve(kSize);
  Put(out, kVersion);
  Put(out, p.max_attempts);
  Put<std::int64_t>(out, p.retry.initial_backoff.count());
  Put(out, p.retry.multiplier);
  Put<std::int64_t>(out, p.retry.max_backoff.count());
  Put(out, p.retry.jitter);
  Put<std::int64_t>(out, p.ack_timeout.count());
  Put(out, p.max_dispatch_rate);
  Put(out, p.dispatch_burst);
  Put(out, p.max_in_flight);
  Put<std::uint8_t>(out, p.paused ? 1 : 0);
  return out;
}

std::optional<Policy> DecodePolicy(std::string_view bytes) {
  if (bytes.size() != kSize || bytes[0] != kVersion) return std::nullopt;
  const char* p = bytes.data() + 1;
  Policy out;
  out.max_attempts = Get<std::uint32_t>(p);
  out.retry.initial_backoff = std::chrono::nanoseconds(Get<std::int64_t>(p));
  out.retry.multiplier = Get<double>(p);
  out.retry.max_backoff = std::chrono::nanoseconds(Get<std::int64_t>(p));
  out.retry.jitter = Get<double>(p);
  out.ack_timeout = std::chrono::nanoseconds(Get<std::int64_t>(p));
  out.max_dispatch_rate = Get<double>(p);
  out.dispatch_burst = Get<std::uint32_t>(p);
  out.max_in_flight = Get<std::uint32_t>(p);
  const auto paused = Get<std::uint8_t>(p);
  if (paused > 1) return std::nullopt;
  out.paused = paused == 1;
  return out;
}

}  // namespace delayd
