#include "server/schedule/cron.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace delayd::schedule {
namespace {

using std::chrono::seconds;

constexpr std::string_view kMonthNames[] = {"JAN", "FEB", "MAR", "APR",
                                            "MAY", "JUN", "JUL", "AUG",
                                            "SEP", "OCT", "NOV", "DEC"};
constexpr std::string_view kDayNames[] = {"SUN", "MON", "TUE", "WED",
                                          "THU", "FRI", "SAT"};

enum class Kind { kSecond, kMinute, kHour, kDom, kMonth, kDow };

struct Field {
  Kind kind;
  std::string_view name;
  int min;
  int max;  // day-of-week: 7, read as 0
};

constexpr Field kFields[] = {
    {Kind::kSecond, "second", 0, 59}, {Kind::kMinute, "minute", 0, 59},
    {Kind::kHour, "hour", 0, 23},     {Kind::kDom, "day-of-month", 1, 31},
    {Kind::kMonth, "month", 1, 12},   {Kind::kDow, "day-of-week", 0, 7},
};

struct Macro {
  std::string_view name;
  std::string_view expansion;
};

constexpr Macro kMacros[] = {
    {"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
    {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
    {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

// `s` in single quotes, for an error's text. (Built by appending: GCC 12
// at -O3 warns, falsely, under -Wrestrict about "'" + std::string.)
std::string InQuotes(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '\'';
  out += s;
  out += '\'';
  return out;
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(c));
  return out;
}

// One piece of the expression, with its place in the whole text.
struct Piece {
  std::string_view text;
  std::size_t pos;  // 0-based offset in the expression
};

std::vector<Piece> Split(Piece whole, char sep) {
  std::vector<Piece> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= whole.text.size(); ++i) {
    if (i == whole.text.size() || whole.text[i] == sep) {
      out.push_back({whole.text.substr(start, i - start), whole.pos + start});
      start = i + 1;
    }
  }
  return out;
}

std::vector<Piece> Words(std::string_view text) {
  std::vector<Piece> out;
  std::size_t i = 0;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < text.size() &&
           !std::isspace(static_cast<unsigned char>(text[j]))) {
      ++j;
    }
    out.push_back({text.substr(i, j - i), i});
    i = j;
  }
  return out;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
}

}  // namespace

// Builds a CronExpr field by field; the first error ends the parse.
class CronParser {
 public:
  explicit CronParser(CronExpr* e) : e_(e) {}

  Status Parse(std::string_view text) {
    std::vector<Piece> words = Words(text);
    if (words.size() == 1 && words[0].text.starts_with('@')) {
      const std::string name = Upper(words[0].text);
      for (const Macro& m : kMacros) {
        if (Upper(m.name) == name) return Parse(m.expansion);
      }
      return Status::InvalidArgument(
          "cron: unknown macro '" + std::string(words[0].text) +
          "' at character 1 (known: @yearly @annually @monthly @weekly "
          "@daily @midnight @hourly)");
    }
    if (words.size() != 5 && words.size() != 6) {
      return Status::InvalidArgument(
          "cron: expected 5 fields (minute hour day-of-month month "
          "day-of-week) or 6 (second first), got " +
          std::to_string(words.size()));
    }
    std::size_t first = 0;
    if (words.size() == 5) {
      e_->seconds_.set(0);
      first = 1;
    }
    for (std::size_t i = 0; i < words.size(); ++i) {
      if (Status s = ParseField(kFields[first + i], words[i]); !s.ok()) {
        return s;
      }
    }
    return Status::Ok();
  }

 private:
  static Status Error(const Field& f, std::size_t pos,
                      const std::string& what) {
    return Status::InvalidArgument("cron: " + std::string(f.name) +
                                   " field at character " +
                                   std::to_string(pos + 1) + ": " + what);
  }

  Status ParseField(const Field& f, Piece word) {
    const bool day_field = f.kind == Kind::kDom || f.kind == Kind::kDow;
    const bool any = word.text == "*" || (day_field && word.text == "?");
    if (f.kind == Kind::kDom) e_->dom_restricted_ = !any;
    if (f.kind == Kind::kDow) e_->dow_restricted_ = !any;
    for (const Piece& part : Split(word, ',')) {
      if (Status s = ParsePart(f, part); !s.ok()) return s;
    }
    return Status::Ok();
  }

  Status ParsePart(const Field& f, Piece part) {
    if (part.text.empty()) return Error(f, part.pos, "empty list item");
    const std::string up = Upper(part.text);
    if (f.kind == Kind::kDom && up.starts_with('L'))
      return ParseDomLast(f, part);
    if (f.kind == Kind::kDom && up.size() > 1 && up.ends_with('W')) {
      int day = 0;
      if (Status s =
              Value(f, {part.text.substr(0, up.size() - 1), part.pos}, &day);
          !s.ok()) {
        return s;
      }
      e_->nearest_weekday_.set(day);
      return Status::Ok();
    }
    if (f.kind == Kind::kDow) {
      if (const auto hash = up.find('#'); hash != std::string::npos) {
        return ParseNth(f, part, hash);
      }
      if (up.size() > 1 && up.ends_with('L')) {
        int day = 0;
        if (Status s =
                Value(f, {part.text.substr(0, up.size() - 1), part.pos}, &day);
            !s.ok()) {
          return s;
        }
        e_->last_of_weekday_.set(day % 7);
        return Status::Ok();
      }
    }
    return ParseRange(f, part);
  }

