// What a recurring schedule does at a wake-up: which runs to fire now, which
// missed instants to catch up or drop, and when to wake next. Pure: time and
// whether the previous run is still open are arguments, so the core drives
// it from its clock (a fake one in tests) and stores the state it returns.
//
// Runs and instants:
//   - An instant is due when it is after `last_instant` (the last instant
//     acted on: fired, buffered or dropped) and at or before now, within
//     [start, end]. Acting on instants only after `last_instant`, and storing
//     it with the run's event, is what keeps a restart or a wall-clock step
//     from firing an instant twice or skipping one.
//   - The newest due instant is on time when it is at most `on_time` old;
//     every other due instant was missed (delayd was down, or the schedule
//     paused). Catch-up: kNone drops missed instants and fires only an
//     on-time one; kLatest (the default) fires one run for the newest due
//     instant, naming how many it stands for; kAll fires each due instant
//     in order, the newest `catch_up_limit` of them, dropping older ones.
//   - Overlap, with the previous run's event not yet acknowledged: kAllow
//     fires anyway; kSkip drops the instant; kBufferOne keeps the first such
//     instant (later ones are dropped) and fires it when the previous run
//     closes. Runs that fire together count as overlapping one another.
//   - A run's fire time is its instant plus a jitter in [0, jitter),
//     derived from the schedule's seed and the run number: never before the
//     instant, and the same after a restart.
//   - Runs are numbered from 1; after `max_runs` runs (0: no limit) or past
//     `end`, the schedule is finished.
//
// Thread safety: none; free functions over values.
#ifndef DELAYD_SERVER_SCHEDULE_PLANNER_H_
#define DELAYD_SERVER_SCHEDULE_PLANNER_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "server/common/types.h"
#include "server/schedule/spec.h"

namespace delayd::schedule {

enum class CatchUp { kNone, kLatest, kAll };
enum class Overlap { kAllow, kSkip, kBufferOne };

struct Policies {
  std::optional<WallNanos> start;  // no instant before it
  std::optional<WallNanos> end;    // no instant after it
  std::uint64_t max_runs = 0;      // 0: no limit
  std::chrono::nanoseconds jitter{0};
  std::uint64_t seed = 0;  // picks each run's jitter
  CatchUp catch_up = CatchUp::kLatest;
  std::uint32_t catch_up_limit = 100;  // kAll: at most this many at once
  Overlap overlap = Overlap::kAllow;
  std::chrono::nanoseconds on_time = std::chrono::seconds(10);
};

// What is stored for a schedule between wake-ups.
struct State {
  // The last instant acted on; instants at or before it are done. A new
  // schedule starts at its creation time: its instants come after it.
  WallNanos last_instant = 0;
  std::uint64_t runs = 0;  // runs fired; the last one's number
  bool paused = false;
  std::optional<WallNanos> buffered;  // kBufferOne: waiting for a close
  bool finished = false;

  bool operator==(const State&) const = default;
};

struct Run {
  WallNanos instant = 0;  // the scheduled instant this run is for
  // Instant plus jitter: when the run is due (a caught-up or buffered run
  // is due in the past, and fires at once).
  WallNanos fire_at = 0;
  std::uint64_t number = 0;
  std::uint64_t missed = 0;  // kLatest: earlier due instants it stands for
};

struct Plan {
  std::vector<Run> fire;
  std::uint64_t dropped_missed = 0;   // by catch-up
  std::uint64_t dropped_overlap = 0;  // by kSkip or kBufferOne
  std::uint64_t caught_up = 0;        // fired runs that were missed
  // When to wake next (the next instant), if the schedule is not finished,
  // paused, or waiting on an open run with an instant buffered.
  std::optional<WallNanos> wake;
};

// The runs due at `now`, given whether the previous run is still open
// (fired and not acknowledged); updates `*state`.
Plan PlanDue(const Spec& spec, const Policies& p, State* state, WallNanos now,
             bool previous_open);

// The previous run closed: the buffered instant, if any, fires now.
Plan PlanClosed(const Spec& spec, const Policies& p, State* state,
                WallNanos now);

// A run fired on request ("trigger now"), outside the spec: instant `now`.
// It takes the next run number and counts toward max_runs; the spec's own
// instants go on as before.
Run Trigger(State* state, WallNanos now);

// A spec's last answer to Next, and what it was asked: schedules sharing a
// cron spec mostly ask the same (they fired at the same instant, or start
// together), and a cron spec's Next walks the calendar in its zone.
struct NextMemo {
  std::optional<WallNanos> asked;  // none yet
  std::optional<WallNanos> next;
};

// The next instant the schedule will act on after `after`, within its
// bounds; none when it is finished. With `memo` (the spec's, used by one
// thread at a time), an answer the spec gave last is not computed again.
std::optional<WallNanos> NextInstant(const Spec& spec, const Policies& p,
                                     const State& state, WallNanos after,
                                     NextMemo* memo = nullptr);

// The first `n` instants (fewer if the bounds end first) a schedule created
// at `after` would act on: a preview.
std::vector<WallNanos> Preview(const Spec& spec, const Policies& p,
                               WallNanos after, std::size_t n);

}  // namespace delayd::schedule

#endif  // DELAYD_SERVER_SCHEDULE_PLANNER_H_
