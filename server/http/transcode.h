// Between HTTP/JSON and an RPC's messages, with protobuf's JSON mapping:
// lowerCamelCase names (proto names accepted too), durations as "1.5s",
// timestamps in RFC 3339, bytes in base64, 64-bit integers as strings.
//
// A request message is filled from the JSON body (routes that take one) or
// the query string (routes that do not: `?pageSize=10&keyPrefix=a`, each
// name a field of the request, repeated for a repeated field), then from the
// path's variables. A variable also given in the body must agree with the
// path.
#ifndef DELAYD_SERVER_HTTP_TRANSCODE_H_
#define DELAYD_SERVER_HTTP_TRANSCODE_H_

#include <google/protobuf/message.h>
#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

#include "server/http/routes.h"

namespace delayd::http {

// Fills `out` (empty, of the route's request type). INVALID_ARGUMENT names
// the field or the position in the body that is wrong.
grpc::Status BuildRequest(const Match& m, std::string_view query,
                          std::string_view body,
                          google::protobuf::Message* out);

// `message` as a JSON object, with fields at their defaults included (a
// client reads `"replaced": false`, not an absent field).
std::string ToJson(const google::protobuf::Message& message);

// The HTTP status for a gRPC code, as Google's API design guide maps them
// (google.rpc.Code): INVALID_ARGUMENT 400, NOT_FOUND 404, ...
int HttpStatusOf(grpc::StatusCode code);

// {"error": {"code": <HTTP status>, "status": "NOT_FOUND", "message": ...}},
// the shape of Google's JSON errors, with the gRPC code's name as status.
std::string ErrorBody(const grpc::Status& status);

// Percent-decodes a query string's name or value (`+` is a space).
std::string DecodeQueryPart(std::string_view s);

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_TRANSCODE_H_
