#include "server/batch_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <climits>

namespace delayd {
namespace {

// Wire types (protobuf encoding guide, "Message Structure").
constexpr std::uint8_t kVarint = 0;
constexpr std::uint8_t kLen = 2;

// Reads the plain encoding: one-byte tags (every field number here is below
// 16) and varints in their shortest form, as protobuf writes them. Anything
// longer is rejected, never read differently: protobuf's parser decides.
class Reader {
 public:
  explicit Reader(std::string_view bytes)
      : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}

  bool done() const { return p_ == end_; }

  bool Tag(int* field, std::uint8_t* wire_type) {
    if (p_ == end_ || (*p_ & 0x80) != 0) return false;
    const auto tag = static_cast<std::uint8_t>(*p_++);
    *field = tag >> 3;
    *wire_type = tag & 7;
    return *field != 0;
  }

  bool Varint(std::uint64_t* v) {
    std::uint64_t r = 0;
    for (int shift = 0; shift < 64 && p_ != end_; shift += 7) {
      const auto b = static_cast<std::uint8_t>(*p_++);
      if (shift == 63 && b > 1) return false;  // Past 64 bits.
      r |= std::uint64_t{b & 0x7Fu} << shift;
      if ((b & 0x80) == 0) {
        if (b == 0 && shift != 0) return false;  // Not the shortest form.
        *v = r;
        return true;
      }
    }
    return false;
  }

  bool Bytes(std::string_view* out) {
    std::uint64_t len;
    if (!Varint(&len) || len > static_cast<std::uint64_t>(end_ - p_)) {
      return false;
    }
    *out = {p_, static_cast<std::size_t>(len)};
    p_ += len;
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

bool Ascii(std::string_view s) {
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0x80) != 0) return false;
  }
  return true;
}

// A Duration or a Timestamp: int64 seconds = 1; int32 nanos = 2.
bool ReadTime(std::string_view bytes, WireTime* t) {
  Reader in(bytes);
  t->present = true;
  unsigned seen = 0;
  while (!in.done()) {
    int field;
    std::uint8_t type;
    std::uint64_t v;
    if (!in.Tag(&field, &type) || type != kVarint || field > 2 ||
        (seen & (1u << field)) != 0 || !in.Varint(&v)) {
      return false;
    }
    seen |= 1u << field;
    if (field == 1) {
      t->seconds = static_cast<std::int64_t>(v);
    } else {
      t->nanos = static_cast<std::int32_t>(static_cast<std::uint32_t>(v));
    }
  }
  return true;
}

// What a field number holds in each of the three request messages.
enum class Field {
  kUnknown,
  kNamespace,
  kKey,
  kPayload,
  kDelay,
  kFireTime,
  kIfAbsent,
  kExpectedVersion
};

Field FieldOf(OpFields::Kind kind, int number) {
  using K = OpFields::Kind;
  if (number == 1) return Field::kNamespace;
  if (number == 2) return Field::kKey;
  switch (kind) {
    case K::kSet:  // SetTimerRequest
      switch (number) {
        case 3:
          return Field::kPayload;
        case 4:
          return Field::kDelay;
        case 5:
          return Field::kFireTime;
        case 6:
          return Field::kIfAbsent;
      }
      break;
    case K::kMove:  // MoveTimerRequest
      switch (number) {
        case 3:
          return Field::kDelay;
        case 4:
          return Field::kFireTime;
        case 5:
          return Field::kExpectedVersion;
      }
      break;
    case K::kRemove:  // RemoveTimerRequest
      if (number == 3) return Field::kExpectedVersion;
      break;
    case K::kNone:
      break;
  }
  return Field::kUnknown;
}

bool ReadTimerRequest(std::string_view bytes, OpFields::Kind kind,
                      OpFields* f) {
  Reader in(bytes);
  f->kind = kind;
  unsigned seen = 0;
  while (!in.done()) {
    int number;
    std::uint8_t type;
    if (!in.Tag(&number, &type) || (seen & (1u << number)) != 0) return false;
    seen |= 1u << number;
    const Field field = FieldOf(kind, number);
    const bool varint =
        field == Field::kIfAbsent || field == Field::kExpectedVersion;
    if (field == Field::kUnknown || type != (varint ? kVarint : kLen)) {
      return false;
    }
    std::uint64_t v = 0;
    std::string_view s;
    if (varint ? !in.Varint(&v) : !in.Bytes(&s)) return false;
    switch (field) {
      case Field::kNamespace:
        f->ns = s;
        if (!Ascii(s)) return false;
        break;
      case Field::kKey:
        f->key = s;
        if (!Ascii(s)) return false;
        break;
      case Field::kPayload:
        f->payload = s;
        break;
      case Field::kDelay:
        if (!ReadTime(s, &f->delay)) return false;
        break;
      case Field::kFireTime:
        if (!ReadTime(s, &f->fire_time)) return false;
        break;
      case Field::kIfAbsent:
        f->if_absent = v != 0;
        break;
      case Field::kExpectedVersion:
        f->expected_version = v;
        break;
      case Field::kUnknown:
        return false;
    }
  }
  // delay and fire_time are one oneof: a second member would replace the
  // first.
  return !(f->delay.present && f->fire_time.present);
}

