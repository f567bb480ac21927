// A Batch request read straight from its wire bytes, for the daemon's
// busiest call. Parsing into protobuf messages allocates a heap string for
// every key and payload longer than 15 bytes (protobuf 3.21 puts the string
// objects on the arena but not their contents), and freeing them again was a
// quarter of the daemon's CPU under Batch load. This reader returns views into
// the request bytes instead; it accepts only the plain encoding every protobuf
// library writes and leaves anything else to protobuf's own parser, so a
// request means exactly what protobuf says it means.
#ifndef DELAYD_SERVER_API_BATCH_WIRE_H_
#define DELAYD_SERVER_API_BATCH_WIRE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "delayd/v1/delayd.pb.h"

namespace delayd {

// A google.protobuf.Duration or Timestamp, and whether it was set.
struct WireTime {
  bool present = false;
  std::int64_t seconds = 0;
  std::int32_t nanos = 0;
  bool operator==(const WireTime&) const = default;
};

// The fields of one set, move or remove, as views into the message or the
// request bytes they were read from (valid as long as those are).
struct OpFields {
  enum class Kind { kNone, kSet, kMove, kRemove };
  Kind kind = Kind::kNone;
  std::string_view ns, key, payload;
  WireTime delay, fire_time;
  WireTime jitter;  // Set only.
  bool if_absent = false;
  std::uint64_t expected_version = 0;
  bool operator==(const OpFields&) const = default;
};

enum class WireRead {
  kOk,
  // More than the allowed number of operations: reading stopped there.
  kTooMany,
  // Not the plain encoding: protobuf's parser must decide.
  kNotPlain,
};

// Reads a serialized delayd.v1.BatchRequest into `ops` (one entry per
// operation, kNone for an operation with no op set), stopping at the
// (max_ops + 1)-th operation with kTooMany, so that memory never grows with
// a request's length beyond that. kNotPlain, with `ops` unspecified, unless
// every message in it holds only fields of its type, each at most once (at
// most one member of a oneof), in their declared wire types, with ASCII in
// every `string` field; such a request must be parsed with protobuf, which
// may still find it valid (repeated fields merge, unknown fields are skipped,
// UTF-8 is checked) or not.
WireRead ReadBatchRequest(std::string_view wire, std::size_t max_ops,
                          std::vector<OpFields>* ops);

// Counts the operations of a serialized BatchRequest in any encoding
// protobuf accepts, without parsing them, stopping at `limit` + 1. Returns
// nullopt if the top level does not scan as protobuf's parser reads fields
// (it would refuse it too). Used before protobuf parses a request, whose memory
// grows with the operation count.
std::optional<std::size_t> CountBatchOperations(std::string_view wire,
                                                std::size_t limit);

// `wire`, a serialized message of `type`, re-encoded with only the fields
// `type` knows, at every level (fields copied as they are, nested messages
// rewritten). Protobuf parses both to the same message, but keeps every
// unknown field as an entry of its own: 4 MB of 2-byte unknown fields took
// 32 MB or more to parse. Returns nullopt if `wire` does not scan as fields
// where protobuf would refuse it too. The result is never longer than
// `wire`.
std::optional<std::string> KnownFieldsOnly(
    std::string_view wire, const google::protobuf::Descriptor* type);

// The same fields of parsed messages.
OpFields FieldsOf(const v1::SetTimerRequest& req);
OpFields FieldsOf(const v1::MoveTimerRequest& req);
OpFields FieldsOf(const v1::RemoveTimerRequest& req);
OpFields FieldsOf(const v1::BatchOperation& op);
// And back: an operation whose FieldsOf is `f` (a Batch split between the
// nodes owning its keys sends each its operations so).
void ToProto(const OpFields& f, v1::BatchOperation* op);

}  // namespace delayd

#endif  // DELAYD_SERVER_API_BATCH_WIRE_H_
