#include "server/http/respond.h"

#include <civetweb.h>

#include <string>

#include "server/http/transcode.h"

namespace delayd::http {

void AddCorsHeaders(mg_connection* conn) {
  const auto* origin =
      static_cast<const std::string*>(mg_get_user_connection_data(conn));
  if (origin == nullptr) return;
  mg_response_header_add(conn, "Access-Control-Allow-Origin", origin->c_str(),
                         -1);
  mg_response_header_add(conn, "Vary", "Origin", -1);
}

void Send(mg_connection* conn, int status, const std::string& json) {
  mg_response_header_start(conn, status);
  AddCorsHeaders(conn);
  mg_response_header_add(conn, "Content-Type", "application/json", -1);
  mg_response_header_add(conn, "Cache-Control", "no-store", -1);
  mg_response_header_add(conn, "Content-Length",
                         std::to_string(json.size()).c_str(), -1);
  mg_response_header_send(conn);
  mg_write(conn, json.data(), json.size());
}

void SendError(mg_connection* conn, const grpc::Status& status, int http) {
  Send(conn, http != 0 ? http : HttpStatusOf(status.error_code()),
       ErrorBody(status));
}

}  // namespace delayd::http
