#include <date/date.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "server/schedule/spec.h"

namespace delayd::schedule {
namespace {

using namespace std::chrono_literals;

WallNanos At(const std::string& utc) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  EXPECT_EQ(
      std::sscanf(utc.c_str(), "%d-%d-%dT%d:%d:%dZ", &y, &mo, &d, &h, &mi, &s),
      6)
      << utc;
  const date::sys_seconds t = date::sys_days{date::year{y} / mo / d} +
                              std::chrono::hours{h} + std::chrono::minutes{mi} +
                              std::chrono::seconds{s};
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             t.time_since_epoch())
      .count();
}

std::string Text(WallNanos t) {
  return date::format("%Y-%m-%dT%H:%M:%SZ",
                      date::floor<std::chrono::seconds>(
                          date::sys_time<std::chrono::nanoseconds>{
                              std::chrono::nanoseconds{t}}));
}

std::vector<std::string> Texts(const std::vector<WallNanos>& ts) {
  std::vector<std::string> out;
  for (WallNanos t : ts) out.push_back(Text(t));
  return out;
}

using V = std::vector<std::string>;

struct Golden {
  const char* expr;
  const char* zone;
  const char* after;  // UTC
  V next;             // UTC, strictly after `after`
};

// Each row's instants were worked out by hand from the zone's rules (tzdata:
// Europe/Berlin and America/New_York move at 01:00 UTC / 02:00 local on the
// last (EU) or second (US, March) Sunday; Australia/Lord_Howe moves by 30
// minutes).
const Golden kGolden[] = {
    // Spring forward in Berlin, 2026-03-29: 02:30 does not exist and stands
    // for 03:00 CEST, the first instant after the gap.
    {"30 2 * * *",
     "Europe/Berlin",
     "2026-03-28T00:00:00Z",
     {"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
    // Fall back in Berlin, 2026-10-25: 02:30 occurs twice, runs at the first.
    {"30 2 * * *",
     "Europe/Berlin",
     "2026-10-24T00:00:00Z",
     {"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
    // Every half hour through the gap: 02:00, 02:30 and 03:00 all stand for
    // 01:00 UTC, which runs once.
    {"*/30 * * * *",
     "Europe/Berlin",
     "2026-03-29T00:00:00Z",
     {"2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z",
      "2026-03-29T02:00:00Z"}},
    // Every half hour through the overlap: the repeated 02:00 and 02:30 CET
    // (01:00 and 01:30 UTC) do not run again.
    {"*/30 * * * *",
     "Europe/Berlin",
     "2026-10-24T23:45:00Z",
     {"2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z", "2026-10-25T02:00:00Z",
      "2026-10-25T02:30:00Z"}},
    // Asked from inside the repeated hour (02:10 CET).
    {"*/30 * * * *",
     "Europe/Berlin",
     "2026-10-25T01:10:00Z",
     {"2026-10-25T02:00:00Z", "2026-10-25T02:30:00Z"}},
    // New York, 2026-03-08: 02:00 does not exist; 03:00 EDT is 07:00 UTC.
    {"0 2 * * *",
     "America/New_York",
     "2026-03-07T00:00:00Z",
     {"2026-03-07T07:00:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"}},
    // New York, 2026-11-01: 01:30 occurs twice (EDT then EST).
    {"30 1 * * *",
     "America/New_York",
     "2026-10-31T00:00:00Z",
     {"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
    // Lord Howe Island falls back half an hour on 2026-04-05, 02:00 LHDT
    // (+11) to 01:30 LHST (+10:30): 01:45 occurs twice.
    {"45 1 * * *",
     "Australia/Lord_Howe",
     "2026-04-03T00:00:00Z",
     {"2026-04-03T14:45:00Z", "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"}},
    // A zone without daylight saving, half an hour off UTC.
    {"0 9 * * MON-FRI",
     "Asia/Kolkata",
     "2026-01-02T00:00:00Z",
     {"2026-01-02T03:30:00Z", "2026-01-05T03:30:00Z"}},
    // No zone: UTC.
    {"@daily",
     "",
     "2026-12-31T12:00:00Z",
     {"2027-01-01T00:00:00Z", "2027-01-02T00:00:00Z"}},
    // Last day of the month at noon in Sydney (+11 in summer, +10 in winter).
    {"0 12 L * *",
     "Australia/Sydney",
     "2026-01-01T00:00:00Z",
     {"2026-01-31T01:00:00Z", "2026-02-28T01:00:00Z", "2026-03-31T01:00:00Z",
      "2026-04-30T02:00:00Z"}},
    // 2027's changes, five instants each (cross-checked against Python's
    // zoneinfo over the same tzdata).
    {"30 2 * * *",
     "Europe/Berlin",
     "2027-03-26T00:00:00Z",
     {"2027-03-26T01:30:00Z", "2027-03-27T01:30:00Z", "2027-03-28T01:00:00Z",
      "2027-03-29T00:30:00Z", "2027-03-30T00:30:00Z"}},
    {"30 2 * * *",
     "Europe/Berlin",
     "2027-10-29T00:00:00Z",
     {"2027-10-29T00:30:00Z", "2027-10-30T00:30:00Z", "2027-10-31T00:30:00Z",
      "2027-11-01T01:30:00Z", "2027-11-02T01:30:00Z"}},
    {"30 2 * * *",
     "America/New_York",
     "2027-03-12T12:00:00Z",
     {"2027-03-13T07:30:00Z", "2027-03-14T07:00:00Z", "2027-03-15T06:30:00Z",
      "2027-03-16T06:30:00Z", "2027-03-17T06:30:00Z"}},
    {"30 1 * * *",
     "America/New_York",
     "2027-11-05T12:00:00Z",
     {"2027-11-06T05:30:00Z", "2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z",
      "2027-11-09T06:30:00Z", "2027-11-10T06:30:00Z"}},
    // Lord Howe springs forward half an hour on 2026-10-04, 02:00 to 02:30:
    // 02:15 does not exist and stands for 02:30 LHDT.
    {"15 2 * * *",
     "Australia/Lord_Howe",
     "2026-10-02T00:00:00Z",
     {"2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z",
      "2026-10-05T15:15:00Z", "2026-10-06T15:15:00Z"}},
    // Kathmandu, +05:45.
    {"0 9 * * *",
     "Asia/Kathmandu",
     "2026-06-01T00:00:00Z",
     {"2026-06-01T03:15:00Z", "2026-06-02T03:15:00Z", "2026-06-03T03:15:00Z",
      "2026-06-04T03:15:00Z", "2026-06-05T03:15:00Z"}},
    // The 31st skips short months; Feb 29 skips non-leap years.
    {"0 0 31 * *",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2026-01-31T00:00:00Z", "2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z",
      "2026-07-31T00:00:00Z", "2026-08-31T00:00:00Z"}},
    {"0 0 29 2 *",
     "UTC",
     "2026-01-01T00:00:00Z",
     {"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z", "2036-02-29T00:00:00Z",
      "2040-02-29T00:00:00Z", "2044-02-29T00:00:00Z"}},
    // A seconds field.
    {"*/20 * * * * *",
     "UTC",
     "2026-01-01T00:00:19Z",
     {"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z"}},
};

TEST(ScheduleSpec, CronInZonesFollowsTheGoldenTable) {
  for (const Golden& g : kGolden) {
    Spec s;
    const Status st = Spec::Cron(g.expr, g.zone, &s);
    ASSERT_TRUE(st.ok()) << g.expr << ": " << st.message();
    EXPECT_EQ(Texts(s.Preview(At(g.after), g.next.size())), g.next)
        << g.expr << " in " << g.zone << " after " << g.after;
  }
}

TEST(ScheduleSpec, NextIsStrictlyAfterEvenWithinASecond) {
  Spec s;
  ASSERT_TRUE(Spec::Cron("* * * * * *", "UTC", &s).ok());
  const WallNanos t = At("2026-01-01T00:00:00Z");
  EXPECT_EQ(s.Next(t - 1), t);
  EXPECT_EQ(s.Next(t), t + 1'000'000'000);
  EXPECT_EQ(s.Next(t + 999'999'999), t + 1'000'000'000);
}

TEST(ScheduleSpec, NextDependsOnTheSpecAloneSoNothingDrifts) {
  // Asking from any instant between two runs gives the same next run.
  Spec s;
  ASSERT_TRUE(Spec::Cron("0 */7 * * * *", "Europe/Berlin", &s).ok());
  const WallNanos run = *s.Next(At("2026-06-01T10:00:00Z"));
  EXPECT_EQ(Text(run), "2026-06-01T10:07:00Z");
  for (WallNanos t = At("2026-06-01T10:00:00Z"); t < run; t += 13'000'000'001) {
    EXPECT_EQ(s.Next(t), run);
  }
}

TEST(ScheduleSpec, IntervalsIgnoreDaylightSaving) {
  Spec s;
  const WallNanos anchor = At("2026-03-29T00:10:00Z");
  ASSERT_TRUE(Spec::Every(30min, anchor, 1s, &s).ok());
  EXPECT_FALSE(s.is_cron());
  EXPECT_EQ(Texts(s.Preview(At("2026-03-28T00:00:00Z"), 4)),
            (V{"2026-03-29T00:10:00Z", "2026-03-29T00:40:00Z",
               "2026-03-29T01:10:00Z", "2026-03-29T01:40:00Z"}));
  // From inside a period: the grid, not the asking instant plus a period.
  EXPECT_EQ(Text(*s.Next(At("2026-03-29T05:11:00Z"))), "2026-03-29T05:40:00Z");
  EXPECT_EQ(Text(*s.Next(anchor)), "2026-03-29T00:40:00Z");
}

TEST(ScheduleSpec, IntervalUnderTheFloorIsRefused) {
  Spec s;
  const Status st = Spec::Every(500ms, 0, 1s, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("every:"), std::string::npos);
  EXPECT_FALSE(Spec::Every(0s, 0, 0s, &s).ok());
}

TEST(ScheduleSpec, UnknownZoneIsRefusedByName) {
  Spec s;
  const Status st = Spec::Cron("0 9 * * *", "Mars/Olympus_Mons", &s);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("time_zone: unknown time zone "
                              "'Mars/Olympus_Mons'"),
            std::string::npos)
      << st.message();
}

TEST(ScheduleSpec, AZoneNameIsNeverAPath) {
  Spec s;
  EXPECT_FALSE(Spec::Cron("0 9 * * *", "../../../etc/passwd", &s).ok());
  EXPECT_FALSE(Spec::Cron("0 9 * * *", "/usr/share/zoneinfo/UTC", &s).ok());
}

TEST(ScheduleSpec, BadExpressionIsRefusedWithItsPosition) {
  Spec s;
  const Status st = Spec::Cron("0 9 * * MON-FUN", "UTC", &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("day-of-week field at character 13"),
            std::string::npos)
      << st.message();
}

TEST(ScheduleSpec, NothingPastTheLastRepresentableInstant) {
  Spec cron;
  ASSERT_TRUE(Spec::Cron("@yearly", "UTC", &cron).ok());
  EXPECT_FALSE(cron.Next(At("2262-01-01T00:00:00Z")).has_value());
  Spec every;
  ASSERT_TRUE(Spec::Every(std::chrono::hours(24 * 365), 0, 1s, &every).ok());
  EXPECT_FALSE(every.Next(At("2262-04-01T00:00:00Z")).has_value());
  EXPECT_EQ(every.Preview(At("2261-06-01T00:00:00Z"), 5).size(), 1u);
}

}  // namespace
}  // namespace delayd::schedule
