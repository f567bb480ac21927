// Failed deliveries: Nack (with a time or the backoff), an ack timeout
// counting as a failure, ExtendLease postponing it. Checked against a
// daemon on loopback: an event never comes back before its retry time, and
// does come back (within a bounded wait).
#include <gtest/gtest.h>

#include "server/common/retry.h"
#include "tests/server/calls.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

TEST(Backoff, DoublesFromOneSecondUpToTenMinutes) {
  const RetryPolicy p;
  EXPECT_EQ(Backoff(p, 0), 1s);
  EXPECT_EQ(Backoff(p, 1), 1s);
  EXPECT_EQ(Backoff(p, 2), 2s);
  EXPECT_EQ(Backoff(p, 3), 4s);
  EXPECT_EQ(Backoff(p, 10), 512s);
  EXPECT_EQ(Backoff(p, 11), 10min);
  EXPECT_EQ(Backoff(p, 4'000'000'000u), 10min);
  RetryPolicy flat;
  flat.multiplier = 1.0;
  flat.initial_backoff = 250ms;
  EXPECT_EQ(Backoff(flat, 7), 250ms);
}

class LeaseTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(d_.started()); }

  void Set(const std::string& key) {
    ASSERT_TRUE(testing::Set(d_.stub(), "jobs", key, 0).ok());
  }
  // Nacks `ids`; `retry_after_ms` < 0: no time (the backoff).
  v1::NackResponse Nack(std::vector<std::uint64_t> ids,
                        std::int64_t retry_after_ms,
                        grpc::StatusCode want = grpc::StatusCode::OK) {
    v1::NackRequest req;
    req.set_namespace_("jobs");
    for (auto id : ids) req.add_event_ids(id);
    if (retry_after_ms >= 0)
      *req.mutable_retry_after() = Millis(retry_after_ms);
    v1::NackResponse resp;
    grpc::ClientContext ctx;
    EXPECT_EQ(d_.stub().Nack(&ctx, req, &resp).error_code(), want);
    return resp;
  }
  v1::ExtendLeaseResponse Extend(std::vector<std::uint64_t> ids,
                                 std::int64_t extension_ms,
                                 grpc::StatusCode want = grpc::StatusCode::OK) {
    v1::ExtendLeaseRequest req;
    req.set_namespace_("jobs");
    for (auto id : ids) req.add_event_ids(id);
    *req.mutable_extension() = Millis(extension_ms);
    v1::ExtendLeaseResponse resp;
    grpc::ClientContext ctx;
    EXPECT_EQ(d_.stub().ExtendLease(&ctx, req, &resp).error_code(), want);
    return resp;
  }
  v1::NamespaceStats Stats() { return NamespaceStats(d_.stub(), "jobs"); }

  TestDaemon d_{TestDaemon::DefaultOptions()};
};

