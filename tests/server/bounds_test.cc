// Resource bounds a client meets through the API: request sizes by method,
// Batch operation counts in any encoding, ListTimers pages that stay within
// a response size.
#include <gtest/gtest.h>

#include "tests/server/test_client.h"

namespace delayd {
namespace {

using testing::Millis;
using testing::RawUnaryCall;
using testing::TestDaemon;
using testing::TestStream;

// `request` serialized, with an unknown field of `extra` bytes after it.
std::string WithUnknownBytes(const google::protobuf::Message& request,
                             std::size_t extra) {
  std::unique_ptr<google::protobuf::Message> m(request.New());
  m->CopyFrom(request);
  m->GetReflection()->MutableUnknownFields(m.get())->AddLengthDelimited(
      1000, std::string(extra, 'u'));
  return m->SerializeAsString();
}

// Each method holds its request to its own limit before parsing it: a full
// timer is taken, anything much larger is refused naming the method, and a
// refused request changes nothing.
TEST(Bounds, EachMethodHoldsItsRequestToItsOwnSizeLimit) {
  TestDaemon d;
  const Limits limits;  // The defaults, as the daemon has them.
  v1::SetTimerRequest full;
  full.set_namespace_(std::string(limits.max_namespace_bytes, 'n'));
  full.set_key(std::string(limits.max_key_bytes, 'k'));
  full.set_payload(std::string(limits.max_payload_bytes, 'p'));
  *full.mutable_delay() = Millis(3'600'000);
  grpc::ByteBuffer out;
  grpc::Status s = RawUnaryCall(d.channel(), "/delayd.v1.Delayd/SetTimer",
                                WithUnknownBytes(full, 1000), &out);
  EXPECT_TRUE(s.ok()) << s.error_message();

  full.set_key("other");
  s = RawUnaryCall(d.channel(), "/delayd.v1.Delayd/SetTimer",
                   WithUnknownBytes(full, 20'000), &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("limit of SetTimer (it follows "
                                   "--max-payload-bytes"),
            std::string::npos)
      << s.error_message();

  // SetSchedule takes a payload as SetTimer does, and its spec: the
  // largest of each is read, 20 kB more is not.
  v1::SetScheduleRequest schedule;
  schedule.set_namespace_(std::string(limits.max_namespace_bytes, 'n'));
  schedule.set_key(std::string(limits.max_key_bytes, 's'));
  schedule.set_payload(std::string(limits.max_payload_bytes, 'p'));
  schedule.mutable_spec()->set_cron("0 9 * * MON-FRI" +
                                    std::string(256 - 15, ' '));
  schedule.mutable_spec()->set_time_zone("America/Argentina/ComodRivadavia");
  s = RawUnaryCall(d.channel(), "/delayd.v1.Delayd/SetSchedule",
                   schedule.SerializeAsString(), &out);
  EXPECT_TRUE(s.ok()) << s.error_message();
  s = RawUnaryCall(d.channel(), "/delayd.v1.Delayd/SetSchedule",
                   WithUnknownBytes(schedule, 20'000), &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);

  // Every other method takes a namespace, a key and small fields: 20 kB is
  // over its limit (Ack's ids aside).
  const std::pair<const char*, std::size_t> methods[] = {
      {"MoveTimer", 20'000},
      {"RemoveTimer", 20'000},
      {"Drain", 20'000},
      {"GetTimer", 20'000},
      {"ListTimers", 20'000},
      {"Stats", 20'000},
      {"Backup", 20'000},
      {"Ack", 200'000},
      {"Nack", 200'000},
      {"ExtendLease", 200'000},
      {"GetPolicy", 20'000},
      {"SetPolicy", 500'000},
      {"TestPushTarget", 500'000},
      {"ListDeadLetters", 20'000},
      {"RequeueDeadLetters", 200'000},
      {"PurgeDeadLetters", 200'000},
      {"PreviewSchedule", 20'000},
      {"GetSchedule", 20'000},
      {"ListSchedules", 20'000},
      {"DeleteSchedule", 20'000},
      {"PauseSchedule", 20'000},
      {"ResumeSchedule", 20'000},
      {"TriggerSchedule", 20'000}};
  for (const auto& [method, bytes] : methods) {
    s = RawUnaryCall(d.channel(), std::string("/delayd.v1.Delayd/") + method,
                     std::string(bytes, '\0'), &out);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << method;
    EXPECT_NE(s.error_message().find(std::string("limit of ") + method),
              std::string::npos)
        << s.error_message();
  }
  // An Ack of the most ids it may take is read (they are unknown ids).
  v1::AckRequest ack;
  ack.set_namespace_(std::string(limits.max_namespace_bytes, 'n'));
  for (int i = 0; i < 10'000; ++i) ack.add_event_ids(~std::uint64_t{0} - i);
  grpc::ClientContext ctx;
  v1::AckResponse acked;
  s = d.stub().Ack(&ctx, ack, &acked);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(acked.unknown_ids_size(), 10'000);

  // The stream's request too.
  v1::SubscribeRequest sub = TestStream::Worker("jobs");
  sub.GetReflection()->MutableUnknownFields(&sub)->AddLengthDelimited(
      1000, std::string(20'000, 'u'));
  TestStream stream(d.stub(), sub);
  const grpc::Status ended = stream.WaitDone();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(ended.error_message().find("limit of Subscribe"), std::string::npos)
      << ended.error_message();

  // Only the full timer was set.
  grpc::ClientContext stats_ctx;
  v1::StatsResponse stats;
  ASSERT_TRUE(d.stub().Stats(&stats_ctx, {}, &stats).ok());
  EXPECT_EQ(stats.pending_timers(), 1u);
}

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
