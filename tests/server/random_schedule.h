// Random schedule records for tests of their containers and their stored
// form.
#ifndef DELAYD_TESTS_SERVER_RANDOM_SCHEDULE_H_
#define DELAYD_TESTS_SERVER_RANDOM_SCHEDULE_H_

#include <random>

#include "server/core/schedule_record.h"

namespace delayd {

// A record with each optional field present or not, drawn from `rng`.
inline ScheduleRecord RandomRecord(std::mt19937_64& rng) {
  auto coin = [&] { return (rng() & 1) != 0; };
  static const char* const kCron[] = {"0 9 * * 1-5", "*/5 * * * *",
                                      "15 10 L * ?"};
  static const char* const kZones[] = {"UTC", "Europe/Berlin",
                                       "America/New_York"};
  ScheduleRecord r;
  if (coin()) {
    r.cron = kCron[rng() % 3];
    r.zone = kZones[rng() % 3];
  } else {
    r.every = static_cast<std::int64_t>(1 + rng() % 1'000'000'000'000);
    r.anchor = static_cast<std::int64_t>(rng() >> 2);
  }
  if (coin()) r.start = static_cast<std::int64_t>(rng() >> 2);
  if (coin()) r.end = static_cast<std::int64_t>(rng() >> 2);
  if (coin()) r.max_runs = rng();
  if (coin()) r.jitter = static_cast<std::int64_t>(rng() >> 2);
  r.catch_up = static_cast<schedule::CatchUp>(rng() % 3);
  if (coin()) r.catch_up_limit = static_cast<std::uint32_t>(rng());
  r.overlap = static_cast<schedule::Overlap>(rng() % 3);
  r.payload = std::string(rng() % 40, static_cast<char>('a' + rng() % 26));
  r.version = rng();
  r.created_at = static_cast<std::int64_t>(rng() >> 2);
  r.state.last_instant = static_cast<std::int64_t>(rng() >> 2);
  r.state.runs = rng();
  r.state.paused = coin();
  r.state.finished = coin();
  if (coin()) r.state.buffered = static_cast<std::int64_t>(rng() >> 2);
  return r;
}

}  // namespace delayd

#endif  // DELAYD_TESTS_SERVER_RANDOM_SCHEDULE_H_
