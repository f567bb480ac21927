#include "server/api/batch_wire.h"

#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace delayd {
namespace {

using Kind = OpFields::Kind;

// Whether the reader takes `wire` as the plain encoding (no operation limit).
bool ReadsPlain(std::string_view wire, std::vector<OpFields>* ops) {
  return ReadBatchRequest(wire, SIZE_MAX, ops) == WireRead::kOk;
}

// What protobuf makes of `wire`, as fields; false if it does not parse.
bool ProtobufReads(const std::string& wire, v1::BatchRequest* msg,
                   std::vector<OpFields>* ops) {
  if (!msg->ParseFromString(wire)) return false;
  ops->clear();
  for (const auto& o : msg->operations()) ops->push_back(FieldsOf(o));
  return true;
}

// Checks the reader's one promise: whatever it accepts, protobuf reads the
// same. Returns whether the reader accepted `wire`.
bool AgreesWithProtobuf(const std::string& wire) {
  google::protobuf::LogSilencer quiet;  // Its UTF-8 complaints, expected.
  std::vector<OpFields> fast;
  const bool accepted = ReadsPlain(wire, &fast);
  v1::BatchRequest msg;
  std::vector<OpFields> slow;
  const bool parsed = ProtobufReads(wire, &msg, &slow);
  if (accepted) {
    EXPECT_TRUE(parsed) << "accepted what protobuf rejects";
    EXPECT_EQ(fast, slow);
  }
  return accepted;
}

std::string RandomString(std::mt19937_64& rng, bool ascii_only) {
  const std::size_t n = rng() % 4 == 0 ? 0 : rng() % 40;
  std::string s(n, 'a');
  for (auto& c : s) {
    c = static_cast<char>(ascii_only ? 0x20 + rng() % 0x5F : rng() % 256);
  }
  return s;
}

template <typename Time>
void RandomTime(std::mt19937_64& rng, Time* t) {
  const std::int64_t seconds[] = {
      0, 1, -1, 3600, INT64_MAX, INT64_MIN, static_cast<std::int64_t>(rng())};
  const std::int32_t nanos[] = {0,
                                1,
                                -1,
                                999'999'999,
                                1'000'000'000,
                                INT32_MIN,
                                static_cast<std::int32_t>(rng())};
  if (rng() % 3 != 0) t->set_seconds(seconds[rng() % 7]);
  if (rng() % 3 != 0) t->set_nanos(nanos[rng() % 7]);
}

// A request of random operations, every field sometimes absent, sometimes at
// an extreme; `ascii_only` keeps `string` fields within what the reader
// takes.
v1::BatchRequest RandomRequest(std::mt19937_64& rng, bool ascii_only) {
  v1::BatchRequest req;
  const int n = static_cast<int>(rng() % 8);
  for (int i = 0; i < n; ++i) {
    auto* op = req.add_operations();
    switch (rng() % 4) {
      case 0: {
        auto* s = op->mutable_set();
        s->set_namespace_(RandomString(rng, true));
        s->set_key(RandomString(rng, ascii_only));
        s->set_payload(RandomString(rng, false));  // bytes: anything.
        if (rng() % 3 == 0) RandomTime(rng, s->mutable_delay());
        if (rng() % 3 == 0) RandomTime(rng, s->mutable_fire_time());
        s->set_if_absent(rng() % 2 == 0);
        break;
      }
      case 1: {
        auto* m = op->mutable_move();
        m->set_namespace_(RandomString(rng, ascii_only));
        m->set_key(RandomString(rng, true));
        if (rng() % 2 == 0) RandomTime(rng, m->mutable_delay());
        if (rng() % 2 == 0) RandomTime(rng, m->mutable_fire_time());
        m->set_expected_version(rng() % 2 == 0 ? 0 : rng());
        break;
      }
      case 2: {
        auto* r = op->mutable_remove();
        r->set_key(RandomString(rng, ascii_only));
        r->set_expected_version(rng() % 2 == 0 ? 0 : rng() >> (rng() % 64));
        break;
      }
      default:
        break;  // No op set.
    }
  }
  return req;
}

bool Ascii(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

TEST(BatchWire, ReadsEveryFieldOfEveryOperation) {
  v1::BatchRequest req;
  auto* s = req.add_operations()->mutable_set();
  s->set_namespace_("orders");
  s->set_key("order-42");
  s->set_payload(std::string("\0\xff payload", 10));
  s->mutable_delay()->set_seconds(900);
  s->mutable_delay()->set_nanos(5);
  s->set_if_absent(true);
  auto* m = req.add_operations()->mutable_move();
  m->set_key("k");
  m->mutable_fire_time()->set_seconds(1'700'000'000);
  m->set_expected_version(7);
  auto* r = req.add_operations()->mutable_remove();
  r->set_namespace_("n");
  r->set_key("gone");
  r->set_expected_version(UINT64_MAX);
  req.add_operations();  // No op set.

  const std::string wire = req.SerializeAsString();  // Viewed by `ops`.
  std::vector<OpFields> ops;
  ASSERT_TRUE(ReadsPlain(wire, &ops));
  ASSERT_EQ(ops.size(), 4u);
  EXPECT_EQ(ops[0].kind, Kind::kSet);
  EXPECT_EQ(ops[0].ns, "orders");
  EXPECT_EQ(ops[0].key, "order-42");
  EXPECT_EQ(ops[0].payload, std::string_view("\0\xff payload", 10));
  EXPECT_EQ(ops[0].delay, (WireTime{true, 900, 5}));
  EXPECT_FALSE(ops[0].fire_time.present);
  EXPECT_TRUE(ops[0].if_absent);
  EXPECT_EQ(ops[1].kind, Kind::kMove);
  EXPECT_EQ(ops[1].fire_time, (WireTime{true, 1'700'000'000, 0}));
  EXPECT_FALSE(ops[1].delay.present);
  EXPECT_EQ(ops[1].expected_version, 7u);
  EXPECT_EQ(ops[2].kind, Kind::kRemove);
  EXPECT_EQ(ops[2].ns, "n");
  EXPECT_EQ(ops[2].expected_version, UINT64_MAX);
  EXPECT_EQ(ops[3].kind, Kind::kNone);
  EXPECT_TRUE(AgreesWithProtobuf(wire));
}

TEST(BatchWire, EmptyRequestHasNoOperations) {
  std::vector<OpFields> ops{OpFields{}};
  EXPECT_TRUE(ReadsPlain("", &ops));
  EXPECT_TRUE(ops.empty());
}

TEST(BatchWire, PresentButEmptyTimeIsPresent) {
  v1::BatchRequest req;
  req.add_operations()->mutable_set()->mutable_delay();
  const std::string wire = req.SerializeAsString();
  std::vector<OpFields> ops;
  ASSERT_TRUE(ReadsPlain(wire, &ops));
  EXPECT_EQ(ops[0].delay, (WireTime{true, 0, 0}));
  EXPECT_TRUE(AgreesWithProtobuf(wire));
}

// Encodings protobuf reads in its own way (merging, last-one-wins, skipping,
// UTF-8 checks) are left to it.
TEST(BatchWire, LeavesEverythingButThePlainEncodingToProtobuf) {
  v1::BatchRequest one;
  auto* s = one.add_operations()->mutable_set();
  s->set_key("a");
  s->mutable_delay()->set_seconds(1);
  const std::string plain = one.SerializeAsString();
  std::vector<OpFields> ops;
  ASSERT_TRUE(ReadsPlain(plain, &ops));

  // The same field twice in one message: protobuf keeps the last key.
  v1::SetTimerRequest key_b;
  key_b.set_key("b");
  v1::BatchOperation op;
  op.mutable_set()->set_key("a");
  std::string twice = op.SerializeAsString();
  // Appending a second `set` to the operation merges the two messages.
  v1::BatchOperation second;
  *second.mutable_set() = key_b;
  twice += second.SerializeAsString();
  v1::BatchRequest holder;
  std::string wire;
  {
    // BatchRequest.operations (field 1, length-delimited) around `twice`.
    wire.push_back(static_cast<char>(0x0A));
    wire.push_back(static_cast<char>(twice.size()));
    wire += twice;
  }
  EXPECT_FALSE(ReadsPlain(wire, &ops));
  ASSERT_TRUE(holder.ParseFromString(wire));
  EXPECT_EQ(holder.operations(0).set().key(), "b");

  // Both members of a oneof: protobuf keeps the second.
  v1::BatchOperation move;
  move.mutable_move()->set_key("m");
  const std::string both = op.SerializeAsString() + move.SerializeAsString();
  std::string wire2 =
      "\x0A" + std::string(1, static_cast<char>(both.size())) + both;
  EXPECT_FALSE(ReadsPlain(wire2, &ops));
  ASSERT_TRUE(holder.ParseFromString(wire2));
  EXPECT_EQ(holder.operations(0).op_case(), v1::BatchOperation::kMove);

  // An unknown field (number 15, varint) after the operations.
  EXPECT_FALSE(ReadsPlain(plain + "\x78\x01", &ops));
  EXPECT_TRUE(holder.ParseFromString(plain + "\x78\x01"));

  // A known field in the wrong wire type is an unknown field to protobuf.
  EXPECT_FALSE(ReadsPlain(plain + "\x08\x01", &ops));
  EXPECT_TRUE(holder.ParseFromString(plain + "\x08\x01"));

  // A varint not in its shortest form (1 as 0x81 0x00).
  v1::BatchRequest removal;
  removal.add_operations()->mutable_remove()->set_expected_version(1);
  std::string overlong = removal.SerializeAsString();
  ASSERT_EQ(overlong.back(), '\x01');
  overlong.back() = '\x81';
  overlong.push_back('\x00');
  overlong[1] = static_cast<char>(overlong[1] + 1);  // Operation length.
  overlong[3] = static_cast<char>(overlong[3] + 1);  // RemoveTimerRequest's.
  EXPECT_FALSE(ReadsPlain(overlong, &ops));
  ASSERT_TRUE(holder.ParseFromString(overlong));
  EXPECT_EQ(holder.operations(0).remove().expected_version(), 1u);

  // A key that is not ASCII: protobuf checks its UTF-8.
  v1::BatchRequest utf8;
  utf8.add_operations()->mutable_set()->set_key("cl\xC3\xA9");
  EXPECT_FALSE(ReadsPlain(utf8.SerializeAsString(), &ops));
  EXPECT_TRUE(holder.ParseFromString(utf8.SerializeAsString()));
}

TEST(BatchWire, RejectsTruncatedAndMalformedInput) {
  v1::BatchRequest req;
  auto* s = req.add_operations()->mutable_set();
  s->set_key("a-key");
  s->set_payload("a payload");
  s->mutable_fire_time()->set_seconds(12345);
  const std::string wire = req.SerializeAsString();
  std::vector<OpFields> ops;
  for (std::size_t len = 1; len < wire.size(); ++len) {
    EXPECT_FALSE(ReadsPlain(wire.substr(0, len), &ops)) << len;
  }
  EXPECT_FALSE(ReadsPlain("\x0A\x05\x0A", &ops));        // Length past end.
  EXPECT_FALSE(ReadsPlain(std::string(1, '\0'), &ops));  // Field 0.
  EXPECT_FALSE(ReadsPlain(
      std::string("\x0A\x0C\x1A\x0A\x18") + std::string(10, '\xFF'), &ops));
}

TEST(BatchWire, AgreesWithProtobufOnRandomRequests) {
  std::mt19937_64 rng(20261121);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    const bool ascii_only = i % 2 == 0;
    const v1::BatchRequest req = RandomRequest(rng, ascii_only);
    const std::string wire = req.SerializeAsString();
    bool all_ascii = true;
    for (const auto& o : req.operations()) {
      const OpFields f = FieldsOf(o);
      all_ascii =
          all_ascii && Ascii(std::string(f.ns)) && Ascii(std::string(f.key));
    }
    const bool ok = AgreesWithProtobuf(wire);
    // Everything protobuf writes is read, unless a string is not ASCII.
    EXPECT_EQ(ok, all_ascii) << i;
    accepted += ok;
  }
  EXPECT_GT(accepted, 10000);
}

// An operation written back from its fields (as a split Batch sends it to
// another node) reads as the same fields, on random requests.
TEST(BatchWire, AnOperationWrittenFromItsFieldsReadsTheSame) {
  std::mt19937_64 rng(20261127);
  int ops = 0;
  for (int i = 0; i < 2000; ++i) {
    const v1::BatchRequest req = RandomRequest(rng, i % 2 == 0);
    for (const auto& o : req.operations()) {
      const OpFields f = FieldsOf(o);
      v1::BatchOperation back;
      ToProto(f, &back);
      ASSERT_EQ(FieldsOf(back), f) << i << ": " << o.ShortDebugString();
      ++ops;
    }
  }
  EXPECT_GT(ops, 2000);
}

// Corrupted encodings: whatever the reader still accepts must mean to it
// what it means to protobuf.
TEST(BatchWire, AgreesWithProtobufOnCorruptedRequests) {
  std::mt19937_64 rng(7);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 50000; ++i) {
    std::string wire = RandomRequest(rng, true).SerializeAsString();
    if (wire.empty()) continue;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !wire.empty(); ++e) {
      const std::size_t at = rng() % wire.size();
      switch (rng() % 4) {
        case 0:
          wire[at] = static_cast<char>(rng());
          break;
        case 1:
          wire[at] = static_cast<char>(wire[at] ^ (1 << (rng() % 8)));
          break;
        case 2:
          wire.insert(at, 1, static_cast<char>(rng()));
          break;
        default:
          wire.erase(at, 1);
      }
    }
    (AgreesWithProtobuf(wire) ? accepted : rejected)++;
  }
  // Both outcomes are exercised.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(rejected, 1000);
}

// A request of many empty operations (two bytes each) must not cost memory in
// proportion to its length: the reader stops at the limit + 1.
TEST(BatchWire, StopsReadingPastTheOperationLimit) {
  std::string wire;
  for (int i = 0; i < 100000; ++i) wire += std::string("\x0a\x00", 2);
  std::vector<OpFields> ops;
  EXPECT_EQ(ReadBatchRequest(wire, 1000, &ops), WireRead::kTooMany);
  EXPECT_EQ(ops.size(), 1000u);
  EXPECT_EQ(ReadBatchRequest(wire.substr(0, 2000), 1000, &ops), WireRead::kOk);
  EXPECT_EQ(ops.size(), 1000u);
  EXPECT_EQ(ReadBatchRequest(wire.substr(0, 2002), 1000, &ops),
            WireRead::kTooMany);
}

TEST(BatchWire, CountsOperationsOfAnyEncodingUpToTheLimit) {
  v1::BatchRequest req;
  for (int i = 0; i < 5; ++i) {
    req.add_operations()->mutable_set()->set_key("k" + std::to_string(i));
  }
  // Unknown fields between operations count for nothing.
  const std::string wire =
      req.SerializeAsString() + "\x10\x05" + req.SerializeAsString();
  EXPECT_EQ(CountBatchOperations(wire, 100), 10u);
  EXPECT_EQ(CountBatchOperations(wire, 3), 4u);  // Stops at limit + 1.
  EXPECT_EQ(CountBatchOperations("", 3), 0u);
  EXPECT_EQ(CountBatchOperations("\x0a\x05\x0a", 3), std::nullopt);
  EXPECT_EQ(CountBatchOperations(std::string(1, '\0'), 3), std::nullopt);
  // Field 1 as a varint is an unknown field to protobuf, not an operation
  // (found by the fuzzer).
  EXPECT_EQ(CountBatchOperations(std::string("\x08\x00\x0a\x00", 4), 3), 1u);
  // A tag of more than 5 bytes is refused, as protobuf's parser refuses it
  // (CodedInputStream::ReadTag would read it).
  EXPECT_EQ(CountBatchOperations(
                std::string("\xD5\xA8\xD2\xF5\xDE\x38\0\0\0\0", 10), 3),
            std::nullopt);
}

// Unknown fields go at every level; what protobuf reads stays the same, and
// a request protobuf refuses is still refused.
TEST(BatchWire, KnownFieldsOnlyDropsUnknownFieldsAtEveryLevel) {
  using google::protobuf::util::MessageDifferencer;
  v1::BatchRequest req;
  auto* set = req.add_operations()->mutable_set();
  set->set_key("k");
  set->set_payload("p");
  set->mutable_delay()->set_seconds(5);
  set->mutable_delay()
      ->GetReflection()
      ->MutableUnknownFields(set->mutable_delay())
      ->AddVarint(9, 1);
  set->GetReflection()->MutableUnknownFields(set)->AddLengthDelimited(99, "u");
  req.GetReflection()->MutableUnknownFields(&req)->AddFixed64(7, 1);
  // And a known field in the wrong wire type: unknown to protobuf.
  const std::string wire =
      req.SerializeAsString() + std::string("\x0d\0\0\0\0", 5);
  const auto known = KnownFieldsOnly(wire, v1::BatchRequest::descriptor());
  ASSERT_TRUE(known.has_value());
  v1::BatchRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(*known));
  auto unknown = [](const google::protobuf::Message& m) {
    return m.GetReflection()->GetUnknownFields(m).field_count();
  };
  EXPECT_EQ(unknown(parsed), 0);
  EXPECT_EQ(unknown(parsed.operations(0).set()), 0);
  EXPECT_EQ(unknown(parsed.operations(0).set().delay()), 0);
  req.DiscardUnknownFields();
  EXPECT_TRUE(MessageDifferencer::Equals(parsed, req));
  EXPECT_LT(known->size(), wire.size());

  // What protobuf refuses: a cut nested message, a zero tag, a string that
  // is not UTF-8.
  EXPECT_FALSE(KnownFieldsOnly("\x0a\x05\x0a", v1::BatchRequest::descriptor()));
  EXPECT_FALSE(
      KnownFieldsOnly(std::string(1, '\0'), v1::BatchRequest::descriptor()));
  v1::BatchRequest bad;
  bad.add_operations()->mutable_set()->set_key("\xff");
  const auto copied =
      KnownFieldsOnly(bad.SerializeAsString(), v1::BatchRequest::descriptor());
  ASSERT_TRUE(copied.has_value());
  google::protobuf::LogSilencer quiet;
  EXPECT_FALSE(v1::BatchRequest().ParseFromString(*copied));
}

// On random corrupted requests: parsed without its unknown fields, a
// request parses exactly when it parses whole, to the same message.
TEST(BatchWire, KnownFieldsOnlyAgreesWithProtobuf) {
  using google::protobuf::util::MessageDifferencer;
  google::protobuf::LogSilencer quiet;
  std::mt19937_64 rng(11);
  int parsed_count = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string wire = RandomRequest(rng, true).SerializeAsString();
    for (int e = 0; e < 2 && !wire.empty(); ++e) {
      wire[rng() % wire.size()] = static_cast<char>(rng());
    }
    v1::BatchRequest whole, stripped;
    const bool parsed = whole.ParseFromString(wire);
    const auto known = KnownFieldsOnly(wire, v1::BatchRequest::descriptor());
    ASSERT_EQ(parsed, known && stripped.ParseFromString(*known))
        << "request " << i << ": " << ::testing::PrintToString(wire);
    if (!parsed) {
      ++refused;
      continue;
    }
    ++parsed_count;
    whole.DiscardUnknownFields();
    ASSERT_TRUE(MessageDifferencer::Equals(whole, stripped)) << i;
  }
  EXPECT_GT(parsed_count, 1000);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace delayd
