#include <civetweb.h>

#include <string>

#include "server/http/console_assets.h"

namespace delayd::http {
namespace {

const char* ContentType(std::string_view path) {
  if (path == "/") return "text/html; charset=utf-8";
  if (path.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (path.ends_with(".css")) return "text/css; charset=utf-8";
  if (path.ends_with(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

}  // namespace

bool ServeConsole(mg_connection* conn, std::string_view path) {
  if (path == "/index.html") path = "/";
  for (const Asset& a : ConsoleAssets()) {
    if (a.path != path) continue;
    mg_response_header_start(conn, 200);
    mg_response_header_add(conn, "Content-Type", ContentType(path), -1);
    // Revalidated on each load, so a new daemon's console is never mixed
    // with an old one's cached script.
    mg_response_header_add(conn, "Cache-Control", "no-cache", -1);
    mg_response_header_add(
        conn, "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "img-src 'self'; connect-src 'self'; form-action 'none'; "
        "base-uri 'none'; frame-ancestors 'none'",
        -1);
    mg_response_header_add(conn, "X-Content-Type-Options", "nosniff", -1);
    mg_response_header_add(conn, "Referrer-Policy", "no-referrer", -1);
    mg_response_header_add(conn, "Content-Length",
                           std::to_string(a.body.size()).c_str(), -1);
    mg_response_header_send(conn);
    if (std::string_view(mg_get_request_info(conn)->request_method) != "HEAD") {
      mg_write(conn, a.body.data(), a.body.size());
    }
    return true;
  }
  return false;
}

}  // namespace delayd::http
