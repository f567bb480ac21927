// fast_json.h against protobuf's JSON mapping: a body the fast reader takes
// means the same message protobuf's parser makes of it; one it leaves is
// left whole; an answer it writes is the one protobuf's printer writes.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <string>

#include "server/http/fast_json.h"
#include "server/http/transcode.h"

namespace delayd::http::fast {
namespace {

namespace pb = google::protobuf;

// What protobuf makes of `json` as an M, serialized; "" if it refuses it.
template <typename M>
std::string Protobuf(const std::string& json) {
  M m;
  if (!pb::util::JsonStringToMessage(json, &m).ok()) return "";
  return m.SerializeAsString();
}

// The fast reader's message, re-serialized by protobuf (so that field order
// does not matter); "" if it left the body.
std::string Fast(const std::string& json) {
  const auto wire = BatchRequestWire(json);
  v1::BatchRequest m;
  if (!wire || !m.ParseFromString(*wire)) return "";
  return m.SerializeAsString();
}

std::string Batch(const std::string& ops) {
  return R"({"operations": [)" + ops + "]}";
}

TEST(FastJson, TakesThePlainFormAsProtobufReadsIt) {
  const std::string bodies[] = {
      Batch(R"({"set": {"namespace": "n", "key": "k", "payload": "MDEy",
                 "delay": "3600s"}})"),
      Batch(R"({"set": {"namespace": "n", "key": "k", "payload": "",
                 "fire_time": "2031-02-28T23:59:59.5Z", "ifAbsent": true,
                 "jitter": "0.000000001s"}},
               {"move": {"namespace": "n", "key": "k2",
                 "fireTime": "0001-01-01T00:00:00Z",
                 "expectedVersion": "18446744073709551615"}},
               {"remove": {"namespace": "n", "key": "k3",
                 "expected_version": 7}},
               {"remove": {"namespace": "ü/ns", "key": "✓"}},
               {"set": {"namespace": "n", "key": "k", "delay": "0s",
                 "if_absent": false, "payload": "YWJjZA=="}},
               {})"),
      Batch(""),
      Batch(R"({"set": {}})"),
      Batch(R"({"move": {"delay": "315576000000.999999999s"}})"),
  };
  for (const std::string& body : bodies) {
    SCOPED_TRACE(body);
    const std::string expected = Protobuf<v1::BatchRequest>(body);
    ASSERT_FALSE(expected.empty() && body != Batch(""));
    EXPECT_EQ(Fast(body), expected);
    EXPECT_TRUE(BatchRequestWire(body).has_value());
  }
}

TEST(FastJson, LeavesEverythingElseToProtobuf) {
  const std::string set = R"({"set": {"namespace": "n", "key": "k", )";
  const std::string bodies[] = {
      "",
      "{}",
      "[]",
      R"({"operations": [], "operations": []})",
      R"({"operations": null})",
      R"({"operations": []} {})",
      R"({"operations": []} x)",
      R"({"operations": [)",
      R"({"operations": [], "extra": 1})",
      Batch(R"({"set": {}, "move": {}})"),
      Batch(R"({"unset": {}})"),
      Batch(R"({"set": null})"),
      Batch(set + R"("key": "k"}})"),
      Batch(set + R"("bogus": "k"}})"),
      Batch(set + R"("payload": null}})"),
      Batch(R"({"set": {"namespace": "n", "key": "k\u0041"}})"),
      Batch(R"({"set": {"namespace": "n", "key": "k\n"}})"),
      Batch(set + R"("payload": "MDE"}})"),
      Batch(set + R"("payload": "MDF="}})"),
      Batch(set + R"("payload": "-_8="}})"),
      Batch(set + R"("payload": "MD Ey"}})"),
      Batch(set + R"("delay": "1.s"}})"),
      Batch(set + R"("delay": "01s"}})"),
      Batch(set + R"("delay": "-1s"}})"),
      Batch(set + R"("delay": "+1s"}})"),
      Batch(set + R"("delay": "1.0000000001s"}})"),
      Batch(set + R"("delay": "315576000001s"}})"),
      Batch(set + R"("delay": 5}})"),
      Batch(set + R"("delay": "1s", "fireTime": "2030-01-01T00:00:00Z"}})"),
      Batch(set + R"("fireTime": "2030-01-01T00:00:00+01:00"}})"),
      Batch(set + R"("fireTime": "2030-02-29T00:00:00Z"}})"),
      Batch(set + R"("fireTime": "2030-1-01T00:00:00Z"}})"),
      Batch(set + R"("fireTime": "2030-01-01T24:00:00Z"}})"),
      Batch(set + R"("fireTime": "2030-01-01T00:00:00.Z"}})"),
      Batch(set + R"("fireTime": "0000-01-01T00:00:00Z"}})"),
      Batch(set + R"("ifAbsent": "true"}})"),
      Batch(set + R"("ifAbsent": 1}})"),
      Batch(R"({"move": {"expectedVersion": "01"}})"),
      Batch(R"({"move": {"expectedVersion": -1}})"),
      Batch(R"({"move": {"expectedVersion": 1.0}})"),
      Batch(R"({"move": {"expectedVersion": "18446744073709551616"}})"),
      Batch(R"({"move": {"payload": "MDEy"}})"),
      Batch(R"({"remove": {"delay": "1s"}})"),
      Batch("{\"set\": {\"key\": \"\xff\"}}"),
      // A value followed by anything but ',' or '}'.
      R"({"operations":[{"set":{"namespace":"s","key":"b","delay":"5s":r ue}}}]})",
      Batch(set + R"("delay": "5s":r ue}})"),
      Batch(set + R"("delay": "5s": 1}}})"),
      Batch(R"({"move": {"expectedVersion": 7: 8}}})"),
      Batch(set + R"("delay": "5s": "6s"}})"),
      Batch(set + R"("delay": "5s" "6s"}})"),
      Batch(R"({"move": {"expectedVersion": 7: 8}})"),
      Batch(R"({"move": {"expectedVersion": 7 8}})"),
      R"({"operations": [] : 1})",
  };
  for (const std::string& body : bodies) {
    SCOPED_TRACE(body);
    EXPECT_FALSE(BatchRequestWire(body).has_value());
  }
}

