// An open-addressing hash index from a key to a 32-bit record index.
//
// Written here rather than taken from a library because the daemon needs an
// index that stores nothing but the 4-byte record index per slot (the key and
// its hash live in the record), to keep a pending timer near 100 bytes; the
// standard unordered containers spend 40+ bytes per entry and Debian 12 ships
// no flat hash map among the project's dependencies.
//
// Linear probing, power-of-two capacity, load factor at most 3/4, deletion by
// backward shift (no tombstones, so probe lengths never degrade under churn).
//
// `HashOf(uint32_t record) -> uint32_t` returns a stored record's hash; it is
// used when growing and deleting. Thread safety: none.
#ifndef DELAYD_SERVER_KEY_INDEX_H_
#define DELAYD_SERVER_KEY_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace delayd {

template <typename HashOf>
class KeyIndex {
 public:
  static constexpr std::uint32_t kNone = 0xFFFFFFFFu;

  explicit KeyIndex(HashOf hash_of) : hash_of_(hash_of) {}

  std::size_t size() const { return size_; }

  // The record whose hash is `hash` and for which `matches(record)` holds,
  // or kNone.
  template <typename Matches>
  std::uint32_t Find(std::uint32_t hash, Matches&& matches) const {
    if (slots_.empty()) return kNone;
    for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const std::uint32_t r = slots_[i];
      if (r == kNone) return kNone;
      if (hash_of_(r) == hash && matches(r)) return r;
    }
  }

  // Adds `record` (not present) with `hash`.
  void Insert(std::uint32_t hash, std::uint32_t record) {
    if ((size_ + 1) * 4 > slots_.size() * 3) Grow();
    Place(hash, record);
    ++size_;
  }

  // Removes `record`, which must be present with `hash`.
  void Erase(std::uint32_t hash, std::uint32_t record) {
    std::size_t hole = hash & mask_;
    while (slots_[hole] != record) hole = (hole + 1) & mask_;
    // Shift back every later entry of the cluster whose home slot is not
    // cyclically within (hole, i].
    for (std::size_t i = (hole + 1) & mask_;; i = (i + 1) & mask_) {
      const std::uint32_t r = slots_[i];
      if (r == kNone) break;
      const std::size_t home = hash_of_(r) & mask_;
      const bool stays =
          hole <= i ? (hole < home && home <= i) : (hole < home || home <= i);
      if (!stays) {
        slots_[hole] = r;
        hole = i;
      }
    }
    slots_[hole] = kNone;
    --size_;
  }

  std::size_t MemoryUsage() const {
    return slots_.capacity() * sizeof(std::uint32_t);
  }

 private:
  void Place(std::uint32_t hash, std::uint32_t record) {
    std::size_t i = hash & mask_;
    while (slots_[i] != kNone) i = (i + 1) & mask_;
    slots_[i] = record;
  }
  void Grow() {
    std::vector<std::uint32_t> old = std::move(slots_);
    const std::size_t capacity = old.empty() ? 16 : old.size() * 2;
    slots_.assign(capacity, kNone);
    mask_ = capacity - 1;
    for (std::uint32_t r : old) {
      if (r != kNone) Place(hash_of_(r), r);
    }
  }

  HashOf hash_of_;
  std::vector<std::uint32_t> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_KEY_INDEX_H_
