// Plain types shared by the scheduler's parts and the service above it.
#ifndef DELAYD_SERVER_COMMON_TYPES_H_
#define DELAYD_SERVER_COMMON_TYPES_H_

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <variant>

#include "server/common/status.h"

namespace delayd {

// Wall-clock nanoseconds since the Unix epoch.
using WallNanos = std::int64_t;

inline WallNanos WallNow() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The largest --max-delay: now plus it stays far from the end of 64-bit
// nanoseconds since 1970 (the year 2262).
inline constexpr std::chrono::nanoseconds kMaxDelayLimit =
    std::chrono::hours(24 * 36500);

// Every limit of the daemon; each is a flag of `delayd`.
struct Limits {
  std::size_t max_key_bytes = 256;  // At most 65535.
  std::size_t max_namespace_bytes = 64;
  std::size_t max_payload_bytes = 64 * 1024;
  std::chrono::nanoseconds max_delay = std::chrono::hours(24 * 365 * 10);
  // Pending timers plus fired events not yet acknowledged.
  std::uint64_t max_pending_timers = 10'000'000;
  std::size_t max_batch_ops = 1000;
  std::size_t max_subscribers = 10'000;
  std::size_t max_namespaces = 10'000;  // At most 65536.
  // Events, and bytes, queued for one watcher before it is ended as too
  // slow.
  std::size_t watcher_backlog = 10'000;
  std::size_t watcher_backlog_bytes = 16 << 20;
  // Bytes queued for one worker beyond which it gets no more events until
  // its stream takes them (it always gets at least one event).
  std::size_t worker_backlog_bytes = 16 << 20;
  // A stream whose write has not completed by then is ended; a worker's
  // events go to others.
  std::chrono::nanoseconds stream_write_timeout = std::chrono::seconds(30);
  // The shortest `every` a schedule spec may have.
  std::chrono::nanoseconds min_schedule_interval = std::chrono::seconds(1);
  // Recurring schedules per namespace.
  std::uint64_t max_schedules = 1000;
  // Keys remembered for namespaces' dedup windows, daemon-wide; at the
  // bound, those whose window ends soonest go first.
  std::uint64_t max_dedup_keys = 1'000'000;
};

// A timer's key (at most 65535 bytes) and payload, 40 bytes: stored inline
// when together they fit in 32 bytes (no allocation per timer), else in one
// heap block. Empty (no key) when default-constructed or moved from. Carries
// a 16-bit tag for its owner (a partition keeps the namespace id there, which
// holds a pending timer's record to 64 bytes).
class Blob {
 public:
  Blob() = default;
  Blob(std::string_view key, std::string_view payload)
      : key_size_(static_cast<std::uint16_t>(key.size())),
        payload_size_(static_cast<std::uint32_t>(payload.size())) {
    char* out = inline_;
    if (!is_inline()) {
      heap_ = new char[key.size() + payload.size()];
      out = heap_;
    }
    // (An empty view may have no data pointer, which memcpy must not get.)
    if (!key.empty()) std::memcpy(out, key.data(), key.size());
    if (!payload.empty()) {
      std::memcpy(out + key.size(), payload.data(), payload.size());
    }
  }
  Blob(Blob&& other) noexcept { Take(other); }
  Blob& operator=(Blob&& other) noexcept {
    if (this != &other) {
      Free();
      Take(other);
    }
    return *this;
  }
  ~Blob() { Free(); }

  std::string_view key() const { return {data(), key_size_}; }
  std::string_view payload() const {
    return {data() + key_size_, payload_size_};
  }
  explicit operator bool() const { return key_size_ != 0; }
  std::uint16_t tag() const { return tag_; }
  void set_tag(std::uint16_t tag) { tag_ = tag; }

 private:
  static constexpr std::size_t kInline = 32;
  bool is_inline() const {
    return std::size_t{key_size_} + payload_size_ <= kInline;
  }
  const char* data() const { return is_inline() ? inline_ : heap_; }
  void Free() {
    if (!is_inline()) delete[] heap_;
    key_size_ = payload_size_ = 0;
  }
  void Take(Blob& other) {
    key_size_ = other.key_size_;
    tag_ = other.tag_;
    payload_size_ = other.payload_size_;
    std::memcpy(inline_, other.inline_, kInline);  // Or the pointer in it.
    other.key_size_ = other.payload_size_ = 0;
  }

  std::uint16_t key_size_ = 0;
  std::uint16_t tag_ = 0;
  std::uint32_t payload_size_ = 0;
  union {
    char inline_[kInline];
    char* heap_;
  };
};
static_assert(sizeof(Blob) == 40);

// Namespaces are interned: the core passes a dense id, the service the name.
using NamespaceId = std::uint32_t;

struct SetOp {
  NamespaceId ns;
  // Key and payload; moved into the timer's record.
  Blob blob;
  WallNanos fire_time;
  bool if_absent = false;
  std::string_view key() const { return blob.key(); }
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
  bool removed = false;  // A pending timer is gone (RemoveTimer).
};

// A pending timer as GetTimer / ListTimers report it.
struct TimerInfo {
  NamespaceId ns;
  std::string key;
  std::string payload;
  WallNanos fire_time;
  std::uint64_t version;
};

// What a timer adds to a ListTimers page, about: its key and payload, and a
// fixed cost for the other fields and framing.
inline std::size_t ListCost(const TimerInfo& t) {
  return t.key.size() + t.payload.size() + 64;
}

// Why a subscriber gets an event: kDeadLettered is for watchers only (the
// event failed its last attempt and became a dead letter).
enum class Reason { kExpired = 1, kDrained = 2, kDeadLettered = 3 };

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

// `e` with `payload` in place of its own (with a store, an event's blob
// holds its payload's id until the payload is read back).
inline Event CopyWithPayload(const Event& e, std::string_view payload) {
  return Event{e.id,      e.ns,        Blob(e.blob.key(), payload),
               e.version, e.fire_time, e.fired_at,
               e.attempt, e.reason};
}

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_TYPES_H_