  // `L`, `L-n`, `LW`.
  Status ParseDomLast(const Field& f, Piece part) {
    const std::string up = Upper(part.text);
    if (up == "L") {
      e_->before_last_.set(0);
    } else if (up == "LW") {
      e_->last_weekday_ = true;
    } else if (up.starts_with("L-") && AllDigits(up.substr(2)) &&
               up.size() <= 4 && std::stoi(up.substr(2)) <= 30) {
      e_->before_last_.set(std::stoi(up.substr(2)));
    } else {
      return Error(f, part.pos,
                   InQuotes(part.text) + " is not L, LW or L-n with n 0-30");
    }
    return Status::Ok();
  }

  // `d#k`.
  Status ParseNth(const Field& f, Piece part, std::size_t hash) {
    int day = 0;
    if (Status s = Value(f, {part.text.substr(0, hash), part.pos}, &day);
        !s.ok()) {
      return s;
    }
    const std::string_view k = part.text.substr(hash + 1);
    if (!AllDigits(k) || k.size() > 1 || k[0] < '1' || k[0] > '5') {
      return Error(f, part.pos + hash + 1,
                   InQuotes(k) + " after # must be 1-5");
    }
    e_->nth_weekday_[day % 7].set(k[0] - '1');
    return Status::Ok();
  }

  // `*`, `?`, `v`, `a-b`, each optionally `/step`.
  Status ParseRange(const Field& f, Piece part) {
    std::vector<Piece> slash = Split(part, '/');
    if (slash.size() > 2) return Error(f, slash[2].pos - 1, "a second '/'");
    const Piece range = slash[0];
    int lo = f.min;
    int hi = f.max;
    const bool day_field = f.kind == Kind::kDom || f.kind == Kind::kDow;
    if (range.text == "?" && !day_field) {
      return Error(f, range.pos,
                   "'?' is only for day-of-month and day-of-week");
    }
    if (range.text != "*" && range.text != "?") {
      std::vector<Piece> dash = Split(range, '-');
      if (dash.size() > 2) return Error(f, dash[2].pos - 1, "a second '-'");
      if (Status s = Value(f, dash[0], &lo); !s.ok()) return s;
      hi = lo;
      if (dash.size() == 2) {
        if (Status s = Value(f, dash[1], &hi); !s.ok()) return s;
        if (hi < lo) {
          return Error(f, range.pos,
                       "range " + std::string(range.text) + " runs backwards");
        }
      } else if (slash.size() == 2) {
        hi = f.max;  // `a/n`: from a to the field's end
      }
    }
    int step = 1;
    if (slash.size() == 2) {
      const Piece s = slash[1];
      if (!AllDigits(s.text) || s.text.size() > 3 ||
          std::stoi(std::string(s.text)) < 1 ||
          std::stoi(std::string(s.text)) > f.max) {
        return Error(f, s.pos,
                     "step '" + std::string(s.text) + "' must be 1-" +
                         std::to_string(f.max));
      }
      step = std::stoi(std::string(s.text));
    }
    for (int v = lo; v <= hi; v += step) Set(f, v);
    return Status::Ok();
  }

  // A number in the field's range, or a month or day name.
  Status Value(const Field& f, Piece p, int* out) {
    if (p.text.empty()) return Error(f, p.pos, "missing value");
    if (AllDigits(p.text)) {
      const int v = p.text.size() > 4 ? 100000 : std::stoi(std::string(p.text));
      if (v < f.min || v > f.max) {
        return Error(f, p.pos,
                     "value " + std::string(p.text) + " out of range " +
                         std::to_string(f.min) + "-" + std::to_string(f.max));
      }
      *out = v;
      return Status::Ok();
    }
    const std::string up = Upper(p.text);
    if (f.kind == Kind::kMonth) {
      for (int i = 0; i < 12; ++i) {
        if (kMonthNames[i] == up) {
          *out = i + 1;
          return Status::Ok();
        }
      }
    }
    if (f.kind == Kind::kDow) {
      for (int i = 0; i < 7; ++i) {
        if (kDayNames[i] == up) {
          *out = i;
          return Status::Ok();
        }
      }
    }
    return Error(f, p.pos, InQuotes(p.text) + " is not a value");
  }

  void Set(const Field& f, int v) {
    switch (f.kind) {
      case Kind::kSecond:
        e_->seconds_.set(v);
        break;
      case Kind::kMinute:
        e_->minutes_.set(v);
        break;
      case Kind::kHour:
        e_->hours_.set(v);
        break;
      case Kind::kDom:
        e_->days_.set(v);
        break;
      case Kind::kMonth:
        e_->months_.set(v);
        break;
      case Kind::kDow:
        e_->weekdays_.set(v % 7);
        break;
    }
  }