TEST(FastJson, ASetTimerBodyTakesItsPathAndMustAgreeWithIt) {
  const std::string body = R"({"payload": "MDEy", "delay": "15m"})";
  EXPECT_FALSE(SetTimerRequestWire(body, "n", "k").has_value());  // "15m"
  const std::string plain = R"({"payload": "MDEy", "delay": "900s",
                                "namespace": "n"})";
  const auto wire = SetTimerRequestWire(plain, "n", "k/1");
  ASSERT_TRUE(wire.has_value());
  v1::SetTimerRequest got;
  ASSERT_TRUE(got.ParseFromString(*wire));
  EXPECT_EQ(got.namespace_(), "n");
  EXPECT_EQ(got.key(), "k/1");
  EXPECT_EQ(got.payload(), "012");
  EXPECT_EQ(got.delay().seconds(), 900);
  EXPECT_FALSE(SetTimerRequestWire(plain, "other", "k").has_value());
  EXPECT_FALSE(SetTimerRequestWire(R"({"key": "x"})", "n", "k").has_value());
  EXPECT_FALSE(SetTimerRequestWire("{}", "n", "\xff").has_value());
  EXPECT_TRUE(SetTimerRequestWire("{}", "n", "k").has_value());
  EXPECT_FALSE(
      SetTimerRequestWire(R"({"delay": "5s": 1}})", "n", "k").has_value());
}

TEST(FastJson, ParsesInPlaceOrFromACopy) {
  std::string body = Batch(R"({"remove": {"namespace": "n", "key": "k"}})");
  const std::string expected = Fast(body);
  ASSERT_FALSE(expected.empty());
  body.shrink_to_fit();  // no room past the end: a copy is parsed
  EXPECT_EQ(Fast(body), expected);
  body.reserve(body.size() + kPadding);
  EXPECT_EQ(Fast(body), expected);
}

TEST(FastJson, WritesAnswersAsProtobufPrintsThem) {
  v1::BatchResponse batch;
  EXPECT_EQ(ResponseJson(batch), ToJson(batch));
  auto* ok = batch.add_results();
  ok->set_version(18446744073709551615ull);
  for (const int nanos : {0, 5'000'000, 5'000, 5, 999'999'999}) {
    auto* r = batch.add_results();
    r->set_version(3);
    r->mutable_fire_time()->set_seconds(1'900'000'000);
    r->mutable_fire_time()->set_nanos(nanos);
  }
  auto* early = batch.add_results();
  early->mutable_fire_time()->set_seconds(-62'135'596'800);
  auto* failed = batch.add_results();
  failed->set_code(10);
  std::string every_ascii;
  for (int c = 1; c < 128; ++c) every_ascii.push_back(static_cast<char>(c));
  failed->set_message(every_ascii);
  EXPECT_EQ(ResponseJson(batch), ToJson(batch));

  failed->set_message("caf\xc3\xa9");  // beyond ASCII: left to protobuf
  EXPECT_FALSE(ResponseJson(batch).has_value());

  v1::SetTimerResponse set;
  EXPECT_EQ(ResponseJson(set), ToJson(set));
  set.mutable_fire_time()->set_seconds(1);
  EXPECT_EQ(ResponseJson(set), ToJson(set));
  set.set_version(42);
  set.set_replaced(true);
  set.mutable_fire_time()->set_seconds(253'402'300'799);
  set.mutable_fire_time()->set_nanos(120'000'000);
  EXPECT_EQ(ResponseJson(set), ToJson(set));
  set.mutable_fire_time()->set_seconds(253'402'300'800);  // year 10000
  EXPECT_FALSE(ResponseJson(set).has_value());
}

}  // namespace
}  // namespace delayd::http::fast
