// Batch against a daemon on loopback: a result per operation, unparsable
// requests, every encoding protobuf takes, and where complaints are logged.
#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "tests/server/service_fixture.h"

namespace delayd::testing {
namespace {

TEST_F(DelaydTest, BatchGivesAResultPerOperation) {
  ASSERT_TRUE(Set("existing", 60000).ok());
  v1::BatchRequest req;
  auto* s = req.add_operations()->mutable_set();
  s->set_key("new");
  *s->mutable_delay() = Millis(60000);
  auto* bad = req.add_operations()->mutable_set();
  bad->set_key("");
  *bad->mutable_delay() = Millis(1);
  req.add_operations()->mutable_move()->set_key("missing");
  *req.mutable_operations(2)->mutable_move()->mutable_delay() = Millis(5);
  req.add_operations()->mutable_remove()->set_key("existing");
  auto* dup = req.add_operations()->mutable_set();
  dup->set_key("new");
  dup->set_if_absent(true);
  *dup->mutable_delay() = Millis(1);
  v1::BatchResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d_.stub().Batch(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.results_size(), 5);
  EXPECT_EQ(resp.results(0).code(), grpc::StatusCode::OK);
  EXPECT_GT(resp.results(0).version(), 0u);
  EXPECT_EQ(resp.results(1).code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(resp.results(1).message().find("operations[1].key"),
            std::string::npos);
  EXPECT_EQ(resp.results(2).code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(resp.results(3).code(), grpc::StatusCode::OK);
  EXPECT_EQ(resp.results(4).code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(Get("existing").error_code(), StatusCode::NOT_FOUND);
}

// A request that does not parse (no such message, or a `string` field that
// is not UTF-8, which a C++ client's protobuf sends as is) is refused as an
// invalid argument naming the message expected, on every method, and
// changes nothing. Only a method that does not exist is UNIMPLEMENTED.
TEST_F(DelaydTest, UnparsableRequestsAreInvalidArguments) {
  const std::string garbage = "\xFF\xFF\xFF";
  const std::pair<const char*, const char*> methods[] = {
      {"SetTimer", "SetTimerRequest"},
      {"MoveTimer", "MoveTimerRequest"},
      {"RemoveTimer", "RemoveTimerRequest"},
      {"Drain", "DrainRequest"},
      {"GetTimer", "GetTimerRequest"},
      {"ListTimers", "ListTimersRequest"},
      {"Batch", "BatchRequest"},
      {"Ack", "AckRequest"},
      {"Stats", "StatsRequest"}};
  for (const auto& [method, request] : methods) {
    grpc::ByteBuffer response;
    const grpc::Status s =
        RawUnaryCall(d_.channel(), std::string("/delayd.v1.Delayd/") + method,
                     garbage, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_EQ(s.error_message(),
              std::string("request: not a valid delayd.v1.") + request)
        << method;
  }

  v1::SetTimerRequest set;
  set.set_key("not-utf8-\xFF");
  set.mutable_delay()->set_seconds(60);
  grpc::ByteBuffer response;
  const grpc::Status s =
      RawUnaryCall(d_.channel(), "/delayd.v1.Delayd/SetTimer",
                   set.SerializeAsString(), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "request: not a valid delayd.v1.SetTimerRequest");

  // The stream's request is parsed by gRPC too.
  v1::SubscribeRequest sub = TestStream::Worker("ns-\xFF");
  TestStream stream(d_.stub(), sub);
  const grpc::Status ended = stream.WaitDone();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ended.error_message(),
            "request: not a valid delayd.v1.SubscribeRequest");

  EXPECT_EQ(RawUnaryCall(d_.channel(), "/delayd.v1.Delayd/NoSuchMethod",
                         garbage, &response)
                .error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(Stats().pending_timers(), 0u);
  EXPECT_TRUE(Set("still-serving", 60000).ok());
}

// Batch reads its request from the bytes; encodings other than the plain
// one mean what protobuf says, and bytes that are no BatchRequest at all are
// refused without harm.
TEST_F(DelaydTest, BatchTakesAnyEncodingProtobufTakes) {
  auto call = [&](const std::string& wire, v1::BatchResponse* resp) {
    grpc::ByteBuffer out;
    const grpc::Status status =
        RawUnaryCall(d_.channel(), "/delayd.v1.Delayd/Batch", wire, &out);
    if (status.ok()) {
      EXPECT_TRUE(
          grpc::SerializationTraits<v1::BatchResponse>::Deserialize(&out, resp)
              .ok());
    }
    return status;
  };
  // Two `set` messages in one operation merge: the key is the second's, the
  // delay the first's.
  v1::BatchOperation first, second;
  first.mutable_set()->set_key("first");
  *first.mutable_set()->mutable_delay() = Millis(60000);
  second.mutable_set()->set_key("merged");
  const std::string op = first.SerializeAsString() + second.SerializeAsString();
  v1::BatchResponse resp;
  ASSERT_TRUE(
      call("\x0A" + std::string(1, static_cast<char>(op.size())) + op, &resp)
          .ok());
  ASSERT_EQ(resp.results_size(), 1);
  EXPECT_EQ(resp.results(0).code(), StatusCode::OK);
  EXPECT_TRUE(Get("merged").ok());
  EXPECT_EQ(Get("first").error_code(), StatusCode::NOT_FOUND);

  // A key in UTF-8 beyond ASCII.
  v1::BatchRequest utf8;
  auto* s = utf8.add_operations()->mutable_set();
  s->set_key("cl\xC3\xA9");
  *s->mutable_delay() = Millis(60000);
  ASSERT_TRUE(call(utf8.SerializeAsString(), &resp).ok());
  EXPECT_EQ(resp.results(0).code(), StatusCode::OK);
  EXPECT_TRUE(Get("cl\xC3\xA9").ok());

  // Not a BatchRequest: a string field that is not UTF-8, and truncation.
  std::string bad = utf8.SerializeAsString();
  bad[bad.find("cl") + 2] = '\xFF';
  for (const std::string& wire : {bad, bad.substr(0, bad.size() - 3)}) {
    const grpc::Status st = call(wire, &resp);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("BatchRequest"), std::string::npos);
  }
  // An operation with none of set, move or remove.
  v1::BatchRequest none;
  none.add_operations();
  ASSERT_TRUE(call(none.SerializeAsString(), &resp).ok());
  EXPECT_EQ(resp.results(0).code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(resp.results(0).message().find("operations[0].op"),
            std::string::npos);
  EXPECT_TRUE(Set("still-serving", 60000).ok());
}

// What protobuf logs about a client's malformed request goes to the daemon's
// log at debug level, not to stderr. (The log of a daemon in this process:
// not built against a cluster.)
#ifndef DELAYD_API_ON_CLUSTER
TEST_F(DelaydTest, ProtobufComplaintsGoToTheLogAtDebugLevel) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  auto logger = std::make_shared<spdlog::logger>("capture", sink);
  logger->set_level(spdlog::level::debug);
  const auto previous_logger = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  google::protobuf::LogHandler* previous =
      google::protobuf::SetLogHandler(nullptr);
  RouteProtobufLogsToSpdlog();

  v1::SetTimerRequest req;
  req.set_key("not-utf8-\xFF");  // Sent as is; the daemon must refuse it.
  req.mutable_delay()->set_seconds(60);
  grpc::ByteBuffer response;
  EXPECT_FALSE(RawUnaryCall(d_.channel(), "/delayd.v1.Delayd/SetTimer",
                            req.SerializeAsString(), &response)
                   .ok());

  google::protobuf::SetLogHandler(previous);
  spdlog::set_default_logger(previous_logger);
  bool logged = false;
  for (const auto& m : sink->last_raw()) {
    const std::string text(m.payload.data(), m.payload.size());
    if (text.find("protobuf (") != std::string::npos &&
        text.find("UTF-8") != std::string::npos) {
      logged = true;
      EXPECT_EQ(m.level, spdlog::level::debug);
    }
  }
  EXPECT_TRUE(logged);
}
#endif

}  // namespace
}  // namespace delayd::testing
