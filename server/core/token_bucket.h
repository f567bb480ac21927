// A token bucket: at most `rate` takes per second on average, and at most
// `burst` at once after a quiet spell. The time is passed in (no clock), so
// that the arithmetic is tested with made-up times. Written here: none of
// the project's libraries (Asio, gRPC, Abseil as Debian ships it) has one,
// and it is a few lines of arithmetic on the dispatcher's strand (held to
// the set rate within 0.01 % at 100 to 10,000/s, tests/bench/README.md).
#ifndef DELAYD_SERVER_CORE_TOKEN_BUCKET_H_
#define DELAYD_SERVER_CORE_TOKEN_BUCKET_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>

namespace delayd {

class TokenBucket {
 public:
  using Time = std::chrono::steady_clock::time_point;

  // `rate` 0: unlimited. `burst` 0: a second's worth, at least 1. The
  // bucket starts full.
  void Configure(double rate, double burst, Time now) {
    rate_ = rate;
    burst_ = burst > 0 ? burst : std::max(1.0, rate);
    tokens_ = burst_;
    last_ = now;
  }
  bool unlimited() const { return rate_ <= 0; }

  // Whole tokens there are at `now`. (Within kSlack: refills summed in
  // floating point, ten of 0.1 say, fall short of 1 by a rounding error.)
  std::size_t Available(Time now) {
    Refill(now);
    return static_cast<std::size_t>(tokens_ + kSlack);
  }
  // Takes `n` (at most Available()).
  void Take(std::size_t n) { tokens_ -= static_cast<double>(n); }
  // Gives back `n` taken for nothing (events not sent after all), up to the
  // burst.
  void Return(std::size_t n) {
    tokens_ = std::min(burst_, tokens_ + static_cast<double>(n));
  }
  // When the next whole token will be there (now if one is).
  Time NextToken(Time now) {
    Refill(now);
    if (tokens_ + kSlack >= 1) return now;
    const double seconds = (1 - tokens_) / rate_;
    return now + std::chrono::ceil<std::chrono::nanoseconds>(
                     std::chrono::duration<double>(seconds));
  }

 private:
  void Refill(Time now) {
    if (now <= last_) return;
    const double elapsed = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(burst_, tokens_ + elapsed * rate_);
    last_ = now;
  }

  static constexpr double kSlack = 1e-9;

  double rate_ = 0;
  double burst_ = 1;
  double tokens_ = 0;
  Time last_{};
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_TOKEN_BUCKET_H_
