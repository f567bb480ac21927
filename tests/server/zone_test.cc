// Time zones past the transitions their files list: every zone of the
// system's tz database agrees with glibc's reading of the same files (the
// system's zone rules, footers included) at every transition and between
// them, 2038 to 2100; cron instants there are at the wall time they name.
#include "delayd/text/zone.h"

#include <gtest/gtest.h>
#include <time.h>

#include <cstdlib>
#include <random>
#include <string>

#include "delayd/text/tz_rule.h"
#include "server/schedule/spec.h"

namespace delayd {
namespace {

using std::chrono::seconds;

constexpr date::sys_seconds kFrom{date::sys_days{date::year{2038} / 1 / 1}};
constexpr date::sys_seconds kTo{date::sys_days{date::year{2101} / 1 / 1}};

// glibc's offset east of UTC at `t` in the zone TZ names (Use()).
class Glibc {
 public:
  explicit Glibc(const std::string& zone) {
    const char* old = getenv("TZ");
    if (old != nullptr) old_ = old;
    had_ = old != nullptr;
    setenv("TZ", (":" + zone).c_str(), 1);
    tzset();
  }
  ~Glibc() {
    if (had_) {
      setenv("TZ", old_.c_str(), 1);
    } else {
      unsetenv("TZ");
    }
    tzset();
  }
  static seconds Offset(date::sys_seconds t) {
    const time_t at = t.time_since_epoch().count();
    tm out{};
    localtime_r(&at, &out);
    return seconds{out.tm_gmtoff};
  }
  // The instant of wall time `l`, as mktime resolves it.
  static date::sys_seconds Instant(date::local_seconds l) {
    const auto day = date::floor<date::days>(l);
    const date::year_month_day ymd{day};
    const date::hh_mm_ss<seconds> hms{l - day};
    tm in{};
    in.tm_year = static_cast<int>(ymd.year()) - 1900;
    in.tm_mon = static_cast<int>(static_cast<unsigned>(ymd.month())) - 1;
    in.tm_mday = static_cast<int>(static_cast<unsigned>(ymd.day()));
    in.tm_hour = static_cast<int>(hms.hours().count());
    in.tm_min = static_cast<int>(hms.minutes().count());
    in.tm_isdst = -1;
    return date::sys_seconds{seconds{mktime(&in)}};
  }

