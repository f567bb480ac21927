// Writing answers on a civetweb connection.
#ifndef DELAYD_SERVER_HTTP_RESPOND_H_
#define DELAYD_SERVER_HTTP_RESPOND_H_

#include <grpcpp/support/status.h>

#include <string>
#include <string_view>

struct mg_connection;

namespace delayd::http {

// The CORS headers for the connection's current request: if the door set
// its user data to an allowed origin (a std::string), that origin.
void AddCorsHeaders(mg_connection* conn);
// A whole answer in one write: `headers` are complete lines ("Name:
// value\r\n"), to which Date, the CORS headers and Content-Length are added;
// without `with_body` (HEAD), the body's length is sent but not the body.
void SendWhole(mg_connection* conn, int status, std::string_view content_type,
               std::string_view headers, std::string_view body,
               bool with_body = true);
// A whole JSON answer, not to be cached.
void Send(mg_connection* conn, int status, const std::string& json);
// An error answer (transcode.h's ErrorBody); `http` overrides the status
// that the gRPC code maps to.
void SendError(mg_connection* conn, const grpc::Status& status, int http = 0);

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_RESPOND_H_
