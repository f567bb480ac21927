// An open-addressing hash index from a key to a 32-bit record index.
//
// Written here rather than taken from a library because the daemon needs an
// index that stores only 8 bytes per slot (a record index and its key's hash;
// the key lives in the record), to keep a pending timer near 100 bytes; the
// standard unordered containers spend 40+ bytes per entry and Debian 12 ships
// no flat hash map among the project's dependencies.
//
// Linear probing, power-of-two capacity, load factor at most 3/4, deletion by
// backward shift (no tombstones, so probe lengths never degrade under churn).
// The hash beside each index means a probe reads a record only when the full
// 32-bit hashes match.
//
// Thread safety: none.
#ifndef DELAYD_SERVER_CORE_KEY_INDEX_H_
#define DELAYD_SERVER_CORE_KEY_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace delayd {

class KeyIndex {
 public:
  static constexpr std::uint32_t kNone = 0xFFFFFFFFu;

  std::size_t size() const { return size_; }
  std::size_t capacity() const { return slots_.size(); }

  // The record whose hash is `hash` and for which `matches(record)` holds,
  // or kNone.
  template <typename Matches>
  std::uint32_t Find(std::uint32_t hash, Matches&& matches) const {
    if (slots_.empty()) return kNone;
    for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot s = slots_[i];
      if (s.record == kNone) return kNone;
      if (s.hash == hash && matches(s.record)) return s.record;
    }
  }

  // Starts loading the slot where a lookup of `hash` begins (a hint: no
  // effect on the index).
  void Prefetch(std::uint32_t hash) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[hash & mask_]);
  }

  // Makes room for `n` entries in all: adding up to that many does not grow
  // the slot array.
  void Reserve(std::size_t n) {
    std::size_t capacity = slots_.empty() ? 16 : slots_.size();
    while (n * 4 > capacity * 3) capacity *= 2;
    if (capacity > slots_.size()) Rehash(capacity);
  }
  // The slot where a lookup of `hash` begins: inserting many entries in the
  // order of this (after Reserve) writes the slot array in sequence rather
  // than at random.
  std::size_t Home(std::uint32_t hash) const { return hash & mask_; }

  // Adds `record` (not present) with `hash`.
  void Insert(std::uint32_t hash, std::uint32_t record) {
    if ((size_ + 1) * 4 > slots_.size() * 3) Grow();
    Place(hash, record);
    ++size_;
  }

  // Removes `record`, which must be present with `hash`.
  void Erase(std::uint32_t hash, std::uint32_t record) {
    std::size_t hole = hash & mask_;
    while (slots_[hole].record != record) hole = (hole + 1) & mask_;
    // Shift back every later entry of the cluster whose home slot is not
    // cyclically within (hole, i].
    for (std::size_t i = (hole + 1) & mask_;; i = (i + 1) & mask_) {
      const Slot s = slots_[i];
      if (s.record == kNone) break;
      const std::size_t home = s.hash & mask_;
      const bool stays =
          hole <= i ? (hole < home && home <= i) : (hole < home || home <= i);
      if (!stays) {
        slots_[hole] = s;
        hole = i;
      }
    }
    slots_[hole] = Slot{};
    --size_;
  }

 private:
  struct Slot {
    std::uint32_t record = kNone;
    std::uint32_t hash = 0;
  };
  void Place(std::uint32_t hash, std::uint32_t record) {
    std::size_t i = hash & mask_;
    while (slots_[i].record != kNone) i = (i + 1) & mask_;
    slots_[i] = Slot{record, hash};
  }
  void Grow() { Rehash(slots_.empty() ? 16 : slots_.size() * 2); }
  void Rehash(std::size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (const Slot& s : old) {
      if (s.record != kNone) Place(s.hash, s.record);
    }
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_KEY_INDEX_H_