 private:
  std::string old_;
  bool had_ = false;
};

// The zones of the tz database that observe daylight saving in 2050, as
// glibc says.
std::vector<std::string> ZonesWithDaylightSaving() {
  std::vector<std::string> names;
  for (const auto& z : date::get_tzdb().zones) {
    Glibc glibc(std::string(z.name()));
    const date::sys_seconds jan{date::sys_days{date::year{2050} / 1 / 15}};
    const date::sys_seconds jul{date::sys_days{date::year{2050} / 7 / 15}};
    if (Glibc::Offset(jan) != Glibc::Offset(jul)) {
      names.push_back(std::string(z.name()));
    }
  }
  return names;
}

TEST(Zone, AgreesWithTheSystemsRulesAtEveryTransitionFrom2038To2100) {
  const auto names = ZonesWithDaylightSaving();
  // (Debian 12's tzdata: about 200 zones observe daylight saving then.)
  ASSERT_GT(names.size(), 100u);
  std::mt19937_64 rng(7);
  std::size_t transitions = 0, wrong = 0;
  for (const std::string& name : names) {
    std::string error;
    const Zone* zone = Zone::Find(name, &error);
    Glibc glibc(name);
    // Each period from 2038 on: its offset holds at its first and last
    // second and in its middle, and differs just before it.
    for (date::sys_seconds t = kFrom; t < kTo;) {
      const date::sys_info info = zone->Info(t);
      ASSERT_GT(info.end, t) << name;
      const date::sys_seconds last = std::min(info.end, kTo) - seconds{1};
      for (const date::sys_seconds at :
           {std::max(info.begin, kFrom), last, t + (last - t) / 2}) {
        if (Glibc::Offset(at) != info.offset && wrong++ < 10) {
          ADD_FAILURE() << name << " at " << date::format("%F %T", at)
                        << "Z: " << info.offset.count() << " s, glibc "
                        << Glibc::Offset(at).count();
        }
      }
      if (info.begin >= kFrom) {
        ++transitions;
        EXPECT_NE(Glibc::Offset(info.begin - seconds{1}), info.offset)
            << name << " has no transition at "
            << date::format("%F %T", info.begin);
      }
      t = info.end;
    }
    // And at random instants.
    for (int i = 0; i < 100; ++i) {
      const date::sys_seconds at =
          kFrom +
          seconds{static_cast<std::int64_t>(
              rng() % static_cast<std::uint64_t>((kTo - kFrom).count()))};
      if (Glibc::Offset(at) != zone->Info(at).offset && wrong++ < 10) {
        ADD_FAILURE() << name << " at " << date::format("%F %T", at);
      }
    }
  }
  EXPECT_EQ(wrong, 0u);
  // Two a year in each zone.
  EXPECT_GT(transitions, names.size() * 2 * 60);
}

TEST(Zone, CronInstantsAreAtTheirWallTimeFrom2038On) {
  // The example the defect was found by: noon in Berlin in July 2038 is
  // 10:00 UTC (CEST), not 11:00.
  schedule::Spec noon;
  ASSERT_TRUE(schedule::Spec::Cron("0 12 * * *", "Europe/Berlin", &noon).ok());
  const auto after = date::sys_days{date::year{2038} / 7 / 1};
  const auto next =
      noon.Next(std::chrono::duration_cast<std::chrono::nanoseconds>(
                    after.time_since_epoch())
                    .count());
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next / 1'000'000'000,
            (date::sys_seconds{after} + std::chrono::hours{10})
                .time_since_epoch()
                .count());
  // In every zone with daylight saving, noon on the 1st and 15th of each
  // month of 2038-2040 and 2099 is where glibc puts it.
  std::size_t checked = 0;
  for (const std::string& name : ZonesWithDaylightSaving()) {
    schedule::Spec spec;
    ASSERT_TRUE(schedule::Spec::Cron("0 12 1,15 * *", name, &spec).ok());
    Glibc glibc(name);
    for (const int year : {2038, 2039, 2040, 2099}) {
      const date::sys_seconds start{date::sys_days{date::year{year} / 1 / 1}};
      WallNanos from = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           start.time_since_epoch() - std::chrono::hours{24})
                           .count();
      for (const WallNanos at : spec.Preview(from, 24)) {
        const date::sys_seconds instant{seconds{at / 1'000'000'000}};
        const auto wall = date::local_seconds{instant.time_since_epoch() +
                                              Glibc::Offset(instant)};
        EXPECT_EQ(date::format("%T", wall), "12:00:00")
            << name << " " << date::format("%F %T", instant) << "Z";
        EXPECT_EQ(Glibc::Instant(wall), instant) << name;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 10000u);
}

TEST(TzRule, ReadsEveryFormOfAPosixRule) {
  // Transition hours out of 0..24 (RFC 8536): Greenland's.
  auto nuuk = TzRule::Parse("<-02>2<-01>,M3.5.0/-1,M10.5.0/0");
  ASSERT_TRUE(nuuk.has_value());
  // 2050: the last Sunday of March is the 27th; -1:00 is 23:00 on the 26th,
  // local standard time (-02): 01:00 UTC on the 27th.
  const auto info = nuuk->Info(date::sys_seconds{
      date::sys_days{date::year{2050} / 3 / 27} + std::chrono::hours{1}});
  EXPECT_EQ(info.offset, std::chrono::hours{-1});
  EXPECT_EQ(info.begin,
            date::sys_seconds{date::sys_days{date::year{2050} / 3 / 27} +
                              std::chrono::hours{1}});
  EXPECT_EQ(info.abbrev, "-01");
  // Julian days (never counting February 29) and zero-based days.
  auto julian = TzRule::Parse("AAA3BBB,J60/0,J300/0");  // March 1 each year
  ASSERT_TRUE(julian.has_value());
  EXPECT_EQ(
      julian
          ->Info(date::sys_seconds{date::sys_days{date::year{2048} / 3 / 1} +
                                   std::chrono::hours{3}})
          .begin,
      date::sys_seconds{date::sys_days{date::year{2048} / 3 / 1} +
                        std::chrono::hours{3}});
  auto zero = TzRule::Parse("AAA3BBB,59/0,299/0");  // Feb 29 in leap years
  ASSERT_TRUE(zero.has_value());
  EXPECT_EQ(
      zero->Info(date::sys_seconds{date::sys_days{date::year{2048} / 2 / 29} +
                                   std::chrono::hours{3}})
          .begin,
      date::sys_seconds{date::sys_days{date::year{2048} / 2 / 29} +
                        std::chrono::hours{3}});
  // Southern hemisphere: daylight time across the new year.
  auto santiago = TzRule::Parse("<-04>4<-03>,M9.1.6/24,M4.1.6/24");
  ASSERT_TRUE(santiago.has_value());
  EXPECT_EQ(
      santiago
          ->Info(date::sys_seconds{date::sys_days{date::year{2050} / 1 / 1}})
          .offset,
      std::chrono::hours{-3});
  // A gap and an overlap in local time.
  auto berlin = TzRule::Parse("CET-1CEST,M3.5.0,M10.5.0/3");
  ASSERT_TRUE(berlin.has_value());
  const date::local_days spring{date::year{2050} / 3 / 27};
  EXPECT_EQ(berlin->Info(spring + std::chrono::minutes{150}).result,
            date::local_info::nonexistent);
  const date::local_days fall{date::year{2050} / 10 / 30};
  EXPECT_EQ(berlin->Info(fall + std::chrono::minutes{150}).result,
            date::local_info::ambiguous);
  EXPECT_EQ(berlin->Info(fall + std::chrono::hours{12}).result,
            date::local_info::unique);
  // Not rules.
  for (const char* bad :
       {"", "C", "CET", "CET-1CEST", "CET-1CEST,M3.5.0",
        "CET-1CEST,M13.5.0,M10.5.0", "CET-1CEST,M3.6.0,M10.5.0",
        "CET-1CEST,M3.5.0,M10.5.0/168", "<CET-1", "CET-25"}) {
    EXPECT_FALSE(TzRule::Parse(bad).has_value()) << bad;
  }
  EXPECT_TRUE(TzRule::Parse("UTC0").has_value());
}

}  // namespace
}  // namespace delayd
