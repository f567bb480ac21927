// The HTTP door's two busiest calls, SetTimer and Batch, read from JSON into
// their wire format and answered in JSON without protobuf's JSON mapping.
// Protobuf 3.21 maps JSON through a type description it rebuilds from the
// descriptor on every call; at about 11 KB of JSON a Batch of 100, that was
// most of the door's cost (tests/bench/README.md, "The HTTP door").
//
// The readers take only the plain form of a request, the one clients write:
// each field at most once, by its lowerCamelCase or proto name; strings
// without escapes or control characters; durations as "N[.F]s" and
// timestamps as "YYYY-MM-DDTHH:MM:SS[.F]Z", canonically written; payloads in
// canonical standard base64; expectedVersion as digits, quoted or not. Any
// other body gets nullopt, and the caller hands it to protobuf's parser,
// which accepts it or says what is wrong. So a request means exactly what
// protobuf says it means; these functions only skip the slow road.
//
// The writers write what protobuf's printer does (transcode.h ToJson), or
// return nullopt when a string holds a character beyond ASCII, whose escape
// they leave to the printer.
#ifndef DELAYD_SERVER_HTTP_FAST_JSON_H_
#define DELAYD_SERVER_HTTP_FAST_JSON_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "delayd/v1/delayd.pb.h"

namespace delayd::http::fast {

// Bytes a body should have allocated past its end (std::string::capacity)
// for the readers to parse it in place; with fewer, they parse a copy.
inline constexpr std::size_t kPadding = 64;

// A BatchRequest's JSON as a serialized delayd.v1.BatchRequest.
std::optional<std::string> BatchRequestWire(const std::string& body);

// A SetTimer body as a serialized delayd.v1.SetTimerRequest, with the
// namespace and key of its path (a body that also names either must agree).
std::optional<std::string> SetTimerRequestWire(const std::string& body,
                                               std::string_view ns,
                                               std::string_view key);

std::optional<std::string> ResponseJson(const v1::BatchResponse& response);
std::optional<std::string> ResponseJson(const v1::SetTimerResponse& response);

}  // namespace delayd::http::fast

#endif  // DELAYD_SERVER_HTTP_FAST_JSON_H_
