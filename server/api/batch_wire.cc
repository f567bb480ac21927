#include "server/api/batch_wire.h"

#include <google/protobuf/descriptor.h>
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
  kExpectedVersion,
  kJitter
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
        case 7:
          return Field::kJitter;
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
      case Field::kJitter:
        if (!ReadTime(s, &f->jitter)) return false;
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

namespace {

void AppendVarint(std::uint64_t v, std::string* out) {
  for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>(v | 0x80));
  out->push_back(static_cast<char>(v));
}

// Whether protobuf reads a field of `field`'s type in `wire_type` (else it
// keeps it as an unknown field).
bool ReadsAs(const google::protobuf::FieldDescriptor* field, int wire_type) {
  using google::protobuf::internal::WireFormatLite;
  if (field->is_packable() &&
      wire_type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
    return true;
  }
  return wire_type ==
         WireFormatLite::WireTypeForFieldType(
             static_cast<WireFormatLite::FieldType>(field->type()));
}

// A length as protobuf's parser reads one: a varint of at most 5 bytes,
// below 2^31. (CodedInputStream::ReadVarint32 reads up to 10 bytes and drops
// the high bits, taking lengths protobuf refuses.)
bool ReadLength(google::protobuf::io::CodedInputStream* in, int* length) {
  std::uint32_t v = 0;
  for (int i = 0; i < 5; ++i) {
    std::uint8_t b;
    if (!in->ReadRaw(&b, 1)) return false;
    if (i == 4 && b >= 8) return false;
    v |= std::uint32_t{b & 0x7Fu} << (7 * i);
    if ((b & 0x80) == 0) {
      *length = static_cast<int>(v);
      return true;
    }
  }
  return false;
}

// A tag as protobuf's parser reads one: a varint of at most 5 bytes, kept to
// its low 32 bits, with a field number above 0. (CodedInputStream::ReadTag
// reads up to 10 bytes.)
bool ReadTag(google::protobuf::io::CodedInputStream* in, std::uint32_t* tag) {
  std::uint32_t v = 0;
  for (int i = 0; i < 5; ++i) {
    std::uint8_t b;
    if (!in->ReadRaw(&b, 1)) return false;
    v |= std::uint32_t{b & 0x7Fu} << (7 * i);
    if ((b & 0x80) == 0) {
      *tag = v;
      return (v >> 3) != 0;
    }
  }
  return false;
}

// Skips the value of a field with `tag`, refusing what protobuf's parser
// refuses (groups nest at most 100 deep, as its recursion limit).
bool SkipValue(google::protobuf::io::CodedInputStream* in, std::uint32_t tag,
               int depth = 0) {
  using google::protobuf::internal::WireFormatLite;
  switch (WireFormatLite::GetTagWireType(tag)) {
    case WireFormatLite::WIRETYPE_VARINT: {
      std::uint64_t v;
      return in->ReadVarint64(&v);
    }
    case WireFormatLite::WIRETYPE_FIXED64:
      return in->Skip(8);
    case WireFormatLite::WIRETYPE_FIXED32:
      return in->Skip(4);
    case WireFormatLite::WIRETYPE_LENGTH_DELIMITED: {
      int length;
      return ReadLength(in, &length) && in->Skip(length);
    }
    case WireFormatLite::WIRETYPE_START_GROUP:
      if (depth >= 100) return false;
      for (;;) {
        std::uint32_t inner;
        if (!ReadTag(in, &inner)) return false;
        if (WireFormatLite::GetTagWireType(inner) ==
            WireFormatLite::WIRETYPE_END_GROUP) {
          return WireFormatLite::GetTagFieldNumber(inner) ==
                 WireFormatLite::GetTagFieldNumber(tag);
        }
        if (!SkipValue(in, inner, depth + 1)) return false;
      }
    default:
      return false;
  }
}

}  // namespace

