#include "server/common/policy.h"

#include "server/common/record_codec.h"

namespace delayd {
namespace {

constexpr std::uint8_t kVersion = 1;

using record::AppendRaw;
using record::ReadRaw;

constexpr std::size_t kSize = 1 + 4 + 8 + 8 + 8 + 8 + 8 + 8 + 4 + 4 + 1;

}  // namespace

std::string EncodePolicy(const Policy& p) {
  std::string out;
  out.reserve(kSize);
  AppendRaw(out, kVersion);
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
  return out;
}

std::optional<Policy> DecodePolicy(std::string_view bytes) {
  if (bytes.size() != kSize || bytes[0] != kVersion) return std::nullopt;
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
  return out;
}

}  // namespace delayd
