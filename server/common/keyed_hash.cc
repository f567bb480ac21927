#include "server/common/keyed_hash.h"

#include <random>

namespace delayd {

std::uint64_t HashSeed() {
  static const std::uint64_t seed = [] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32) ^ rd();
  }();
  return seed;
}

}  // namespace delayd
