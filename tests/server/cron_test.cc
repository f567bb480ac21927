#include "server/schedule/cron.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace delayd::schedule {
namespace {

LocalSeconds Wall(const std::string& text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  EXPECT_EQ(
      std::sscanf(text.c_str(), "%d-%d-%d %d:%d:%d", &y, &mo, &d, &h, &mi, &s),
      6)
      << text;
  return date::local_days{date::year{y} / mo / d} + std::chrono::hours{h} +
         std::chrono::minutes{mi} + std::chrono::seconds{s};
}

std::string Text(LocalSeconds t) {
  return date::format("%Y-%m-%d %H:%M:%S", t);
}

// The next `n` matches at or after `from`, as text.
std::vector<std::string> Matches(const std::string& expr,
                                 const std::string& from, int n) {
  CronExpr e;
  const Status s = CronExpr::Parse(expr, &e);
  EXPECT_TRUE(s.ok()) << expr << ": " << s.message();
  std::vector<std::string> out;
  LocalSeconds t = Wall(from);
  for (int i = 0; i < n; ++i) {
    const auto m = e.NextMatch(t, t + date::years{30});
    if (!m) break;
    out.push_back(Text(*m));
    t = *m + std::chrono::seconds{1};
  }
  return out;
}

using V = std::vector<std::string>;

TEST(CronExpr, FiveFieldsMatchWholeMinutes) {
  EXPECT_EQ(
      Matches("*/15 9-10 * * *", "2026-01-01 09:50:01", 3),
      (V{"2026-01-01 10:00:00", "2026-01-01 10:15:00", "2026-01-01 10:30:00"}));
}

TEST(CronExpr, SixFieldsPutSecondsFirst) {
  EXPECT_EQ(
      Matches("10,40 * * * * *", "2026-01-01 00:00:20", 3),
      (V{"2026-01-01 00:00:40", "2026-01-01 00:01:10", "2026-01-01 00:01:40"}));
}

TEST(CronExpr, NamesAndRangesOfDaysAndMonths) {
  // Weekdays at 09:00 in January and March; 2026-01-30 is a Friday.
  EXPECT_EQ(
      Matches("0 9 * jan,MAR mon-fri", "2026-01-30 09:00:00", 3),
      (V{"2026-01-30 09:00:00", "2026-03-02 09:00:00", "2026-03-03 09:00:00"}));
}

TEST(CronExpr, SevenIsSundayToo) {
  EXPECT_EQ(Matches("0 0 * * 7", "2026-01-01 00:00:00", 1),
            (V{"2026-01-04 00:00:00"}));
  EXPECT_EQ(Matches("0 0 * * 5-7", "2026-01-03 00:00:01", 2),
            (V{"2026-01-04 00:00:00", "2026-01-09 00:00:00"}));
}

TEST(CronExpr, StepFromAValueRunsToTheFieldsEnd) {
  EXPECT_EQ(
      Matches("0 20/2 * * *", "2026-01-01 00:00:00", 3),
      (V{"2026-01-01 20:00:00", "2026-01-01 22:00:00", "2026-01-02 20:00:00"}));
}

TEST(CronExpr, RestrictedDayOfMonthAndDayOfWeekMatchEither) {
  // The 13th, or any Friday (Vixie cron): 2026-02-06 is a Friday.
  EXPECT_EQ(Matches("0 0 13 * fri", "2026-02-01 00:00:00", 4),
            (V{"2026-02-06 00:00:00", "2026-02-13 00:00:00",
               "2026-02-20 00:00:00", "2026-02-27 00:00:00"}));
  // With `?` only the day of the month decides.
  EXPECT_EQ(Matches("0 0 13 * ?", "2026-02-01 00:00:00", 2),
            (V{"2026-02-13 00:00:00", "2026-03-13 00:00:00"}));
}

TEST(CronExpr, LastDayAndDaysBeforeIt) {
  EXPECT_EQ(
      Matches("0 0 L * *", "2024-01-31 00:00:01", 3),
      (V{"2024-02-29 00:00:00", "2024-03-31 00:00:00", "2024-04-30 00:00:00"}));
  EXPECT_EQ(Matches("0 0 L-2 * *", "2026-02-01 00:00:00", 2),
            (V{"2026-02-26 00:00:00", "2026-03-29 00:00:00"}));
}

TEST(CronExpr, LastWeekdayOfTheMonth) {
  // 2026-01-31 is a Saturday, 2026-05-31 a Sunday.
  EXPECT_EQ(Matches("0 0 LW 1,5 *", "2026-01-01 00:00:00", 2),
            (V{"2026-01-30 00:00:00", "2026-05-29 00:00:00"}));
}

TEST(CronExpr, NearestWeekdayStaysInItsMonth) {
  // 2026-08-01 is a Saturday: the nearest weekday in August is Monday the
  // 3rd. 2026-05-31 is a Sunday: Friday the 29th. 2026-06-15 is a Monday.
  EXPECT_EQ(Matches("0 0 1W 8 *", "2026-01-01 00:00:00", 1),
            (V{"2026-08-03 00:00:00"}));
  EXPECT_EQ(Matches("0 0 31W 5 *", "2026-01-01 00:00:00", 1),
            (V{"2026-05-29 00:00:00"}));
  EXPECT_EQ(Matches("0 0 15W 6 *", "2026-01-01 00:00:00", 1),
            (V{"2026-06-15 00:00:00"}));
  // 2026-02-15 is a Sunday: Monday the 16th.
  EXPECT_EQ(Matches("0 0 15W 2 *", "2026-01-01 00:00:00", 1),
            (V{"2026-02-16 00:00:00"}));
}

TEST(CronExpr, NthAndLastWeekdayOfTheMonth) {
  // Second Tuesday; last Friday.
  EXPECT_EQ(Matches("0 0 * * 2#2", "2026-01-01 00:00:00", 2),
            (V{"2026-01-13 00:00:00", "2026-02-10 00:00:00"}));
  EXPECT_EQ(Matches("0 0 * * FRIL", "2026-01-01 00:00:00", 2),
            (V{"2026-01-30 00:00:00", "2026-02-27 00:00:00"}));
  // A fifth Monday exists in some months only: 2026-03-30, 2026-06-29.
  EXPECT_EQ(Matches("0 0 * * 1#5", "2026-01-01 00:00:00", 2),
            (V{"2026-03-30 00:00:00", "2026-06-29 00:00:00"}));
}

TEST(CronExpr, MacrosExpand) {
  EXPECT_EQ(Matches("@hourly", "2026-01-01 00:00:01", 1),
            (V{"2026-01-01 01:00:00"}));
  EXPECT_EQ(Matches("@weekly", "2026-01-01 00:00:00", 1),
            (V{"2026-01-04 00:00:00"}));
  EXPECT_EQ(Matches("@Yearly", "2026-01-01 00:00:01", 1),
            (V{"2027-01-01 00:00:00"}));
  EXPECT_EQ(Matches("@monthly", "2026-01-01 00:00:01", 1),
            (V{"2026-02-01 00:00:00"}));
}

TEST(CronExpr, LeapDayComesEveryFourYears) {
  EXPECT_EQ(Matches("0 0 29 2 *", "2024-03-01 00:00:00", 2),
            (V{"2028-02-29 00:00:00", "2032-02-29 00:00:00"}));
}

TEST(CronExpr, MatchesAgreesWithNextMatch) {
  CronExpr e;
  ASSERT_TRUE(CronExpr::Parse("30 */5 8-17 * * MON-FRI", &e).ok());
  EXPECT_TRUE(e.Matches(Wall("2026-01-05 08:05:30")));
  EXPECT_FALSE(e.Matches(Wall("2026-01-05 08:05:31")));
  EXPECT_FALSE(e.Matches(Wall("2026-01-04 08:05:30")));  // a Sunday
  EXPECT_FALSE(e.Matches(Wall("2026-01-05 18:05:30")));
}

// The error for `expr` names `field` at 1-based character `position`.
void ExpectError(const std::string& expr, const std::string& field,
                 int position) {
  CronExpr e;
  const Status s = CronExpr::Parse(expr, &e);
  ASSERT_FALSE(s.ok()) << expr;
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find(field + " field at character " +
                             std::to_string(position) + ":"),
            std::string::npos)
      << expr << " -> " << s.message();
}

