// A cron expression: which wall-clock seconds it matches. Pure: no clock, no
// time zone (spec.h maps wall times to instants in a zone).
//
// Grammar: five fields, `minute hour day-of-month month day-of-week`, or six
// with `second` first; or one macro: @yearly (@annually), @monthly, @weekly,
// @daily (@midnight), @hourly. In each field: `*`, a value, a range `a-b`, a
// step `*/n`, `a/n` (from a to the field's end) or `a-b/n`, and lists of
// these joined by commas. Months and days of the week take three-letter
// English names (JAN, MON; any case); day-of-week takes 0-7, 0 and 7 both
// Sunday. Day-of-month also takes `L` (last day), `L-n` (n days before the
// last day), `LW` (last weekday, Monday to Friday) and `nW` (the weekday
// nearest day n in the same month); day-of-week takes `dL` (the last day d of
// the month, e.g. `5L` or `FRIL`) and `d#k` (the k-th day d, k 1-5). `?` is
// `*` in day-of-month and day-of-week.
//
// Days: when day-of-month and day-of-week are both restricted (neither is
// `*` or `?`), a day matches if either matches, as in Vixie cron; when one is
// restricted, it alone decides.
//
// Thread safety: a parsed expression is immutable; any thread may read it.
#ifndef DELAYD_SERVER_SCHEDULE_CRON_H_
#define DELAYD_SERVER_SCHEDULE_CRON_H_

#include <date/date.h>

#include <array>
#include <bitset>
#include <chrono>
#include <optional>
#include <string_view>

#include "server/common/status.h"

namespace delayd::schedule {

// Seconds of local (wall-clock) time, no zone attached.
using LocalSeconds = date::local_seconds;

class CronExpr {
 public:
  // Parses `text` into `*out`. On error, returns INVALID_ARGUMENT naming the
  // field and the 1-based character position in `text`, and leaves `*out`
  // as it was. An expression that matches no date at all (`0 0 30 2 *`) is
  // an error too.
  static Status Parse(std::string_view text, CronExpr* out);

  // The first matching second at or after `from`, if one comes before
  // `limit`.
  std::optional<LocalSeconds> NextMatch(LocalSeconds from,
                                        LocalSeconds limit) const;

  bool Matches(LocalSeconds t) const;

 private:
  friend class CronParser;

  bool DayMatches(date::year_month_day ymd) const;
  bool DomMatches(date::year_month_day ymd) const;
  bool DowMatches(date::year_month_day ymd) const;
  // The first matching time of day at or after `tod`, if any.
  std::optional<std::chrono::seconds> FirstTimeOfDay(
      std::chrono::seconds tod) const;

  std::bitset<60> seconds_;
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;     // 1-31
  std::bitset<13> months_;   // 1-12
  std::bitset<7> weekdays_;  // 0 Sunday - 6 Saturday
  bool dom_restricted_ = false;
  bool dow_restricted_ = false;
  // Day-of-month extras: `L` / `L-n` (each n held, 0 for `L`), `LW`, `nW`.
  std::bitset<31> before_last_;
  bool last_weekday_ = false;
  std::bitset<32> nearest_weekday_;
  // Day-of-week extras: `dL` by weekday; `d#k` as bit k-1 of weekday d.
  std::bitset<7> last_of_weekday_;
  std::array<std::bitset<5>, 7> nth_weekday_{};
};

}  // namespace delayd::schedule

#endif  // DELAYD_SERVER_SCHEDULE_CRON_H_
