#include "server/core/key_index.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>
#include <vector>

namespace delayd {
namespace {

// Keys are records' numbers; hashes are drawn from a small range so that
// clusters form, collide and wrap around the end of the slot array.
TEST(KeyIndex, MatchesAReferenceMapUnderRandomChurn) {
  std::mt19937 rng(3);
  KeyIndex index;
  std::vector<std::uint32_t> hash_of;  // record -> hash
  std::unordered_map<std::uint32_t, std::uint32_t> key_to_record;
  std::vector<std::uint32_t> keys_of;  // record -> key
  std::vector<std::uint32_t> free_records;
  auto find = [&](std::uint32_t key, std::uint32_t hash) {
    return index.Find(hash, [&](std::uint32_t r) { return keys_of[r] == key; });
  };
  auto hash_for = [](std::uint32_t key) {
    // Few distinct low bits and some equal full hashes: long probe runs.
    return (key % 97) * 0x01000193u ^ ((key % 7) << 28);
  };
  for (int step = 0; step < 200000; ++step) {
    const std::uint32_t key =
        std::uniform_int_distribution<std::uint32_t>(0, 3000)(rng);
    const std::uint32_t hash = hash_for(key);
    auto it = key_to_record.find(key);
    const std::uint32_t found = find(key, hash);
    ASSERT_EQ(found, it == key_to_record.end() ? KeyIndex::kNone : it->second)
        << "step " << step;
    if (it == key_to_record.end()) {
      std::uint32_t r;
      if (free_records.empty()) {
        r = static_cast<std::uint32_t>(keys_of.size());
        keys_of.push_back(key);
        hash_of.push_back(hash);
      } else {
        r = free_records.back();
        free_records.pop_back();
        keys_of[r] = key;
        hash_of[r] = hash;
      }
      index.Insert(hash, r);
      key_to_record[key] = r;
    } else if (rng() % 2 == 0) {
      index.Erase(hash, it->second);
      free_records.push_back(it->second);
      key_to_record.erase(it);
    }
    ASSERT_EQ(index.size(), key_to_record.size());
  }
  // Everything still present is found; everything removed is not.
  for (std::uint32_t key = 0; key <= 3000; ++key) {
    auto it = key_to_record.find(key);
    EXPECT_EQ(find(key, hash_for(key)),
              it == key_to_record.end() ? KeyIndex::kNone : it->second);
  }
}

}  // namespace
}  // namespace delayd
