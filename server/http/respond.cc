#include "server/http/respond.h"

#include "server/http/transcode.h"

namespace delayd::http {

std::string CorsLines(const Call& call) {
  if (call.origin == nullptr) return "";
  return "Access-Control-Allow-Origin: " + *call.origin +
         "\r\nVary: Origin\r\n";
}

void SendWhole(const Call& call, int status, std::string_view content_type,
               std::string head, std::string body, bool with_body, bool close) {
  std::string lines = "Content-Type: ";
  lines += content_type;
  lines += "\r\n";
  lines += head;
  lines += CorsLines(call);
  call.ex->Reply(status, std::move(lines), std::move(body), with_body, close);
}

void Send(const Call& call, int status, std::string json) {
  SendWhole(call, status, "application/json", "Cache-Control: no-store\r\n",
            std::move(json));
}

void SendError(const Call& call, const grpc::Status& status, int http,
               std::string head) {
  SendWhole(call, http != 0 ? http : HttpStatusOf(status.error_code()),
            "application/json", "Cache-Control: no-store\r\n" + head,
            ErrorBody(status));
}

}  // namespace delayd::http
