#include "server/core/schedule_record.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "server/common/record_codec.h"
#include "tests/server/random_schedule.h"

namespace delayd {
namespace {

// Format 1 as stores written before format 2 hold it, laid out here field by
// field (schedule_record.cc states the layout).
std::string FormatOne(const ScheduleRecord& r) {
  auto string = [](std::string& out, const std::string& s) {
    record::AppendRaw(out, static_cast<std::uint32_t>(s.size()));
    out.append(s);
  };
  std::string out;
  record::AppendRaw(out, std::uint8_t{1});
  std::uint8_t flags = 0;
  if (r.start) flags |= 1;
  if (r.end) flags |= 2;
  if (r.state.paused) flags |= 4;
  if (r.state.finished) flags |= 8;
  if (r.state.buffered) flags |= 16;
  record::AppendRaw(out, flags);
  string(out, r.cron);
  string(out, r.zone);
  for (std::int64_t v :
       {r.every, r.anchor, r.start.value_or(0), r.end.value_or(0)}) {
    record::AppendRaw(out, v);
  }
  record::AppendRaw(out, r.max_runs);
  record::AppendRaw(out, r.jitter);
  record::AppendRaw(out, static_cast<std::uint8_t>(r.catch_up));
  record::AppendRaw(out, r.catch_up_limit);
  record::AppendRaw(out, static_cast<std::uint8_t>(r.overlap));
  record::AppendRaw(out, r.version);
  record::AppendRaw(out, r.created_at);
  record::AppendRaw(out, r.state.last_instant);
  record::AppendRaw(out, r.state.runs);
  record::AppendRaw(out, r.state.buffered.value_or(0));
  string(out, r.payload);
  return out;
}

ScheduleRecord Typical() {
  ScheduleRecord r;
  r.cron = "0 9 * * 1-5";
  r.zone = "Europe/Berlin";
  r.payload = "order-42-cancel!";
  r.version = 123456;
  r.created_at = 1'795'000'000'000'000'000;
  return r;
}

TEST(ScheduleRecord, RoundTripsEveryField) {
  std::mt19937_64 rng(11);
  ScheduleRecord back;
  for (int i = 0; i < 5000; ++i) {
    ScheduleRecord r = RandomRecord(rng);
    if (i % 7 == 0) r.state.last_instant = r.state.runs = 0;
    ASSERT_TRUE(DecodeSchedule(EncodeSchedule(r), &back)) << i;
    ASSERT_TRUE(back == r) << i;
  }
}

TEST(ScheduleRecord, ReadsFormatOne) {
  std::mt19937_64 rng(12);
  ScheduleRecord back;
  for (int i = 0; i < 2000; ++i) {
    const ScheduleRecord r = RandomRecord(rng);
    ASSERT_TRUE(DecodeSchedule(FormatOne(r), &back)) << i;
    ASSERT_TRUE(back == r) << i;
    // Written again, it is format 2, and the same schedule.
    ASSERT_EQ(EncodeSchedule(back)[0], 2);
  }
}

TEST(ScheduleRecord, KeepsOnlyWhatIsSet) {
  ScheduleRecord r = Typical();
  // Format 2: 1 format, 2 flags, 12 cron, 14 zone, 3 version, 8 created at,
  // and the payload.
  EXPECT_EQ(EncodeSchedule(r).size(), 40u + r.payload.size());
  EXPECT_EQ(FormatOne(r).size(),
            108u + r.cron.size() + r.zone.size() + r.payload.size());
}

TEST(ScheduleRecord, RefusesWhatIsNotOne) {
  std::mt19937_64 rng(13);
  ScheduleRecord back;
  for (int i = 0; i < 200; ++i) {
    ScheduleRecord r = RandomRecord(rng);
    r.payload.clear();  // (the payload runs to the end in format 2)
    for (const std::string& bytes : {EncodeSchedule(r), FormatOne(r)}) {
      for (std::size_t n = 0; n < bytes.size(); ++n) {
        ASSERT_FALSE(DecodeSchedule(bytes.substr(0, n), &back))
            << i << " cut at " << n << " of format " << int{bytes[0]};
      }
    }
  }
  const std::string good = EncodeSchedule(Typical());
  ASSERT_TRUE(DecodeSchedule(good, &back));
  for (char format : {'\0', '\3', '\xff'}) {
    std::string bad = good;
    bad[0] = format;
    EXPECT_FALSE(DecodeSchedule(bad, &back)) << int{format};
  }
  // Typical()'s flags are catch-up kLatest (1 << 9), two varint bytes; a
  // flag no format has, and catch-up 3 (none, latest and all are 0 to 2).
  ASSERT_EQ(good.substr(1, 2), std::string("\x80\x04"));
  for (const char* flags : {"\x80\x44", "\x80\x0c"}) {
    std::string bad = good;
    bad.replace(1, 2, flags);
    EXPECT_FALSE(DecodeSchedule(bad, &back)) << flags;
  }
  // Both a cron expression and an interval, or neither.
  ScheduleRecord neither = Typical();
  neither.cron.clear();
  EXPECT_FALSE(DecodeSchedule(EncodeSchedule(neither), &back));
  EXPECT_FALSE(DecodeSchedule(FormatOne(neither), &back));
}

}  // namespace
}  // namespace delayd
