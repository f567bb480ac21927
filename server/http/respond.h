// Writing answers to an exchange (exchange.h): JSON, errors, and the CORS
// headers each answer carries.
#ifndef DELAYD_SERVER_HTTP_RESPOND_H_
#define DELAYD_SERVER_HTTP_RESPOND_H_

#include <grpcpp/support/status.h>

#include <memory>
#include <string>
#include <string_view>

#include "server/http/exchange.h"

namespace delayd::http {

// A request being answered: its exchange, and the origin its answer names
// to browsers (an allowed CORS origin; null: none).
struct Call {
  std::shared_ptr<Exchange> ex;
  const std::string* origin = nullptr;
};

// The CORS header lines for `call`'s origin (empty if none).
std::string CorsLines(const Call& call);
// A whole answer: `head` is complete header lines, to which Content-Type and
// the CORS lines are added; without `with_body` (HEAD), the body's length
// is sent but not the body; `close` ends the connection after it.
void SendWhole(const Call& call, int status, std::string_view content_type,
               std::string head, std::string body, bool with_body = true,
               bool close = false);
// A whole JSON answer, not to be cached.
void Send(const Call& call, int status, std::string json);
// An error answer (transcode.h's ErrorBody); `http` overrides the status
// that the gRPC code maps to; `head` adds header lines (e.g. Allow).
void SendError(const Call& call, const grpc::Status& status, int http = 0,
               std::string head = "");

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_RESPOND_H_
