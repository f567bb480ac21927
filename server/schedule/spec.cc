#include "server/schedule/spec.h"

#include <date/tz.h>

#include <limits>
#include <stdexcept>

#include "delayd/text/zone.h"

namespace delayd::schedule {
namespace {

using std::chrono::nanoseconds;
using std::chrono::seconds;

// How far ahead a cron search looks: any expression that parsed matches
// within 28 years.
constexpr date::years kSearch{30};

// The latest instant a WallNanos holds, in whole seconds.
constexpr date::sys_seconds kEnd{
    seconds{std::numeric_limits<WallNanos>::max() / 1'000'000'000 - 1}};

// The instant a wall time stands for (spec.h): its only or first occurrence,
// or, inside a gap, the instant the gap ends.
date::sys_seconds Resolve(const Zone* zone, LocalSeconds wall) {
  const date::local_info info = zone->Info(wall);
  switch (info.result) {
    case date::local_info::unique:
    case date::local_info::ambiguous:
      return date::sys_seconds{wall.time_since_epoch() - info.first.offset};
    case date::local_info::nonexistent:
    default:
      return info.second.begin;
  }
}

}  // namespace

Status Spec::Cron(std::string_view expr, std::string_view zone, Spec* out) {
  Spec s;
  if (Status st = CronExpr::Parse(expr, &s.cron_); !st.ok()) return st;
  s.zone_name_ = zone.empty() ? "UTC" : std::string(zone);
  std::string error;
  s.zone_ = Zone::Find(s.zone_name_, &error);
  if (s.zone_ == nullptr) {
    return Status::InvalidArgument("time_zone: unknown time zone '" +
                                   s.zone_name_ + "' (" + error + ")");
  }
  *out = std::move(s);
  return Status::Ok();
}

Status Spec::Every(nanoseconds period, WallNanos anchor, nanoseconds floor,
                   Spec* out) {
  if (period < floor) {
    return Status::InvalidArgument("every: " + std::to_string(period.count()) +
                                   " ns is under the least interval, " +
                                   std::to_string(floor.count()) + " ns");
  }
  if (period <= nanoseconds{0}) {
    return Status::InvalidArgument("every: the interval must be positive");
  }
  // (Set in place: start-up builds one for each interval schedule.)
  out->zone_ = nullptr;
  out->zone_name_.clear();
  out->period_ = period;
  out->anchor_ = anchor;
  return Status::Ok();
}

std::optional<WallNanos> Spec::Next(WallNanos after) const {
  return zone_ != nullptr ? NextCron(after) : NextEvery(after);
}

std::vector<WallNanos> Spec::Preview(WallNanos after, std::size_t n) const {
  std::vector<WallNanos> out;
  while (out.size() < n) {
    const auto next = Next(after);
    if (!next) break;
    out.push_back(*next);
    after = *next;
  }
  return out;
}

std::optional<WallNanos> Spec::NextEvery(WallNanos after) const {
  if (after < anchor_) return anchor_;
  const auto steps = (after - anchor_) / period_.count() + 1;
  if (steps >
      (std::numeric_limits<WallNanos>::max() - anchor_) / period_.count()) {
    return std::nullopt;
  }
  return anchor_ + steps * period_.count();
}

std::optional<WallNanos> Spec::NextCron(WallNanos after) const {
  // Instants are whole seconds: one after `after` is after its whole second.
  const date::sys_seconds t =
      date::floor<seconds>(date::sys_time<nanoseconds>{nanoseconds{after}});
  if (t >= kEnd) return std::nullopt;
  LocalSeconds from = zone_->ToLocal(t) + seconds{1};
  // Wall times up to t's own stand for instants up to t. Past it, only the
  // second occurrences in a fall-back overlap still resolve to instants at or
  // before t (their first occurrence): skip them.
  for (;;) {
    const auto wall = cron_.NextMatch(from, from + kSearch);
    if (!wall) return std::nullopt;
    const date::sys_seconds at = Resolve(zone_, *wall);
    if (at > t) {
      if (at >= kEnd) return std::nullopt;
      return WallNanos{
          std::chrono::duration_cast<nanoseconds>(at.time_since_epoch())
              .count()};
    }
    // Inside an overlap: wall times up to t + first offset all resolve to t
    // or before; the overlap's end bounds the jump.
    const date::local_info info = zone_->Info(*wall);
    LocalSeconds next = *wall + seconds{1};
    if (info.result == date::local_info::ambiguous) {
      const LocalSeconds past{t.time_since_epoch() + info.first.offset +
                              seconds{1}};
      const LocalSeconds overlap_end{info.first.end.time_since_epoch() +
                                     info.first.offset};
      next = std::max(next, std::min(past, overlap_end));
    }
    from = next;
  }
}

}  // namespace delayd::schedule
