// The pusher's thread (push/pusher.h) sleeps while nothing is in flight,
// and a request queued then still goes out at once.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "server/core/scheduler.h"
#include "server/push/pusher.h"
#include "tests/common/thread_names.h"

namespace delayd::testing {
namespace {

using std::chrono_literals::operator""s;
using std::chrono_literals::operator""ms;

TEST(IdlePusher, SleepsUntilARequestIsQueuedAndThenSendsIt) {
  Scheduler::Options o;
  o.partitions = 1;
  Scheduler scheduler(o);
  ASSERT_TRUE(scheduler.Start().ok());
  push::PushOptions options;
  ASSERT_TRUE(push::AddressRules::Parse({}, &options.rules).ok());
  push::Pusher pusher(scheduler, options);
  pusher.Start();

  // Nothing to push: after starting, the thread sleeps (an idle daemon's
  // pusher does not wake once a second).
  const long seen = WaitUntilAsleep("delayd-push", 2500ms, 15s);
  ASSERT_GE(seen, 0) << "an idle pusher kept waking (or has no thread "
                        "named delayd-push)";

  // A test request wakes it. The default rules refuse loopback, so the
  // request is answered without a connection, and at once.
  std::promise<push::Verdict> verdict;
  PushTarget target;
  target.url = "https://127.0.0.1:9/hook";
  const auto asked = std::chrono::steady_clock::now();
  pusher.Test("default", target, "k", "p",
              [&](Status s, const push::Verdict& v, std::chrono::nanoseconds) {
                EXPECT_TRUE(s.ok()) << s.message();
                verdict.set_value(v);
              });
  auto answered = verdict.get_future();
  ASSERT_EQ(answered.wait_for(10s), std::future_status::ready)
      << "a request queued to a sleeping pusher was not sent";
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 900ms)
      << "it went out at the pusher's next timed wake, not when queued";
  const push::Verdict v = answered.get();
  EXPECT_FALSE(v.answered);
  EXPECT_NE(v.error.find("loopback"), std::string::npos) << v.error;

  pusher.Stop();
  scheduler.Stop();
}

}  // namespace
}  // namespace delayd::testing