// BatchOperation: oneof op { SetTimerRequest set = 1; MoveTimerRequest move
// = 2; RemoveTimerRequest remove = 3; }
bool ReadOperation(std::string_view bytes, OpFields* f) {
  Reader in(bytes);
  if (in.done()) return true;  // No op set.
  int number;
  std::uint8_t type;
  std::string_view s;
  if (!in.Tag(&number, &type) || type != kLen || number > 3 || !in.Bytes(&s) ||
      !in.done()) {
    return false;
  }
  constexpr OpFields::Kind kKinds[] = {
      OpFields::Kind::kNone, OpFields::Kind::kSet, OpFields::Kind::kMove,
      OpFields::Kind::kRemove};
  return ReadTimerRequest(s, kKinds[number], f);
}

}  // namespace

WireRead ReadBatchRequest(std::string_view wire, std::size_t max_ops,
                          std::vector<OpFields>* ops) {
  ops->clear();
  Reader in(wire);
  while (!in.done()) {
    int number;
    std::uint8_t type;
    std::string_view s;
    if (!in.Tag(&number, &type) || number != 1 || type != kLen ||
        !in.Bytes(&s)) {
      return WireRead::kNotPlain;
    }
    if (ops->size() == max_ops) return WireRead::kTooMany;
    if (!ReadOperation(s, &ops->emplace_back())) return WireRead::kNotPlain;
  }
  return WireRead::kOk;
}

std::optional<std::size_t> CountBatchOperations(std::string_view wire,
                                                std::size_t limit) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const std::uint8_t*>(wire.data()),
      static_cast<int>(std::min<std::size_t>(wire.size(), INT_MAX)));
  std::size_t count = 0;
  while (std::uint32_t tag = in.ReadTag()) {
    // Only a length-delimited field 1 is an operation; protobuf keeps any
    // other wire type under that number as an unknown field.
    if (WireFormatLite::GetTagFieldNumber(tag) == 1 &&
        WireFormatLite::GetTagWireType(tag) ==
            WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
        ++count > limit) {
      return count;
    }
    if (!WireFormatLite::SkipField(&in, tag)) return std::nullopt;
  }
  // ReadTag() gives 0 at the end of the input and for a zero tag, which
  // protobuf refuses.
  if (!in.ConsumedEntireMessage()) return std::nullopt;
  return count;
}

namespace {

template <typename Time>
WireTime TimeOf(bool present, const Time& t) {
  if (!present) return {};
  return {true, t.seconds(), t.nanos()};
}

}  // namespace

OpFields FieldsOf(const v1::SetTimerRequest& req) {
  OpFields f;
  f.kind = OpFields::Kind::kSet;
  f.ns = req.namespace_();
  f.key = req.key();
  f.payload = req.payload();
  f.delay = TimeOf(req.has_delay(), req.delay());
  f.fire_time = TimeOf(req.has_fire_time(), req.fire_time());
  f.if_absent = req.if_absent();
  return f;
}

OpFields FieldsOf(const v1::MoveTimerRequest& req) {
  OpFields f;
  f.kind = OpFields::Kind::kMove;
  f.ns = req.namespace_();
  f.key = req.key();
  f.delay = TimeOf(req.has_delay(), req.delay());
  f.fire_time = TimeOf(req.has_fire_time(), req.fire_time());
  f.expected_version = req.expected_version();
  return f;
}

OpFields FieldsOf(const v1::RemoveTimerRequest& req) {
  OpFields f;
  f.kind = OpFields::Kind::kRemove;
  f.ns = req.namespace_();
  f.key = req.key();
  f.expected_version = req.expected_version();
  return f;
}

OpFields FieldsOf(const v1::BatchOperation& op) {
  switch (op.op_case()) {
    case v1::BatchOperation::kSet:
      return FieldsOf(op.set());
    case v1::BatchOperation::kMove:
      return FieldsOf(op.move());
    case v1::BatchOperation::kRemove:
      return FieldsOf(op.remove());
    case v1::BatchOperation::OP_NOT_SET:
      break;
  }
  return {};
}

}  // namespace delayd
