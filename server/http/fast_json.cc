#include "server/http/fast_json.h"

#include <absl/strings/escaping.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/stubs/common.h>
#include <simdjson.h>

#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>

namespace delayd::http::fast {
namespace {

namespace od = simdjson::ondemand;

static_assert(kPadding >= simdjson::SIMDJSON_PADDING);

// ---- Reading the plain form's values ----

struct Time {
  std::int64_t seconds = 0;
  std::int32_t nanos = 0;
};

// `s` as a non-negative integer written canonically (no sign, no leading
// zero but in "0"), within `max`.
bool Digits(std::string_view s, std::uint64_t max, std::uint64_t* out) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && *out <= max;
}

// "F" of "N.F": 1 to 9 digits, as nanoseconds.
bool Fraction(std::string_view s, std::int32_t* nanos) {
  if (s.empty() || s.size() > 9) return false;
  std::int32_t n = 0;
  for (std::size_t i = 0; i < 9; ++i) {
    if (i < s.size() && (s[i] < '0' || s[i] > '9')) return false;
    n = n * 10 + (i < s.size() ? s[i] - '0' : 0);
  }
  *nanos = n;
  return true;
}

// "N[.F]s", N within google.protobuf.Duration's range.
bool ParseDuration(std::string_view s, Time* out) {
  if (s.size() < 2 || s.back() != 's') return false;
  s.remove_suffix(1);
  const std::size_t dot = s.find('.');
  std::uint64_t seconds;
  if (!Digits(s.substr(0, dot), 315'576'000'000, &seconds)) return false;
  out->seconds = static_cast<std::int64_t>(seconds);
  out->nanos = 0;
  return dot == std::string_view::npos ||
         Fraction(s.substr(dot + 1), &out->nanos);
}

// The value of `n` fixed-width digits at `s`, or -1.
int Fixed(std::string_view s, std::size_t at, std::size_t n) {
  int v = 0;
  for (std::size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

// "YYYY-MM-DDTHH:MM:SS[.F]Z", years 0001 to 9999.
bool ParseTimestamp(std::string_view s, Time* out) {
  if (s.size() < 20 || s.back() != 'Z' || s[4] != '-' || s[7] != '-' ||
      s[10] != 'T' || s[13] != ':' || s[16] != ':') {
    return false;
  }
  const int y = Fixed(s, 0, 4), mo = Fixed(s, 5, 2), d = Fixed(s, 8, 2);
  const int h = Fixed(s, 11, 2), mi = Fixed(s, 14, 2), sec = Fixed(s, 17, 2);
  if (y < 1 || mo < 0 || d < 0 || h < 0 || h > 23 || mi < 0 || mi > 59 ||
      sec < 0 || sec > 59) {
    return false;
  }
  const std::chrono::year_month_day ymd{
      std::chrono::year(y), std::chrono::month(static_cast<unsigned>(mo)),
      std::chrono::day(static_cast<unsigned>(d))};
  if (!ymd.ok()) return false;
  out->seconds =
      std::chrono::sys_days(ymd).time_since_epoch().count() * 86'400LL +
      h * 3600 + mi * 60 + sec;
  out->nanos = 0;
  if (s.size() == 20) return true;
  return s[19] == '.' && Fraction(s.substr(20, s.size() - 21), &out->nanos);
}

// A JSON string token's contents, if it has no escape and no control
// character (the parser has checked its UTF-8).
std::optional<std::string_view> PlainString(od::value v) {
  std::string_view token = v.raw_json_token();
  while (!token.empty() && (token.back() == ' ' || token.back() == '\t' ||
                            token.back() == '\n' || token.back() == '\r')) {
    token.remove_suffix(1);
  }
  if (token.size() < 2 || token.front() != '"' || token.back() != '"') {
    return std::nullopt;
  }
  token = token.substr(1, token.size() - 2);
  for (const char c : token) {
    if (c == '\\' || static_cast<unsigned char>(c) < 0x20) return std::nullopt;
  }
  // raw_json_token() only looks at the value; reading it moves the
  // iterator past it, so that the object's next step checks the separator
  // after it. (Left unread, that step skips the value, and simdjson's skip
  // takes a string followed by ':' for a member's name: what followed was
  // never checked.)
  od::raw_json_string read;
  if (v.get_raw_json_string().get(read)) return std::nullopt;
  return token;
}

// ---- One operation's fields ----

enum Field : unsigned {
  kNs = 1,
  kKey = 2,
  kPayload = 4,
  kDelay = 8,
  kFireTime = 16,
  kIfAbsent = 32,
  kJitter = 64,
  kExpected = 128,
};

struct Op {
  unsigned seen = 0;
  std::string_view ns, key, payload64;
  Time delay, fire_time, jitter;
  bool if_absent = false;
  std::uint64_t expected = 0;
};

// The field a member name means (by its proto or JSON name), or 0.
Field FieldNamed(std::string_view name) {
  static constexpr std::array<std::pair<std::string_view, Field>, 11> kNames{{
      {"namespace", kNs},
      {"key", kKey},
      {"payload", kPayload},
      {"delay", kDelay},
      {"fireTime", kFireTime},
      {"fire_time", kFireTime},
      {"ifAbsent", kIfAbsent},
      {"if_absent", kIfAbsent},
      {"jitter", kJitter},
      {"expectedVersion", kExpected},
      {"expected_version", kExpected},
  }};
  for (const auto& [n, f] : kNames) {
    if (n == name) return f;
  }
  return Field{};
}

bool ReadValue(Field f, od::value v, Op* op) {
  if (f == kIfAbsent) {
    od::json_type type;
    return !v.type().get(type) && type == od::json_type::boolean &&
           !v.get_bool().get(op->if_absent);
  }
  std::string_view text;
  if (f == kExpected) {
    od::json_type type;
    if (v.type().get(type)) return false;
    if (type == od::json_type::number) {
      text = v.raw_json_token();
      text = text.substr(0, text.find_first_of(" \t\r\n"));
      std::uint64_t read;  // (read past it: see PlainString)
      return Digits(text, UINT64_MAX, &op->expected) &&
             !v.get_uint64().get(read);
    }
  }
  const auto s = PlainString(v);
  if (!s) return false;
  switch (f) {
    case kNs:
      op->ns = *s;
      return true;
    case kKey:
      op->key = *s;
      return true;
    case kPayload:
      op->payload64 = *s;
      return true;
    case kDelay:
      return ParseDuration(*s, &op->delay);
    case kJitter:
      return ParseDuration(*s, &op->jitter);
    case kFireTime:
      return ParseTimestamp(*s, &op->fire_time);
    case kExpected:
      return Digits(*s, UINT64_MAX, &op->expected);
    default:
      return false;
  }
}

// An operation's object, each member one of `allowed` and given once; the
// two members of the `when` oneof never both.
bool ReadOp(od::object object, unsigned allowed, Op* op) {
  for (auto member : object) {
    std::string_view name;
    od::value value;
    if (member.unescaped_key().get(name) || member.value().get(value)) {
      return false;
    }
    const Field f = FieldNamed(name);
    if ((f & allowed) == 0 || (op->seen & f) != 0) return false;
    op->seen |= f;
    if (!ReadValue(f, value, op)) return false;
  }
  return (op->seen & (kDelay | kFireTime)) != (kDelay | kFireTime);
}

// ---- The wire format ----

constexpr int kLen = 2;  // wire type of strings, bytes and messages

void Varint(std::uint64_t v, std::string* out) {
  std::uint8_t buf[10];
  const std::uint8_t* end =
      google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(v, buf);
  out->append(reinterpret_cast<const char*>(buf), end - buf);
}

void Tag(int field, int wire_type, std::string* out) {
  Varint(static_cast<std::uint64_t>(field) << 3 | wire_type, out);
}

// A string or bytes field (omitted when empty, as proto3 omits it).
void Delimited(int field, std::string_view bytes, std::string* out) {
  if (bytes.empty()) return;
  Tag(field, kLen, out);
  Varint(bytes.size(), out);
  out->append(bytes);
}

void Uint(int field, std::uint64_t v, std::string* out) {
  if (v == 0) return;
  Tag(field, 0, out);
  Varint(v, out);
}

// A message field written by `write` in place after its tag, its length
// put in front once known (no copy while it fits one byte, as an
// operation does).
template <typename Write>
void Nested(int field, std::string* out, Write write) {
  Tag(field, kLen, out);
  const std::size_t at = out->size();
  out->push_back(0);
  write(out);
  const std::size_t length = out->size() - at - 1;
  std::string prefix;
  Varint(length, &prefix);
  out->replace(at, 1, prefix);
}

void TimeField(int field, Time t, std::string* out) {
  Nested(field, out, [&](std::string* m) {
    Uint(1, static_cast<std::uint64_t>(t.seconds), m);
    Uint(2, static_cast<std::uint64_t>(static_cast<std::int64_t>(t.nanos)), m);
  });
}

// The canonical standard base64 of `text` decoded, appended as field
// `field`. (The decoded bytes and the check use buffers kept per thread.)
bool Base64Field(int field, std::string_view text, std::string* out) {
  thread_local std::string bytes, check;
  const absl::string_view in(text.data(), text.size());
  if (!absl::Base64Unescape(in, &bytes)) return false;
  absl::Base64Escape(bytes, &check);
  if (check != text) return false;
  Delimited(field, bytes, out);
  return true;
}

// A SetTimerRequest's (Move's, Remove's) fields, numbered as in delayd.proto.
bool WriteSet(const Op& op, std::string* out) {
  Delimited(1, op.ns, out);
  Delimited(2, op.key, out);
  if (!Base64Field(3, op.payload64, out)) return false;
  if (op.seen & kDelay) TimeField(4, op.delay, out);
  if (op.seen & kFireTime) TimeField(5, op.fire_time, out);
  Uint(6, op.if_absent ? 1 : 0, out);
  if (op.seen & kJitter) TimeField(7, op.jitter, out);
  return true;
}

void WriteMove(const Op& op, std::string* out) {
  Delimited(1, op.ns, out);
  Delimited(2, op.key, out);
  if (op.seen & kDelay) TimeField(3, op.delay, out);
  if (op.seen & kFireTime) TimeField(4, op.fire_time, out);
  Uint(5, op.expected, out);
}

void WriteRemove(const Op& op, std::string* out) {
  Delimited(1, op.ns, out);
  Delimited(2, op.key, out);
  Uint(3, op.expected, out);
}

constexpr unsigned kSetFields =
    kNs | kKey | kPayload | kDelay | kFireTime | kIfAbsent | kJitter;
constexpr unsigned kMoveFields = kNs | kKey | kDelay | kFireTime | kExpected;
constexpr unsigned kRemoveFields = kNs | kKey | kExpected;

// One BatchOperation's JSON object as its wire bytes.
bool ReadBatchOperation(od::object object, std::string* out) {
  bool one = false;
  for (auto member : object) {
    std::string_view name;
    od::object inner;
    if (one || member.unescaped_key().get(name) ||
        member.value().get_object().get(inner)) {
      return false;
    }
    one = true;
    Op op;
    bool ok = true;
    if (name == "set" && ReadOp(inner, kSetFields, &op)) {
      Nested(1, out, [&](std::string* m) { ok = WriteSet(op, m); });
    } else if (name == "move" && ReadOp(inner, kMoveFields, &op)) {
      Nested(2, out, [&](std::string* m) { WriteMove(op, m); });
    } else if (name == "remove" && ReadOp(inner, kRemoveFields, &op)) {
      Nested(3, out, [&](std::string* m) { WriteRemove(op, m); });
    } else {
      return false;
    }
    if (!ok) return false;
  }
  return true;
}

// The parser, kept per thread for bodies up to kKeptCapacity (a Batch of
// about 500 sets), made per call for larger ones. A parser's buffers grow to
// the largest document it read, about 6 bytes per byte of JSON: kept, at most
// 0.4 MB per door thread.
constexpr std::size_t kKeptCapacity = 64 << 10;

template <typename Read>
std::optional<std::string> Parse(const std::string& body, Read read) {
  thread_local od::parser kept;
  od::parser once;
  od::parser& parser = body.size() <= kKeptCapacity ? kept : once;
  simdjson::padded_string copy;
  simdjson::padded_string_view view;
  if (body.capacity() - body.size() >= simdjson::SIMDJSON_PADDING) {
    view =
        simdjson::padded_string_view(body.data(), body.size(), body.capacity());
  } else {
    copy = simdjson::padded_string(body);
    view = copy;
  }
  od::document doc;
  od::object top;
  if (parser.iterate(view).get(doc) || doc.get_object().get(top)) {
    return std::nullopt;
  }
  std::string wire;
  wire.reserve(body.size());  // (never longer than its JSON)
  // (With the top object read, the document must have nothing after it.)
  if (!read(top, &wire) ||
      doc.current_location().error() != simdjson::OUT_OF_BOUNDS) {
    return std::nullopt;
  }
  return wire;
}

bool ValidUtf8(std::string_view s) {
  return google::protobuf::internal::IsStructurallyValidUTF8(
      s.data(), static_cast<int>(s.size()));
}

}  // namespace

std::optional<std::string> BatchRequestWire(const std::string& body) {
  return Parse(body, [](od::object top, std::string* wire) {
    bool one = false;
    for (auto member : top) {
      std::string_view name;
      od::array ops;
      if (one || member.unescaped_key().get(name) || name != "operations" ||
          member.value().get_array().get(ops)) {
        return false;
      }
      one = true;
      for (auto element : ops) {
        od::object object;
        if (element.get_object().get(object)) return false;
        bool ok = false;
        Nested(1, wire,
               [&](std::string* m) { ok = ReadBatchOperation(object, m); });
        if (!ok) return false;
      }
    }
    return one;
  });
}

std::optional<std::string> SetTimerRequestWire(const std::string& body,
                                               std::string_view ns,
                                               std::string_view key) {
  if (!ValidUtf8(ns) || !ValidUtf8(key)) return std::nullopt;
  return Parse(body, [&](od::object top, std::string* wire) {
    Op op;
    if (!ReadOp(top, kSetFields, &op) || ((op.seen & kNs) && op.ns != ns) ||
        ((op.seen & kKey) && op.key != key)) {
      return false;
    }
    op.ns = ns;
    op.key = key;
    return WriteSet(op, wire);
  });
}

}  // namespace delayd::http::fast
