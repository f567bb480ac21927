#include "delayd/text/tz_rule.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>

namespace delayd {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

constexpr date::sys_seconds kFarPast{seconds{std::numeric_limits<int>::min()} *
                                     1000};
constexpr date::sys_seconds kFarFuture{
    seconds{std::numeric_limits<int>::max()} * 1000};

// Reads an unsigned number of at most `digits` digits.
bool Number(std::string_view& s, int digits, int* out) {
  int n = 0, used = 0;
  while (used < digits && used < static_cast<int>(s.size()) &&
         std::isdigit(static_cast<unsigned char>(s[used]))) {
    n = n * 10 + (s[used] - '0');
    ++used;
  }
  if (used == 0) return false;
  s.remove_prefix(used);
  *out = n;
  return true;
}

// "[+-]hh[:mm[:ss]]", hours up to `max_hours`.
bool Time(std::string_view& s, int max_hours, seconds* out) {
  int sign = 1;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    sign = s[0] == '-' ? -1 : 1;
    s.remove_prefix(1);
  }
  int h = 0, m = 0, sec = 0;
  if (!Number(s, 3, &h) || h > max_hours) return false;
  if (!s.empty() && s[0] == ':') {
    s.remove_prefix(1);
    if (!Number(s, 2, &m) || m > 59) return false;
    if (!s.empty() && s[0] == ':') {
      s.remove_prefix(1);
      if (!Number(s, 2, &sec) || sec > 59) return false;
    }
  }
  *out = sign * (hours{h} + minutes{m} + seconds{sec});
  return true;
}

// An abbreviation: "<...>" (letters, digits, '+', '-') or 3+ letters.
bool Abbrev(std::string_view& s, std::string* out) {
  std::size_t n = 0;
  if (!s.empty() && s[0] == '<') {
    const auto close = s.find('>');
    if (close == std::string_view::npos || close < 4) return false;
    *out = std::string(s.substr(1, close - 1));
    s.remove_prefix(close + 1);
    return true;
  }
  while (n < s.size() && std::isalpha(static_cast<unsigned char>(s[n]))) ++n;
  if (n < 3) return false;
  *out = std::string(s.substr(0, n));
  s.remove_prefix(n);
  return true;
}

bool Valid(const date::sys_info& i, date::local_seconds l) {
  const date::sys_seconds t{l.time_since_epoch() - i.offset};
  return i.begin <= t && t < i.end;
}

}  // namespace

std::optional<TzRule> TzRule::Parse(std::string_view s) {
  TzRule r;
  seconds west{0};
  // POSIX offsets count west of UTC: "CET-1" is an hour east.
  if (!Abbrev(s, &r.std_abbrev_) || !Time(s, 24, &west)) return std::nullopt;
  r.std_offset_ = -west;
  if (s.empty()) return r;
  if (!Abbrev(s, &r.dst_abbrev_)) return std::nullopt;
  r.has_dst_ = true;
  r.dst_offset_ = r.std_offset_ + hours{1};
  if (!s.empty() && s[0] != ',') {
    if (!Time(s, 24, &west)) return std::nullopt;
    r.dst_offset_ = -west;
  }
  // (A daylight time without its rules is left to the zone's listed
  // transitions: POSIX leaves the default to each system.)
  if (s.empty() || s[0] != ',') return std::nullopt;
  s.remove_prefix(1);
  if (!ParseDay(s, &r.start_) || s.empty() || s[0] != ',') return std::nullopt;
  s.remove_prefix(1);
  if (!ParseDay(s, &r.end_) || !s.empty()) return std::nullopt;
  return r;
}

bool TzRule::ParseDay(std::string_view& s, Day* out) {
  if (s.empty()) return false;
  if (s[0] == 'M') {
    s.remove_prefix(1);
    out->kind = Day::Kind::kMonthWeekDay;
    if (!Number(s, 2, &out->month) || out->month < 1 || out->month > 12 ||
        s.empty() || s[0] != '.') {
      return false;
    }
    s.remove_prefix(1);
    if (!Number(s, 1, &out->week) || out->week < 1 || out->week > 5 ||
        s.empty() || s[0] != '.') {
      return false;
    }
    s.remove_prefix(1);
    if (!Number(s, 1, &out->weekday) || out->weekday > 6) return false;
  } else if (s[0] == 'J') {
    s.remove_prefix(1);
    out->kind = Day::Kind::kJulian;
    if (!Number(s, 3, &out->day) || out->day < 1 || out->day > 365) {
      return false;
    }
  } else {
    out->kind = Day::Kind::kZeroBased;
    if (!Number(s, 3, &out->day) || out->day > 365) return false;
  }
  if (!s.empty() && s[0] == '/') {
    s.remove_prefix(1);
    return Time(s, 167, &out->time);
  }
  return true;
}

