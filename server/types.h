// Plain types shared by the scheduler's parts and the service above it.
#ifndef DELAYD_SERVER_TYPES_H_
#define DELAYD_SERVER_TYPES_H_

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "server/status.h"

namespace delayd {

// Wall-clock nanoseconds since the Unix epoch.
using WallNanos = std::int64_t;

inline WallNanos WallNow() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Every limit of the daemon; each is a flag of `delayd`.
struct Limits {
  std::size_t max_key_bytes = 256;
  std::size_t max_namespace_bytes = 64;
  std::size_t max_payload_bytes = 64 * 1024;
  std::chrono::nanoseconds max_delay = std::chrono::hours(24 * 365 * 10);
  // Pending timers plus fired events not yet acknowledged.
  std::uint64_t max_pending_timers = 10'000'000;
  std::size_t max_batch_ops = 1000;
  std::size_t max_subscribers = 10'000;
  std::size_t max_namespaces = 10'000;
  // Events queued for one watcher before it is ended as too slow.
  std::size_t watcher_backlog = 10'000;
};

// A key and payload in one allocation: [u32 key size][u32 payload size][key]
// [payload]. Keeps a pending timer to one small heap block.
class Blob {
 public:
  Blob() = default;
  Blob(std::string_view key, std::string_view payload)
      : data_(new char[8 + key.size() + payload.size()]) {
    const auto k = static_cast<std::uint32_t>(key.size());
    const auto p = static_cast<std::uint32_t>(payload.size());
    std::memcpy(data_.get(), &k, 4);
    std::memcpy(data_.get() + 4, &p, 4);
    std::memcpy(data_.get() + 8, key.data(), k);
    std::memcpy(data_.get() + 8 + k, payload.data(), p);
  }
  std::string_view key() const { return {data_.get() + 8, Size(0)}; }
  std::string_view payload() const {
    return {data_.get() + 8 + Size(0), Size(4)};
  }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  std::uint32_t Size(int at) const {
    std::uint32_t n;
    std::memcpy(&n, data_.get() + at, 4);
    return n;
  }
  std::unique_ptr<char[]> data_;
};

// Namespaces are interned: the core passes a dense id, the service the name.
using NamespaceId = std::uint32_t;

struct SetOp {
  NamespaceId ns;
  std::string key;
  std::string payload;
  WallNanos fire_time;
  bool if_absent = false;
};
struct MoveOp {
  NamespaceId ns;
  std::string key;
  WallNanos fire_time;
  std::uint64_t expected_version = 0;  // 0 = any.
};
struct RemoveOp {
  NamespaceId ns;
  std::string key;
  std::uint64_t expected_version = 0;  // 0 = any.
};
using Op = std::variant<SetOp, MoveOp, RemoveOp>;

struct OpResult {
  Status status;
  std::uint64_t version = 0;
  WallNanos fire_time = 0;
  bool replaced = false;
};

// A pending timer as GetTimer / ListTimers report it.
struct TimerInfo {
  NamespaceId ns;
  std::string key;
  std::string payload;
  WallNanos fire_time;
  std::uint64_t version;
};

enum class Reason { kExpired = 1, kDrained = 2 };

// A fired timer on its way to subscribers.
struct Event {
  std::uint64_t id;
  NamespaceId ns;
  Blob blob;  // Key and payload.
  std::uint64_t version;
  WallNanos fire_time;
  WallNanos fired_at;
  std::uint32_t attempt = 0;  // Deliveries so far.
  Reason reason;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_TYPES_H_
