// A time zone rule as a POSIX TZ string gives it (POSIX.1-2017, 8.3, with
// RFC 8536's extensions: transition hours from -167 to 167): what a TZif
// file's footer says of every instant after the last transition the file
// lists (RFC 8536, 3.3). "CET-1CEST,M3.5.0,M10.5.0/3": standard time
// "CET" at UTC+1, daylight time "CEST" an hour ahead of it from the last
// Sunday of March at 02:00 (local standard time) to the last Sunday of
// October at 03:00 (local daylight time).
//
// Written here rather than taken from the date library's Posix::time_zone
// (date/ptz.h): that one refuses transition hours outside 0..24, which 3
// of the 199 zones with daylight saving in Debian 12's tzdata use
// (America/Nuuk, America/Godthab, America/Scoresbysund: "M3.5.0/-1"), and
// its header does not compile as C++20 with GCC 12 (hh_mm_ss is ambiguous
// between date:: and std::chrono::). glibc evaluates the same footers, but
// only for the one zone of the process-wide TZ variable. The tests compare
// this rule with glibc's for every zone, 2038 to 2100.
//
// Thread safety: a TzRule is immutable once parsed.
#ifndef DELAYD_PROTO_DELAYD_TEXT_TZ_RULE_H_
#define DELAYD_PROTO_DELAYD_TEXT_TZ_RULE_H_

#include <date/tz.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace delayd {

class TzRule {
 public:
  // The rule `tz` states; nullopt if it is not a POSIX TZ string.
  static std::optional<TzRule> Parse(std::string_view tz);

  // The offset in force at `t`, with the instants it began and ends (its
  // transitions within a year either side of t; none: the far past or
  // future), and its abbreviation.
  date::sys_info Info(date::sys_seconds t) const;
  // What wall time `l` is: one instant, two (a fall-back overlap: `first`
  // the earlier) or none (a spring-forward gap: `first` before it,
  // `second` after), as date::time_zone::get_info says.
  date::local_info Info(date::local_seconds l) const;

 private:
  // When a rule's day falls in a year: "Mm.w.d", "Jn" or "n".
  struct Day {
    enum class Kind { kMonthWeekDay, kJulian, kZeroBased } kind;
    int month = 0, week = 0, weekday = 0, day = 0;
    std::chrono::seconds time{7200};  // Local time of day (default 02:00).
  };
  static bool ParseDay(std::string_view& s, Day* out);
  // The instant `day` begins (`day.time` into it, `offset` east of UTC) in
  // year `y`.
  static date::sys_seconds At(const Day& day, int y,
                              std::chrono::seconds offset);
  // The sys_info of the standard or daylight period that holds `t`.
  date::sys_info Period(date::sys_seconds t) const;

  std::string std_abbrev_, dst_abbrev_;
  std::chrono::seconds std_offset_{0}, dst_offset_{0};  // East of UTC.
  bool has_dst_ = false;
  Day start_{}, end_{};
};

}  // namespace delayd

#endif  // DELAYD_PROTO_DELAYD_TEXT_TZ_RULE_H_
