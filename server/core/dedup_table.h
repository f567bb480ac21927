// The dedup window (Policy::dedup_window): what became of keys that left
// the pending set (fired, or removed) not long ago, so that a create-only
// set of such a key is refused for the window's length after.
//
// DedupWindows holds each namespace's window and the daemon-wide count of
// entries; DedupTable, one per partition, the entries of its keys, in
// memory and (as records the store keeps opaque: Batch::PutDedup) durably.
// The window counts from the moment the timer was removed, or fired, and
// again from its event's acknowledgement.
//
// Bounded: at most `max_entries` entries daemon-wide. A partition at the
// bound lets its entry that ends soonest go early (counted in `evicted`);
// one holding none records nothing.
//
// Thread safety: DedupWindows' methods may be called from any thread; a
// DedupTable belongs to its partition (under its mutex).
#ifndef DELAYD_SERVER_CORE_DEDUP_TABLE_H_
#define DELAYD_SERVER_CORE_DEDUP_TABLE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "server/common/types.h"

namespace delayd {

class DedupWindows {
 public:
  DedupWindows(std::size_t namespaces, std::uint64_t max_entries)
      : windows_(new std::atomic<std::int64_t>[namespaces]()),
        max_entries_(max_entries) {}

  void Set(NamespaceId ns, std::chrono::nanoseconds window) {
    windows_[ns].store(window.count(), std::memory_order_relaxed);
  }
  std::chrono::nanoseconds Of(NamespaceId ns) const {
    return std::chrono::nanoseconds(
        windows_[ns].load(std::memory_order_relaxed));
  }
  std::uint64_t max_entries() const { return max_entries_; }

  // Entries daemon-wide, and those let go before their end (the bound).
  std::atomic<std::uint64_t> entries{0};
  std::atomic<std::uint64_t> evicted{0};

 private:
  std::unique_ptr<std::atomic<std::int64_t>[]> windows_;
  const std::uint64_t max_entries_;
};

// One key's fate, as kept and stored.
struct DedupEntry {
  enum class Fate : std::uint8_t { kFired = 1, kRemoved = 2, kAcked = 3 };
  Fate fate = Fate::kFired;
  std::uint64_t version = 0;  // The timer's last version.
  WallNanos at = 0;     // When it fired, was removed, or was acknowledged.
  WallNanos until = 0;  // When the window ends.

  bool operator==(const DedupEntry&) const = default;
};

// The stored form: a version byte (1), then the fields, fixed size.
std::string EncodeDedup(const DedupEntry& e);
// Nullopt if `bytes` is not an entry this version wrote.
std::optional<DedupEntry> DecodeDedup(std::string_view bytes);

// The refusal of a create-only set of `key`, naming its fate.
std::string DedupRefusal(std::string_view key, const DedupEntry& e);

class DedupTable {
 public:
  // The entry of (ns, key) whose window has not ended at `now`, if any.
  const DedupEntry* Find(NamespaceId ns, std::string_view key,
                         WallNanos now) const;
  // The entry of (ns, key), ended or not.
  const DedupEntry* Peek(NamespaceId ns, std::string_view key) const;
  // Adds or replaces (ns, key)'s entry. Returns whether it is new (then the
  // caller counts it in its namespace's references), or nullopt if the
  // bound left no room; `*evicted` (ns and key) gets the entry let go to
  // make room, if one was.
  std::optional<bool> Put(
      NamespaceId ns, std::string_view key, const DedupEntry& e,
      DedupWindows& windows,
      std::optional<std::pair<NamespaceId, std::string>>* evicted);
  // Takes out up to `max` entries whose window ended at or before `now`.
  std::vector<std::pair<NamespaceId, std::string>> TakeExpired(
      WallNanos now, std::size_t max, DedupWindows& windows);
  // Takes out every entry (the partition is given up).
  std::vector<NamespaceId> TakeAll(DedupWindows& windows);
  std::size_t size() const { return entries_.size(); }

 private:
  // (ns, key) as one string: 4 bytes of the id, then the key.
  static std::string KeyOf(NamespaceId ns, std::string_view key);
  static std::pair<NamespaceId, std::string> Split(const std::string& k);
  void Erase(const std::string& k, DedupWindows& windows);

  std::unordered_map<std::string, DedupEntry> entries_;
  std::set<std::pair<WallNanos, std::string>> by_end_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_DEDUP_TABLE_H_
