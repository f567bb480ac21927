// The partition of a namespace's key where partitions are shared by every
// delayd on one database (the PostgreSQL store): a hash that is the same on
// every node and every run, unlike keyed_hash.h's per-process seed. FNV-1a
// (http://www.isthe.com/chongo/tech/comp/fnv/) over the namespace's name, a
// 0 byte and the key, modulo the partition count.
//
// Being unseeded, a client can choose keys that land in one partition; that
// costs it (and its namespace's neighbours there) only that partition's
// share of the throughput: no structure indexed by this hash probes.
#ifndef DELAYD_SERVER_COMMON_STABLE_HASH_H_
#define DELAYD_SERVER_COMMON_STABLE_HASH_H_

#include <cstdint>
#include <string_view>

namespace delayd {

// The hash's state after the namespace's name and the 0 byte: computed once
// per namespace, continued per key by StablePartition.
inline std::uint64_t StableSeed(std::string_view ns) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : ns) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h * 1099511628211ull;  // The 0 byte: h ^= 0, then the multiply.
}

inline std::uint32_t StablePartition(std::uint64_t seed, std::string_view key,
                                     std::uint32_t partitions) {
  std::uint64_t h = seed;
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<std::uint32_t>(h % (partitions == 0 ? 1 : partitions));
}

inline std::uint32_t StablePartition(std::string_view ns, std::string_view key,
                                     std::uint32_t partitions) {
  return StablePartition(StableSeed(ns), key, partitions);
}

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_STABLE_HASH_H_
