#include "server/schedule/planner.h"

#include <algorithm>
#include <deque>
#include <limits>

namespace delayd::schedule {
namespace {

// Missed instants are counted up to this many: a schedule every second,
// paused for a month, is not walked 2.6 million times to say so.
constexpr std::uint64_t kCountCap = 100'000;

std::uint64_t Mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

WallNanos FireAt(const Policies& p, WallNanos instant, std::uint64_t number) {
  if (p.jitter.count() <= 0) return instant;
  const auto j = static_cast<WallNanos>(
      Mix(p.seed ^ Mix(number)) % static_cast<std::uint64_t>(p.jitter.count()));
  return instant > std::numeric_limits<WallNanos>::max() - j ? instant
                                                             : instant + j;
}

bool Exhausted(const Policies& p, const State& s) {
  return p.max_runs != 0 && s.runs >= p.max_runs;
}

// The instants in (lo, hi], at most kCountCap of them counted.
std::uint64_t Count(const Spec& spec, WallNanos lo, WallNanos hi) {
  std::uint64_t n = 0;
  for (auto t = spec.Next(lo); t && *t <= hi && n < kCountCap;
       t = spec.Next(*t)) {
    ++n;
  }
  return n;
}

// The newest `n` instants in (lo, hi], oldest first: found in windows
// back from hi that grow eightfold, so a long gap is not walked from its
// start.
std::deque<WallNanos> Newest(const Spec& spec, WallNanos lo, WallNanos hi,
                             std::size_t n) {
  std::deque<WallNanos> out;
  WallNanos window = 3'600'000'000'000;  // an hour
  for (;;) {
    const WallNanos from = hi - lo <= window ? lo : hi - window;
    out.clear();
    for (auto t = spec.Next(from); t && *t <= hi; t = spec.Next(*t)) {
      out.push_back(*t);
      if (out.size() > n) out.pop_front();
    }
    if (out.size() >= n || from == lo) return out;
    window = window > std::numeric_limits<WallNanos>::max() / 8
                 ? std::numeric_limits<WallNanos>::max()
                 : window * 8;
  }
}

struct Candidate {
  WallNanos instant;
  std::uint64_t missed;  // earlier instants it stands for
  bool late;             // for a missed instant
};

Run Fire(const Policies& p, State* s, WallNanos instant, std::uint64_t missed) {
  ++s->runs;
  return Run{instant, FireAt(p, instant, s->runs), s->runs, missed};
}

// Fires, buffers or drops each candidate in order, under the overlap
// policy and max_runs.
void Apply(const Policies& p, State* s, const std::vector<Candidate>& cs,
           bool open, Plan* plan) {
  for (const Candidate& c : cs) {
    if (Exhausted(p, *s)) break;
    if (open && p.overlap == Overlap::kSkip) {
      ++plan->dropped_overlap;
      continue;
    }
    if (open && p.overlap == Overlap::kBufferOne) {
      if (s->buffered) {
        ++plan->dropped_overlap;
      } else {
        s->buffered = c.instant;
      }
      continue;
    }
    plan->fire.push_back(Fire(p, s, c.instant, c.missed));
    if (c.late) ++plan->caught_up;
    open = true;
  }
}

// Sets the next wake-up, or marks the schedule finished.
void Finish(const Spec& spec, const Policies& p, State* s, WallNanos now,
            Plan* plan) {
  if (Exhausted(p, *s)) {
    s->finished = true;
    s->buffered.reset();
  }
  plan->wake = NextInstant(spec, p, *s, now);
  if (!plan->wake && !s->buffered) s->finished = true;
}

}  // namespace

std::optional<WallNanos> NextInstant(const Spec& spec, const Policies& p,
                                     const State& state, WallNanos after,
                                     NextMemo* memo) {
  if (state.finished || state.paused) return std::nullopt;
  WallNanos from = std::max(after, state.last_instant);
  if (p.start && *p.start - 1 > from) from = *p.start - 1;
  std::optional<WallNanos> next;
  if (memo != nullptr && memo->asked && *memo->asked == from) {
    next = memo->next;
  } else {
    next = spec.Next(from);
    if (memo != nullptr) *memo = NextMemo{from, next};
  }
  if (!next || (p.end && *next > *p.end)) return std::nullopt;
  return next;
}

std::vector<WallNanos> Preview(const Spec& spec, const Policies& p,
                               WallNanos after, std::size_t n) {
  std::vector<WallNanos> out;
  State state;
  state.last_instant = after;
  while (out.size() < n) {
    const auto next = NextInstant(spec, p, state, state.last_instant);
    if (!next) break;
    out.push_back(*next);
    state.last_instant = *next;
  }
  return out;
}

Plan PlanDue(const Spec& spec, const Policies& p, State* state, WallNanos now,
             bool previous_open) {
  Plan plan;
  if (state->finished || state->paused) return plan;
  WallNanos lo = state->last_instant;
  if (p.start && *p.start - 1 > lo) lo = *p.start - 1;
  const WallNanos hi = p.end ? std::min(now, *p.end) : now;
  if (hi > lo) {
    const std::size_t want = p.catch_up == CatchUp::kAll
                                 ? std::max<std::size_t>(1, p.catch_up_limit)
                                 : 1;
    const std::deque<WallNanos> due = Newest(spec, lo, hi, want);
    if (!due.empty()) {
      const std::uint64_t total =
          std::max<std::uint64_t>(Count(spec, lo, hi), due.size());
      const WallNanos newest = due.back();
      const bool on_time = now - newest <= p.on_time.count();
      state->last_instant = newest;
      std::vector<Candidate> cs;
      switch (p.catch_up) {
        case CatchUp::kNone:
          if (on_time) cs.push_back({newest, 0, false});
          plan.dropped_missed = total - cs.size();
          break;
        case CatchUp::kLatest:
          cs.push_back({newest, total - 1, !on_time});
          break;
        case CatchUp::kAll:
          for (WallNanos t : due) {
            cs.push_back({t, 0, !(t == newest && on_time)});
          }
          plan.dropped_missed = total - cs.size();
          break;
      }
      Apply(p, state, cs, previous_open, &plan);
    }
  }
  Finish(spec, p, state, now, &plan);
  return plan;
}

Plan PlanClosed(const Spec& spec, const Policies& p, State* state,
                WallNanos now) {
  Plan plan;
  if (state->buffered && !state->finished && !Exhausted(p, *state)) {
    const WallNanos instant = *state->buffered;
    state->buffered.reset();
    plan.fire.push_back(Fire(p, state, instant, 0));
  }
  state->buffered.reset();
  if (!state->finished) Finish(spec, p, state, now, &plan);
  return plan;
}

Run Trigger(State* state, WallNanos now) {
  ++state->runs;
  return Run{now, now, state->runs, 0};
}

}  // namespace delayd::schedule
