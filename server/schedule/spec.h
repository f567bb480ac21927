// When a recurring schedule is due: the instants of a cron expression read in
// an IANA time zone, or of a fixed interval. Pure: instants are arguments,
// never read from a clock; time zones come from the system's tz database
// (/usr/share/zoneinfo, Debian's tzdata) through Howard Hinnant's date/tz
// library.
//
// Each instant is computed from the spec alone, never by adding to the last
// run, so no drift accumulates, and Next(t) is the same whenever it is asked.
//
// Wall times in a zone, at a change of its UTC offset:
//   - a wall time that does not exist (clocks spring forward) stands for the
//     first instant after the gap: `30 2 * * *` in Europe/Berlin on
//     2026-03-29, when 02:00 becomes 03:00, runs at 03:00 CEST (01:00 UTC);
//     every wall time in a gap stands for that one instant, which runs once;
//   - a wall time that occurs twice (clocks fall back) runs once, at its
//     first occurrence: `30 2 * * *` on 2026-10-25 runs at 02:30 CEST (00:30
//     UTC), not again at 02:30 CET.
// Intervals are durations on the UTC time line: "every 30m" is every 30
// minutes whatever a zone's clocks do.
//
// Thread safety: a spec is immutable once made; any thread may read it.
#ifndef DELAYD_SERVER_SCHEDULE_SPEC_H_
#define DELAYD_SERVER_SCHEDULE_SPEC_H_

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"
#include "server/common/types.h"
#include "server/schedule/cron.h"

namespace delayd {
class Zone;
}

namespace delayd::schedule {

class Spec {
 public:
  // A cron expression (cron.h) in the IANA zone `zone` (empty: UTC).
  // INVALID_ARGUMENT names the field and position for a bad expression, or
  // the zone when it is unknown.
  static Status Cron(std::string_view expr, std::string_view zone, Spec* out);

  // Every `period` on the UTC time line, at `anchor` + k × period (k ≥ 0).
  // INVALID_ARGUMENT when `period` is under `floor`.
  static Status Every(std::chrono::nanoseconds period, WallNanos anchor,
                      std::chrono::nanoseconds floor, Spec* out);

  // The first instant of the spec strictly after `after`; none when the
  // spec has no more (only the year 2262 ends them).
  std::optional<WallNanos> Next(WallNanos after) const;

  // Up to `n` instants strictly after `after`, in order.
  std::vector<WallNanos> Preview(WallNanos after, std::size_t n) const;

  bool is_cron() const { return zone_ != nullptr; }
  const std::string& zone_name() const { return zone_name_; }

 private:
  std::optional<WallNanos> NextCron(WallNanos after) const;
  std::optional<WallNanos> NextEvery(WallNanos after) const;

  CronExpr cron_;
  const Zone* zone_ = nullptr;  // set for a cron spec
  std::string zone_name_;
  std::chrono::nanoseconds period_{0};
  WallNanos anchor_ = 0;
};

}  // namespace delayd::schedule

#endif  // DELAYD_SERVER_SCHEDULE_SPEC_H_