TEST_F(LeaseTest, NackedEventComesBackAfterItsRetryTimeNeverBefore) {
  TestStream worker(d_.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(worker.WaitRegistered());
  Set("k");
  auto first = worker.WaitFor(1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].attempt(), 1u);
  const WallNanos nacked_at = WallNow();
  auto r = Nack({first[0].id()}, 300);
  EXPECT_EQ(r.nacked(), 1u);
  EXPECT_EQ(r.unknown_ids_size(), 0);
  auto both = worker.WaitFor(2, 10'000ms);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].id(), first[0].id());
  EXPECT_EQ(both[1].attempt(), 2u);
  EXPECT_GE(worker.ReceivedAt()[1] - nacked_at, 300'000'000);
  const auto s = Stats();
  EXPECT_EQ(s.events_redelivered(), 1u);
  EXPECT_EQ(s.in_flight_events(), 1u);
  EXPECT_EQ(s.retrying_events(), 0u);
}

TEST_F(LeaseTest, NackWithoutATimeWaitsTheBackoffOfItsAttempt) {
  TestStream worker(d_.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(worker.WaitRegistered());
  Set("k");
  auto first = worker.WaitFor(1);
  ASSERT_EQ(first.size(), 1u);
  const WallNanos nacked_at = WallNow();
  EXPECT_EQ(Nack({first[0].id()}, -1).nacked(), 1u);
  auto both = worker.WaitFor(2, 10'000ms);
  ASSERT_EQ(both.size(), 2u);
  // Attempt 1 failed: 1 s.
  EXPECT_GE(worker.ReceivedAt()[1] - nacked_at, 1'000'000'000);
}

TEST_F(LeaseTest, RetryingEventIsCountedAndCanStillBeAcked) {
  TestStream worker(d_.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(worker.WaitRegistered());
  Set("k");
  auto first = worker.WaitFor(1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(Nack({first[0].id()}, 3'600'000).nacked(), 1u);
  auto s = Stats();
  EXPECT_EQ(s.retrying_events(), 1u);
  EXPECT_EQ(s.in_flight_events(), 0u);
  EXPECT_EQ(s.ready_events(), 0u);
  // Not in flight any more: a second Nack or an ExtendLease finds nothing.
  EXPECT_EQ(Nack({first[0].id()}, 0).unknown_ids_size(), 1);
  EXPECT_EQ(Extend({first[0].id()}, 1000).unknown_ids_size(), 1);
  v1::AckRequest ack;
  ack.set_namespace_("jobs");
  ack.add_event_ids(first[0].id());
  v1::AckResponse acked;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d_.stub().Ack(&ctx, ack, &acked).ok());
  EXPECT_EQ(acked.acked(), 1u);
  s = Stats();
  EXPECT_EQ(s.retrying_events(), 0u);
  EXPECT_EQ(s.events_acked(), 1u);
}

TEST_F(LeaseTest, AckTimeoutIsAFailureThatWaitsTheBackoff) {
  TestStream worker(d_.stub(), TestStream::Worker("jobs", 100, 100));
  ASSERT_TRUE(worker.WaitRegistered());
  // (Timed from before the set: the first delivery may reach the client
  // later than it left.)
  const WallNanos set_at = WallNow();
  Set("k");
  auto both = worker.WaitFor(2, 10'000ms);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].attempt(), 2u);
  // The 100 ms ack deadline, then attempt 1's backoff of 1 s.
  EXPECT_GE(worker.ReceivedAt()[1] - set_at, 1'100'000'000);
}

TEST_F(LeaseTest, ExtendLeasePostponesTheAckDeadline) {
  // A 2 s deadline, so that the ExtendLease surely arrives before it even
  // on a slow (sanitizer) build.
  TestStream worker(d_.stub(), TestStream::Worker("jobs", 100, 2000));
  ASSERT_TRUE(worker.WaitRegistered());
  Set("k");
  auto first = worker.WaitFor(1);
  ASSERT_EQ(first.size(), 1u);
  const WallNanos extended_at = WallNow();
  auto r = Extend({first[0].id(), 999'999}, 3000);
  EXPECT_EQ(r.extended(), 1u);
  ASSERT_EQ(r.unknown_ids_size(), 1);
  EXPECT_EQ(r.unknown_ids(0), 999'999u);
  // The new deadline (3 s from the call), then the backoff (1 s): the 2 s
  // deadline alone would have brought it back within 3 s of the call.
  auto both = worker.WaitFor(2, 10'000ms);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_GE(worker.ReceivedAt()[1] - extended_at, 4'000'000'000);
}

TEST_F(LeaseTest, BadRequestsAreRefusedAndChangeNothing) {
  TestStream worker(d_.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(worker.WaitRegistered());
  Set("k");
  auto first = worker.WaitFor(1);
  ASSERT_EQ(first.size(), 1u);
  const std::uint64_t id = first[0].id();
  Nack({}, 0, grpc::StatusCode::INVALID_ARGUMENT);
  Nack({id}, 25 * 3'600'000, grpc::StatusCode::INVALID_ARGUMENT);
  Extend({id}, 0, grpc::StatusCode::INVALID_ARGUMENT);
  Extend({id}, 50, grpc::StatusCode::INVALID_ARGUMENT);
  Extend({id}, 2 * 3'600'000, grpc::StatusCode::INVALID_ARGUMENT);
  Extend({}, 1000, grpc::StatusCode::INVALID_ARGUMENT);
  const auto s = Stats();
  EXPECT_EQ(s.in_flight_events(), 1u);
  EXPECT_EQ(s.retrying_events(), 0u);
  EXPECT_EQ(s.events_redelivered(), 0u);
}

}  // namespace
}  // namespace delayd::testing