date::sys_seconds TzRule::At(const Day& day, int y, seconds offset) {
  const date::year year{y};
  date::local_days d;
  switch (day.kind) {
    case Day::Kind::kMonthWeekDay: {
      const date::month m{static_cast<unsigned>(day.month)};
      const date::weekday wd{static_cast<unsigned>(day.weekday)};
      if (day.week == 5) {
        d = date::local_days{year / m / wd[date::last]};
      } else {
        d = date::local_days{year / m / wd[static_cast<unsigned>(day.week)]};
      }
      break;
    }
    case Day::Kind::kJulian:  // 1..365, never counting February 29.
      d = date::local_days{year / 1 / 1} + date::days{day.day - 1} +
          date::days{year.is_leap() && day.day >= 60 ? 1 : 0};
      break;
    case Day::Kind::kZeroBased:  // 0..365, counting February 29.
      d = date::local_days{year / 1 / 1} + date::days{day.day};
      break;
  }
  return date::sys_seconds{d.time_since_epoch() + day.time - offset};
}

date::sys_info TzRule::Period(date::sys_seconds t) const {
  // The transitions of the years around t's, in order: the last at or
  // before t starts its period, the next ends it. (A start's time is in
  // standard time, an end's in daylight time.)
  const int y = static_cast<int>(
      date::year_month_day{date::floor<date::days>(t + std_offset_)}.year());
  std::array<std::pair<date::sys_seconds, bool>, 6> changes;  // (at, to dst)
  for (int i = 0; i < 3; ++i) {
    changes[2 * i] = {At(start_, y - 1 + i, std_offset_), true};
    changes[2 * i + 1] = {At(end_, y - 1 + i, dst_offset_), false};
  }
  std::sort(changes.begin(), changes.end());
  std::size_t next = 0;
  while (next < changes.size() && changes[next].first <= t) ++next;
  date::sys_info info;
  const bool dst = next == 0 ? !changes[0].second : changes[next - 1].second;
  info.begin = next == 0 ? kFarPast : changes[next - 1].first;
  info.end = next == changes.size() ? kFarFuture : changes[next].first;
  info.offset = dst ? dst_offset_ : std_offset_;
  info.save =
      dst ? date::floor<minutes>(dst_offset_ - std_offset_) : minutes{0};
  info.abbrev = dst ? dst_abbrev_ : std_abbrev_;
  return info;
}

date::sys_info TzRule::Info(date::sys_seconds t) const {
  if (!has_dst_) {
    return date::sys_info{kFarPast, kFarFuture, std_offset_, minutes{0},
                          std_abbrev_};
  }
  return Period(t);
}

date::local_info TzRule::Info(date::local_seconds l) const {
  date::local_info out{};
  if (!has_dst_) {
    out.result = date::local_info::unique;
    out.first = Info(date::sys_seconds{l.time_since_epoch() - std_offset_});
    return out;
  }
  // The periods l falls in under either offset; each holds l if l minus
  // its own offset is inside it.
  date::sys_info a =
      Period(date::sys_seconds{l.time_since_epoch() - std_offset_});
  date::sys_info b =
      Period(date::sys_seconds{l.time_since_epoch() - dst_offset_});
  if (b.begin < a.begin) std::swap(a, b);
  const bool in_a = Valid(a, l), in_b = Valid(b, l) && b.begin != a.begin;
  if (in_a && in_b) {
    out.result = date::local_info::ambiguous;
    out.first = a;
    out.second = b;
  } else if (in_a || in_b) {
    out.result = date::local_info::unique;
    out.first = in_a ? a : b;
  } else {
    out.result = date::local_info::nonexistent;
    out.first = a;
    out.second = b;
  }
  return out;
}

}  // namespace delayd
