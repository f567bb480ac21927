#include <civetweb.h>

#include <string>

#include "server/http/console_assets.h"
#include "server/http/respond.h"

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
    // Revalidated on each load, so a new daemon's console is never mixed
    // with an old one's cached script.
    static constexpr std::string_view kHeaders =
        "Cache-Control: no-cache\r\n"
        "Content-Security-Policy: default-src 'none'; script-src 'self'; "
        "style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'none'; base-uri 'none'; frame-ancestors 'none'\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        "Referrer-Policy: no-referrer\r\n";
    SendWhole(
        conn, 200, ContentType(path), kHeaders, a.body,
        std::string_view(mg_get_request_info(conn)->request_method) != "HEAD");
    return true;
  }
  return false;
}

}  // namespace delayd::http
