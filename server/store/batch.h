// A group of changes to the store, applied together and in order, in a form
// no backend owns: the core records what happened (a timer added, moved,
// removed or fired; an event acknowledged; a failed delivery's fate) and
// each store (store.h) turns the records into its own writes when it writes
// the group.
//
// A change names records by id: a timer by its payload id (unique
// daemon-wide, never reused: a replaced timer gets a new one), an event by
// its event id. Records are appended to one buffer (no allocation per
// change once it has grown), and read back in order with Batch::Reader.
//
// Thread safety: none; a batch belongs to whoever holds it.
#ifndef DELAYD_SERVER_STORE_BATCH_H_
#define DELAYD_SERVER_STORE_BATCH_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/types.h"

namespace delayd {

// A pending timer as stored: its payload lives apart, under `payload_id`.
struct StoredTimer {
  NamespaceId ns;
  std::string_view key;
  WallNanos fire_time;
  std::uint64_t version;
  std::uint64_t payload_id;
};

// A fired timer not yet acknowledged; its payload is the timer's.
struct StoredEvent {
  std::uint64_t id;
  NamespaceId ns;
  std::string_view key;
  std::uint64_t version;
  WallNanos fire_time;
  WallNanos fired_at;
  Reason reason;
  std::uint64_t payload_id;
};

// What became of an event's deliveries: how many were made (a delivery that
// succeeds is acknowledged and leaves no record, so only failures are
// written), whether it is a dead letter, the last error a worker gave, and
// the wall-clock instant before which it is not delivered again (0: none).
struct StoredFate {
  std::uint32_t attempts = 0;
  bool dead = false;
  std::string_view error;
  WallNanos retry_at = 0;
};

class Batch {
 public:
  enum class Kind : std::uint8_t {
    kAddTimer = 1,  // timer + payload
    kMoveTimer,     // timer (same payload id; new fire time and version)
    kRemoveTimer,   // id: the timer and its payload are gone
    kFireTimer,     // event: timer event.payload_id is now this event
    kRemoveEvent,   // id, payload_id, flag: the event, its payload, and
                    // (flag) its fate are gone
    kPutFate,       // id, payload_id (its row's: the event's payload), fate
    kRemoveFate,    // id, payload_id
    kReserveIds,    // partition, limits (see Store::ReserveIds)
    kPutNamespace,  // id, name (empty: the id is free)
    kPutPolicy,     // name, policy (encoded; empty: the default)
    kPutSchedule,   // id (namespace), name (key), data (the schedule,
                    // encoded by the core; empty: it is gone)
    kPutDedup,      // id (namespace), name (key), data (a key's fate in
                    // the dedup window, encoded by the core; empty: gone)
  };

  // One change, as Reader yields it; views point into the batch.
  struct Change {
    Kind kind;
    StoredTimer timer{};
    StoredEvent event{};
    StoredFate fate{};
    std::uint64_t id = 0;
    std::uint64_t payload_id = 0;
    bool flag = false;
    std::uint32_t partition = 0;
    std::uint64_t version_limit = 0;
    std::uint64_t event_seq_limit = 0;
    std::string_view name;
    std::string_view data;  // A payload, or an encoded policy.
  };

  Batch() = default;
  Batch(Batch&&) noexcept = default;
  Batch& operator=(Batch&&) noexcept = default;

  void AddTimer(const StoredTimer& timer, std::string_view payload);
  void MoveTimer(const StoredTimer& timer);
  void RemoveTimer(std::uint64_t payload_id);
  void FireTimer(const StoredEvent& event);
  // `with_fate`: the event has a fate record, removed too.
  void RemoveEvent(std::uint64_t event_id, std::uint64_t payload_id,
                   bool with_fate);
  void PutFate(std::uint64_t event_id, std::uint64_t payload_id,
               const StoredFate& fate);
  void RemoveFate(std::uint64_t event_id, std::uint64_t payload_id);
  void ReserveIds(std::uint32_t partition, std::uint64_t version_limit,
                  std::uint64_t event_seq_limit);
  void PutNamespace(NamespaceId id, std::string_view name);
  void PutPolicy(std::string_view name, std::string_view encoded);
  // A recurring schedule, opaque to the store; `encoded` empty removes it.
  void PutSchedule(NamespaceId ns, std::string_view key,
                   std::string_view encoded);

  // A key's fate kept for the dedup window (dedup_table.h), opaque to the
  // store; `encoded` empty removes it.
  void PutDedup(NamespaceId ns, std::string_view key, std::string_view encoded);

  // Records that the batch changes partition `partition`'s records (see
  // Store::SharedPartitions; other stores ignore it).
  void Touch(std::uint32_t partition) {
    for (std::uint32_t p : touched_) {
      if (p == partition) return;
    }
    touched_.push_back(partition);
  }
  // The partitions touched, in the order first touched.
  std::span<const std::uint32_t> touched() const { return touched_; }

  bool empty() const { return count_ == 0; }
  std::uint32_t count() const { return count_; }
  // About what the batch holds, for backlog accounting.
  std::size_t bytes() const { return rep_.size(); }
  void Clear() {
    rep_.clear();
    count_ = 0;
    touched_.clear();
  }
  // Appends another batch's changes after this one's.
  void Append(const Batch& other) {
    rep_ += other.rep_;
    count_ += other.count_;
    for (std::uint32_t p : other.touched_) Touch(p);
  }

  // Reads a batch's changes in order. The batch must outlive the reader and
  // not change meanwhile.
  class Reader {
   public:
    explicit Reader(const Batch& batch)
        : p_(batch.rep_.data()), end_(p_ + batch.rep_.size()) {}
    // The next change into `out`; false at the end.
    bool Next(Change* out);

   private:
    const char* p_;
    const char* end_;
  };

 private:
  void Begin(Kind kind) {
    rep_.push_back(static_cast<char>(kind));
    ++count_;
  }
  std::string rep_;
  std::uint32_t count_ = 0;
  std::vector<std::uint32_t> touched_;
};

// What `batches`, in order, say of each payload id they touch: its data, or
// nullopt if removed (the last word wins). For a store's view of the writes
// it has queued and not yet written.
std::map<std::uint64_t, std::optional<std::string>> PayloadsIn(
    std::span<const std::shared_ptr<const Batch>> batches);

}  // namespace delayd

#endif  // DELAYD_SERVER_STORE_BATCH_H_
