// Hashing of client-chosen strings (keys, namespace names) for every
// structure indexed by them. Seeded with a random value drawn once per
// process, so that nobody outside can precompute keys that collide in the
// key index (linear probing) or pile onto one partition.
//
// absl::Hash (Abseil ships with gRPC) does the mixing; the seed is combined
// in as the first value hashed. It is not a cryptographic MAC, but without
// the seed a client cannot tell which keys collide, which is what the hash
// tables need (the same reasoning as Abseil's own per-process seed).
#ifndef DELAYD_SERVER_COMMON_KEYED_HASH_H_
#define DELAYD_SERVER_COMMON_KEYED_HASH_H_

#include <absl/hash/hash.h>

#include <cstdint>
#include <string_view>

namespace delayd {

// The process's seed: random, drawn on first use (thread-safe).
std::uint64_t HashSeed();

inline std::uint64_t KeyedHash(std::string_view s) {
  return absl::HashOf(HashSeed(), s);
}
inline std::uint64_t KeyedHash(std::uint32_t ns, std::string_view key) {
  return absl::HashOf(HashSeed(), ns, key);
}

// The 32 bits a KeyIndex keeps of KeyedHash(ns, key). (The scheduler picks
// partitions from the high half alone, so the low bits mixed in here still
// spread keys over a partition's slots.)
inline std::uint32_t KeyedHash32(std::uint32_t ns, std::string_view key) {
  const std::uint64_t h = KeyedHash(ns, key);
  return static_cast<std::uint32_t>(h ^ (h >> 32));
}

// For unordered containers keyed by client strings.
struct KeyedStringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return KeyedHash(s); }
};

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_KEYED_HASH_H_