std::optional<std::size_t> CountBatchOperations(std::string_view wire,
                                                std::size_t limit) {
  using google::protobuf::internal::WireFormatLite;
  if (wire.size() > static_cast<std::size_t>(INT_MAX)) return std::nullopt;
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const std::uint8_t*>(wire.data()),
      static_cast<int>(wire.size()));
  std::size_t count = 0;
  while (static_cast<std::size_t>(in.CurrentPosition()) != wire.size()) {
    std::uint32_t tag;
    if (!ReadTag(&in, &tag)) return std::nullopt;
    // Only a length-delimited field 1 is an operation; protobuf keeps any
    // other wire type under that number as an unknown field.
    if (WireFormatLite::GetTagFieldNumber(tag) == 1 &&
        WireFormatLite::GetTagWireType(tag) ==
            WireFormatLite::WIRETYPE_LENGTH_DELIMITED &&
        ++count > limit) {
      return count;
    }
    if (!SkipValue(&in, tag)) return std::nullopt;
  }
  return count;
}

std::optional<std::string> KnownFieldsOnly(
    std::string_view wire, const google::protobuf::Descriptor* type) {
  using google::protobuf::FieldDescriptor;
  using google::protobuf::internal::WireFormatLite;
  if (wire.size() > static_cast<std::size_t>(INT_MAX)) return std::nullopt;
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const std::uint8_t*>(wire.data()),
      static_cast<int>(wire.size()));
  std::string out;
  for (;;) {
    const int start = in.CurrentPosition();
    if (static_cast<std::size_t>(start) == wire.size()) return out;
    std::uint32_t tag;
    if (!ReadTag(&in, &tag)) return std::nullopt;
    const int number = WireFormatLite::GetTagFieldNumber(tag);
    const FieldDescriptor* field = type->FindFieldByNumber(number);
    const int wire_type = WireFormatLite::GetTagWireType(tag);
    if (field != nullptr && field->type() == FieldDescriptor::TYPE_MESSAGE &&
        wire_type == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      int size;
      if (!ReadLength(&in, &size)) return std::nullopt;
      const int at = in.CurrentPosition();
      if (!in.Skip(size)) return std::nullopt;
      // Message types here do not nest themselves: the depth is the
      // schema's (BatchRequest, operation, request, time).
      auto inner =
          KnownFieldsOnly(wire.substr(at, size), field->message_type());
      if (!inner) return std::nullopt;
      AppendVarint(tag, &out);
      AppendVarint(inner->size(), &out);
      out += *inner;
      continue;
    }
    if (!SkipValue(&in, tag)) return std::nullopt;
    if (field != nullptr && ReadsAs(field, wire_type)) {
      out += wire.substr(start, in.CurrentPosition() - start);
    }
  }
}

namespace {

template <typename Time>
WireTime TimeOf(bool present, const Time& t) {
  if (!present) return {};
  return {true, t.seconds(), t.nanos()};
}

template <typename Time>
void SetTime(const WireTime& w, Time* t) {
  t->set_seconds(w.seconds);
  t->set_nanos(w.nanos);
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
  f.jitter = TimeOf(req.has_jitter(), req.jitter());
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

void ToProto(const OpFields& f, v1::BatchOperation* op) {
  using Kind = OpFields::Kind;
  switch (f.kind) {
    case Kind::kSet: {
      auto* set = op->mutable_set();
      set->set_namespace_(std::string(f.ns));
      set->set_key(std::string(f.key));
      set->set_payload(std::string(f.payload));
      if (f.delay.present) SetTime(f.delay, set->mutable_delay());
      if (f.fire_time.present) SetTime(f.fire_time, set->mutable_fire_time());
      set->set_if_absent(f.if_absent);
      if (f.jitter.present) SetTime(f.jitter, set->mutable_jitter());
      return;
    }
    case Kind::kMove: {
      auto* move = op->mutable_move();
      move->set_namespace_(std::string(f.ns));
      move->set_key(std::string(f.key));
      if (f.delay.present) SetTime(f.delay, move->mutable_delay());
      if (f.fire_time.present) SetTime(f.fire_time, move->mutable_fire_time());
      move->set_expected_version(f.expected_version);
      return;
    }
    case Kind::kRemove: {
      auto* remove = op->mutable_remove();
      remove->set_namespace_(std::string(f.ns));
      remove->set_key(std::string(f.key));
      remove->set_expected_version(f.expected_version);
      return;
    }
    case Kind::kNone:
      return;
  }
}

}  // namespace delayd