TEST(CronExpr, BadFieldsNameTheFieldAndPosition) {
  ExpectError("61 * * * *", "minute", 1);
  ExpectError("0 24 * * *", "hour", 3);
  ExpectError("0 0 0 * *", "day-of-month", 5);
  ExpectError("0 0 1 13 *", "month", 7);
  ExpectError("0 0 1 FOO *", "month", 7);
  ExpectError("0 0 * * 8", "day-of-week", 9);
  ExpectError("0 0 * * MON-FOO", "day-of-week", 13);
  ExpectError("0 0 1,,2 * *", "day-of-month", 7);
  ExpectError("*/0 * * * *", "minute", 3);
  ExpectError("0 10-2 * * *", "hour", 3);
  ExpectError("0 ? * * *", "hour", 3);
  ExpectError("0 0 L-31 * *", "day-of-month", 5);
  ExpectError("0 0 * * 1#6", "day-of-week", 11);
  ExpectError("0 0 * * 1#", "day-of-week", 11);
  ExpectError("60 0 0 * * *", "second", 1);
  ExpectError("0 0 1/2/3 * *", "day-of-month", 8);
  ExpectError("0 0 32W * *", "day-of-month", 5);
  ExpectError("0 0 * * 99999999999", "day-of-week", 9);
}

TEST(CronExpr, WrongShapesAreRefused) {
  CronExpr e;
  EXPECT_FALSE(CronExpr::Parse("", &e).ok());
  EXPECT_FALSE(CronExpr::Parse("* * * *", &e).ok());
  EXPECT_FALSE(CronExpr::Parse("* * * * * * *", &e).ok());
  const Status s = CronExpr::Parse("@fortnightly", &e);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown macro"), std::string::npos);
}

TEST(CronExpr, AnExpressionThatMatchesNoDateIsRefused) {
  CronExpr e;
  const Status s = CronExpr::Parse("0 0 30 2 *", &e);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("matches no date"), std::string::npos);
  EXPECT_TRUE(CronExpr::Parse("0 0 31 1,2 *", &e).ok());
}

TEST(CronExpr, ARefusedParseLeavesTheOutputAsItWas) {
  CronExpr e;
  ASSERT_TRUE(CronExpr::Parse("0 12 * * *", &e).ok());
  EXPECT_FALSE(CronExpr::Parse("0 99 * * *", &e).ok());
  EXPECT_TRUE(e.Matches(Wall("2026-01-01 12:00:00")));
}

}  // namespace
}  // namespace delayd::schedule
