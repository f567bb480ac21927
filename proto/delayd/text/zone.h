// An IANA time zone as the system's tz database (Debian's tzdata, in
// /usr/share/zoneinfo) holds it: the transitions each TZif file lists, read
// by the date library (date/tz.h, USE_OS_TZDB), and, for every instant
// after the last of them, the rule in the file's footer (tz_rule.h; RFC
// 8536, 3.3), which the date library does not read: without it, every year
// after the listed ones (2037 in Debian's files) would keep the offset of
// the last transition listed, an hour off in half of every year of a zone
// with daylight saving. The daemon computes schedules with it; delayctl
// shows instants with it.
//
// Thread safety: a Zone is immutable; Find may be called from any thread.
#ifndef DELAYD_PROTO_DELAYD_TEXT_ZONE_H_
#define DELAYD_PROTO_DELAYD_TEXT_ZONE_H_

#include <date/tz.h>

#include <optional>
#include <string>
#include <string_view>

#include "delayd/text/tz_rule.h"

namespace delayd {

class Zone {
 public:
  // The zone named `name` (e.g. "Europe/Berlin", "UTC"); null if the tz
  // database has none, with the reason in `error`. Each zone is read once
  // and kept for the life of the process (there are about 600).
  static const Zone* Find(std::string_view name, std::string* error);

  const std::string& name() const { return name_; }
  // As date::time_zone::get_info: the offset in force at `t`, and the
  // instants it began and ends.
  date::sys_info Info(date::sys_seconds t) const;
  // What wall time `l` is: one instant, two or none (local_info).
  date::local_info Info(date::local_seconds l) const;
  // The wall time of `t`.
  date::local_seconds ToLocal(date::sys_seconds t) const {
    return date::local_seconds{t.time_since_epoch() + Info(t).offset};
  }

 private:
  Zone(const date::time_zone* listed, std::optional<TzRule> rule)
      : name_(listed->name()), listed_(listed), rule_(std::move(rule)) {}

  std::string name_;
  const date::time_zone* listed_;
  std::optional<TzRule> rule_;  // The footer's, if it has one we read.
};

}  // namespace delayd

#endif  // DELAYD_PROTO_DELAYD_TEXT_ZONE_H_