  CronExpr* e_;
};

Status CronExpr::Parse(std::string_view text, CronExpr* out) {
  CronExpr e;
  if (Status s = CronParser(&e).Parse(text); !s.ok()) return s;
  // Every date repeats within 28 years (from 2001, a span with no skipped
  // leap year): one that matches nothing in them never matches.
  const LocalSeconds from{date::local_days{date::year{2001} / 1 / 1}};
  if (!e.NextMatch(from, from + date::years{28})) {
    return Status::InvalidArgument(
        "cron: the expression matches no date (day-of-month and month never "
        "coincide)");
  }
  *out = e;
  return Status::Ok();
}

std::optional<LocalSeconds> CronExpr::NextMatch(LocalSeconds from,
                                                LocalSeconds limit) const {
  date::local_days day = date::floor<date::days>(from);
  seconds tod = from - day;
  while (day < limit) {
    const date::year_month_day ymd{day};
    if (!months_[static_cast<unsigned>(ymd.month())]) {
      const date::year_month next =
          date::year_month{ymd.year(), ymd.month()} + date::months{1};
      day = date::local_days{next / 1};
      tod = seconds{0};
      continue;
    }
    if (DayMatches(ymd)) {
      if (const auto t = FirstTimeOfDay(tod)) {
        const LocalSeconds at = day + *t;
        if (at < limit) return at;
        return std::nullopt;
      }
    }
    day += date::days{1};
    tod = seconds{0};
  }
  return std::nullopt;
}

bool CronExpr::Matches(LocalSeconds t) const {
  const date::local_days day = date::floor<date::days>(t);
  const date::year_month_day ymd{day};
  if (!months_[static_cast<unsigned>(ymd.month())] || !DayMatches(ymd)) {
    return false;
  }
  const auto tod = FirstTimeOfDay(t - day);
  return tod && *tod == t - day;
}

bool CronExpr::DayMatches(date::year_month_day ymd) const {
  if (dom_restricted_ && dow_restricted_) {
    return DomMatches(ymd) || DowMatches(ymd);
  }
  if (dom_restricted_) return DomMatches(ymd);
  if (dow_restricted_) return DowMatches(ymd);
  return true;
}

namespace {

unsigned LastDay(date::year_month_day ymd) {
  return static_cast<unsigned>(date::year_month_day_last{
      ymd.year(), date::month_day_last{
                      ymd.month()}}.day());
}

unsigned WeekdayOf(date::year y, date::month m, unsigned d) {
  return date::weekday{date::local_days{y / m / date::day{d}}}.c_encoding();
}

}  // namespace

bool CronExpr::DomMatches(date::year_month_day ymd) const {
  const unsigned d = static_cast<unsigned>(ymd.day());
  const unsigned last = LastDay(ymd);
  if (days_[d] || before_last_[last - d]) return true;
  const unsigned wd = WeekdayOf(ymd.year(), ymd.month(), d);
  if (wd == 0 || wd == 6) return false;  // the rest name weekdays only
  if (last_weekday_) {
    const unsigned last_wd = WeekdayOf(ymd.year(), ymd.month(), last);
    const unsigned lw = last_wd == 6   ? last - 1
                        : last_wd == 0 ? last - 2
                                       : last;
    if (d == lw) return true;
  }
  for (unsigned n = 1; n <= last && nearest_weekday_.any(); ++n) {
    if (!nearest_weekday_[n]) continue;
    const unsigned nwd = WeekdayOf(ymd.year(), ymd.month(), n);
    unsigned nearest = n;
    if (nwd == 6) nearest = n == 1 ? n + 2 : n - 1;
    if (nwd == 0) nearest = n == last ? n - 2 : n + 1;
    if (nearest == d) return true;
  }
  return false;
}

bool CronExpr::DowMatches(date::year_month_day ymd) const {
  const unsigned d = static_cast<unsigned>(ymd.day());
  const unsigned wd = WeekdayOf(ymd.year(), ymd.month(), d);
  if (weekdays_[wd]) return true;
  if (last_of_weekday_[wd] && d + 7 > LastDay(ymd)) return true;
  return nth_weekday_[wd][(d - 1) / 7 % 5];
}

std::optional<seconds> CronExpr::FirstTimeOfDay(seconds tod) const {
  const int t = static_cast<int>(tod.count());
  const int h0 = t / 3600;
  const int m0 = t / 60 % 60;
  const int s0 = t % 60;
  for (int h = h0; h < 24; ++h) {
    if (!hours_[h]) continue;
    for (int m = h == h0 ? m0 : 0; m < 60; ++m) {
      if (!minutes_[m]) continue;
      for (int s = h == h0 && m == m0 ? s0 : 0; s < 60; ++s) {
        if (seconds_[s]) return seconds{h * 3600 + m * 60 + s};
      }
    }
  }
  return std::nullopt;
}

}  // namespace delayd::schedule
