#include "server/http/respond.h"

#include <civetweb.h>

#include <ctime>
#include <string>
#include <string_view>

#include "server/http/transcode.h"

namespace delayd::http {
namespace {

// RFC 9110's Date, remade once a second per thread.
const std::string& DateHeader() {
  thread_local std::time_t second = 0;
  thread_local std::string value;
  const std::time_t now = std::time(nullptr);
  if (now != second) {
    second = now;
    std::tm tm;
    gmtime_r(&now, &tm);
    char buf[64];
    value.assign(
        buf, std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm));
  }
  return value;
}

const std::string* CorsOrigin(mg_connection* conn) {
  return static_cast<const std::string*>(mg_get_user_connection_data(conn));
}

}  // namespace

void AddCorsHeaders(mg_connection* conn) {
  const std::string* origin = CorsOrigin(conn);
  if (origin == nullptr) return;
  mg_response_header_add(conn, "Access-Control-Allow-Origin", origin->c_str(),
                         -1);
  mg_response_header_add(conn, "Vary", "Origin", -1);
}

void SendWhole(mg_connection* conn, int status, std::string_view content_type,
               std::string_view headers, std::string_view body,
               bool with_body) {
  // Status line, headers and body in one write, so one segment and one
  // wake-up of the client: civetweb's header calls write the headers
  // apart, which cost a system call and a wake-up more per answer (about a
  // quarter of the door's CPU under load).
  std::string out;
  out.reserve(body.size() + headers.size() + 256);
  out += "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += mg_get_response_code_text(conn, status);
  out += "\r\nContent-Type: ";
  out += content_type;
  out += "\r\n";
  out += headers;
  out += "Date: " + DateHeader() + "\r\n";
  if (const std::string* origin = CorsOrigin(conn)) {
    out += "Access-Control-Allow-Origin: " + *origin + "\r\nVary: Origin\r\n";
  }
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  if (with_body) out += body;
  mg_write(conn, out.data(), out.size());
}

void Send(mg_connection* conn, int status, const std::string& json) {
  SendWhole(conn, status, "application/json", "Cache-Control: no-store\r\n",
            json);
}

void SendError(mg_connection* conn, const grpc::Status& status, int http) {
  Send(conn, http != 0 ? http : HttpStatusOf(status.error_code()),
       ErrorBody(status));
}

}  // namespace delayd::http
