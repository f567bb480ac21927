#include "server/core/clock.h"

namespace delayd {
namespace {

class SystemClock final : public Clock {
 public:
  WallNanos Wall() const override { return WallNow(); }
  SteadyTime Steady() const override {
    return std::chrono::steady_clock::now();
  }
};

}  // namespace

Clock& Clock::System() {
  static SystemClock clock;
  return clock;
}

}  // namespace delayd
