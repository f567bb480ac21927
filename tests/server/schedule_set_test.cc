#include "server/core/schedule_set.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <utility>

#include "tests/server/random_schedule.h"

namespace delayd {
namespace {

void ExpectSame(const ScheduleRecord& want, const ScheduleRecord& got,
                int step) {
  EXPECT_TRUE(want == got) << "step " << step;
}

// Random adds, state changes and removals against a map of records: every
// record reads back whole, and listing gives the map's order.
TEST(ScheduleSet, MatchesAReferenceMapUnderRandomChurn) {
  std::mt19937_64 rng(7);
  ScheduleSet set;
  std::map<std::pair<NamespaceId, std::string>, ScheduleRecord> want;
  for (int step = 0; step < 20000; ++step) {
    const NamespaceId ns = static_cast<NamespaceId>(rng() % 3);
    const std::string key = "k" + std::to_string(rng() % 500);
    const std::uint32_t id = set.Find(ns, key);
    auto it = want.find({ns, key});
    ASSERT_EQ(id == ScheduleSet::kNone, it == want.end()) << "step " << step;
    switch (rng() % 3) {
      case 0: {  // set (or replace)
        if (id != ScheduleSet::kNone) set.Remove(id);
        const ScheduleRecord r = RandomRecord(rng);
        std::uint32_t added = 0;
        ASSERT_TRUE(set.Add(ns, key, r, &added).ok());
        EXPECT_EQ(set.key(added), key);
        EXPECT_EQ(set.payload(added), r.payload);
        want[{ns, key}] = r;
        break;
      }
      case 1:  // a wake-up's new state
        if (id != ScheduleSet::kNone) {
          const schedule::State s = RandomRecord(rng).state;
          set.SetState(id, s);
          it->second.state = s;
          ExpectSame(it->second, set.Load(id).rec, step);
          EXPECT_EQ(set.holds_run(id), s.buffered.has_value());
        }
        break;
      default:
        if (id != ScheduleSet::kNone) {
          ExpectSame(it->second, set.Load(id).rec, step);
          set.Remove(id);
          want.erase(it);
        }
    }
  }
  ASSERT_EQ(set.size(), want.size());
  for (NamespaceId ns = 0; ns < 3; ++ns) {
    std::vector<std::string> listed;
    set.List(ns, "", "", SIZE_MAX, &listed);
    std::vector<std::string> expected;
    for (const auto& [k, r] : want) {
      if (k.first == ns) expected.push_back(k.second);
      if (k.first == ns)
        ExpectSame(r, set.Load(set.Find(ns, k.second)).rec, -1);
    }
    EXPECT_EQ(listed, expected);
  }
}

TEST(ScheduleSet, ListsInKeyOrderFromAfterWithinAPrefix) {
  ScheduleSet set;
  ScheduleRecord r;
  r.every = 1'000'000'000;
  std::uint32_t id = 0;
  for (const char* key : {"b2", "a1", "b1", "c1", "b3"}) {
    ASSERT_TRUE(set.Add(1, key, r, &id).ok());
  }
  ASSERT_TRUE(set.Add(2, "b0", r, &id).ok());  // another namespace
  std::vector<std::string> keys;
  set.List(1, "b", "", 10, &keys);
  EXPECT_EQ(keys, (std::vector<std::string>{"b1", "b2", "b3"}));
  keys.clear();
  set.List(1, "b", "b1", 1, &keys);
  EXPECT_EQ(keys, std::vector<std::string>{"b2"});
  keys.clear();
  set.List(1, "", "b3", 10, &keys);
  EXPECT_EQ(keys, std::vector<std::string>{"c1"});
}

// A million schedules of a few expressions hold a few parsed specs; the
// last schedule of an expression frees it; an expression that does not
// parse adds nothing.
TEST(ScheduleSet, SharesEachParsedCronSpecWhileItIsUsed) {
  ScheduleSet set;
  ScheduleRecord a, b;
  a.cron = b.cron = "0 9 * * 1-5";
  a.zone = "Europe/Berlin";
  b.zone = "Asia/Kathmandu";
  std::uint32_t a1, a2, b1;
  ASSERT_TRUE(set.Add(0, "a1", a, &a1).ok());
  ASSERT_TRUE(set.Add(0, "a2", a, &a2).ok());
  ASSERT_TRUE(set.Add(0, "b1", b, &b1).ok());
  EXPECT_EQ(set.shared_specs(), 2u);
  EXPECT_EQ(&set.Load(a1).spec(), &set.Load(a2).spec());
  EXPECT_EQ(set.Load(b1).spec().zone_name(), "Asia/Kathmandu");
  set.Remove(a1);
  EXPECT_EQ(set.shared_specs(), 2u);
  set.Remove(a2);
  EXPECT_EQ(set.shared_specs(), 1u);
  ScheduleRecord bad;
  bad.cron = "0 25 * * *";
  std::uint32_t id;
  EXPECT_FALSE(set.Add(0, "bad", bad, &id).ok());
  EXPECT_EQ(set.Find(0, "bad"), ScheduleSet::kNone);
  EXPECT_EQ(set.size(), 1u);
  EXPECT_EQ(set.shared_specs(), 1u);
}

}  // namespace
}  // namespace delayd
