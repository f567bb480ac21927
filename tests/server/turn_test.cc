// Turns (server/core/turn.h): what a turn defers runs when its outermost
// turn closes, in order, on its thread; outside a turn nothing is deferred.
#include "server/core/turn.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace delayd {
namespace {

TEST(Turn, DeferredWorkRunsWhenTheOutermostTurnCloses) {
  std::string ran;
  EXPECT_FALSE(Turn::Open());
  {
    Turn outer;
    EXPECT_TRUE(Turn::Open());
    Turn::Defer([&] { ran += "a"; });
    {
      Turn inner;
      Turn::Defer([&] { ran += "b"; });
    }
    EXPECT_EQ(ran, "") << "ran before the outermost turn closed";
    EXPECT_TRUE(Turn::Open());
  }
  EXPECT_EQ(ran, "ab");
  EXPECT_FALSE(Turn::Open());
}

TEST(Turn, WorkDeferredByDeferredWorkRunsInTheSameTurn) {
  std::string ran;
  {
    Turn turn;
    Turn::Defer([&] {
      ran += "a";
      Turn::Defer([&] { ran += "c"; });
    });
    Turn::Defer([&] { ran += "b"; });
  }
  EXPECT_EQ(ran, "abc");
  // A turn after it starts with nothing deferred.
  { Turn again; }
  EXPECT_EQ(ran, "abc");
}

TEST(Turn, ATurnBelongsToItsThread) {
  Turn turn;
  bool open_elsewhere = true;
  std::thread([&] { open_elsewhere = Turn::Open(); }).join();
  EXPECT_FALSE(open_elsewhere);
}

}  // namespace
}  // namespace delayd
