// Resource bounds a client meets through the API: Batch operation counts in
// any encoding, ListTimers pages that stay within a response size.
#include <gtest/gtest.h>

#include "tests/server/test_client.h"

namespace delayd {
namespace {

using testing::Millis;
using testing::RawUnaryCall;
using testing::TestDaemon;

TEST(Bounds, BatchOverTheOperationLimitIsRefusedInAnyEncoding) {
  auto o = TestDaemon::DefaultOptions();
  o.scheduler.limits.max_batch_ops = 100;
  TestDaemon d(o);
  // Empty operations, two bytes each: the plain encoding.
  std::string plain;
  for (int i = 0; i < 200'000; ++i) plain += std::string("\x0a\x00", 2);
  grpc::ByteBuffer out;
  grpc::Status s =
      RawUnaryCall(d.channel(), "/delayd.v1.Delayd/Batch", plain, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("max-batch-ops"), std::string::npos)
      << s.error_message();
  // Not the plain encoding (an unknown field first): counted before protobuf
  // parses it.
  s = RawUnaryCall(d.channel(), "/delayd.v1.Delayd/Batch",
                   std::string("\x10\x01", 2) + plain, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("max-batch-ops"), std::string::npos)
      << s.error_message();
  // At the limit it is taken.
  v1::BatchRequest req;
  for (int i = 0; i < 100; ++i) {
    auto* set = req.add_operations()->mutable_set();
    set->set_key("k" + std::to_string(i));
    *set->mutable_delay() = Millis(3'600'000);
  }
  grpc::ClientContext ctx;
  v1::BatchResponse resp;
  ASSERT_TRUE(d.stub().Batch(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.results_size(), 100);
}

TEST(Bounds, ListTimersPagesStayWithinTheResponseBound) {
  TestDaemon d;
  const std::string payload(64 * 1024, 'p');
  for (int i = 0; i < 100; ++i) {
    grpc::ClientContext ctx;
    v1::SetTimerRequest r;
    r.set_key("k" + std::to_string(i));
    r.set_payload(payload);
    *r.mutable_delay() = Millis(3'600'000);
    v1::SetTimerResponse resp;
    ASSERT_TRUE(d.stub().SetTimer(&ctx, r, &resp).ok());
  }
  // 100 x 64 KiB = 6.4 MB: more than a page may hold.
  std::size_t seen = 0, pages = 0;
  std::string token;
  do {
    grpc::ClientContext ctx;
    v1::ListTimersRequest r;
    r.set_page_size(1000);
    r.set_page_token(token);
    v1::ListTimersResponse resp;
    ASSERT_TRUE(d.stub().ListTimers(&ctx, r, &resp).ok());
    EXPECT_LE(resp.ByteSizeLong(), 3u << 20);
    EXPECT_GT(resp.timers_size(), 0);
    for (const auto& t : resp.timers()) EXPECT_EQ(t.payload(), payload);
    seen += resp.timers_size();
    ++pages;
    token = resp.next_page_token();
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(seen, 100u);
  EXPECT_GE(pages, 3u);
  // Without payloads, all of them in one page.
  grpc::ClientContext ctx;
  v1::ListTimersRequest r;
  r.set_page_size(1000);
  r.set_without_payloads(true);
  v1::ListTimersResponse resp;
  ASSERT_TRUE(d.stub().ListTimers(&ctx, r, &resp).ok());
  EXPECT_EQ(resp.timers_size(), 100);
  EXPECT_TRUE(resp.next_page_token().empty());
  for (const auto& t : resp.timers()) EXPECT_TRUE(t.payload().empty());
}

}  // namespace
}  // namespace delayd
