// The HTTP/1.1 server under the door (http_door.h): Boost.Beast on its own
// Boost.Asio event loop (Beast takes no standalone Asio, which the daemon's
// core runs on; the two loops share nothing). It reads requests and hands
// each whole one to the door as an Exchange (exchange.h); no thread waits
// on a client or on a call.
//
// What a client can hold, and for how long:
//   - connections: at most `max_connections`. One more closes the oldest
//     idle connection (waiting for its next request), or if none is idle
//     the one whose request has been arriving longest (a slowloris); if
//     every connection has a request in hand, the new one is refused;
//   - an idle connection: `idle_timeout`, then it is closed;
//   - a request: from its first byte, its headers (at most 16 KiB) and its
//     body (at most `max_body_bytes`: 413 beyond, and the connection
//     closes) must arrive within `request_timeout`, or the connection
//     closes;
//   - an answer or a streamed write: `write_timeout` to leave, or the
//     connection closes.
// TLS (http_tls.h): each new connection's handshake takes the certificates
// in use then; the handshake counts as the request's first part.
//
// Thread safety: Start and the destructor from one thread; a connection's
// work runs on its own strand of the loop's `threads`.
#ifndef DELAYD_SERVER_HTTP_HTTP_SERVER_H_
#define DELAYD_SERVER_HTTP_HTTP_SERVER_H_

#include <grpcpp/support/status.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "server/http/exchange.h"

namespace delayd::http {

class HttpTls;

class HttpServer {
 public:
  struct Options {
    std::string listen;  // host:port (IPv4), port 0 for any
    int threads = 2;
    std::chrono::milliseconds request_timeout = std::chrono::seconds(10);
    std::chrono::milliseconds idle_timeout = std::chrono::seconds(60);
    std::chrono::milliseconds write_timeout = std::chrono::seconds(30);
    std::size_t max_body_bytes = 4 << 20;
    std::size_t max_connections = 10000;
  };
  // Given each request read whole, on the connection's strand; it answers
  // through the exchange, now or later, from any thread.
  using Handler = std::function<void(std::shared_ptr<Exchange>)>;

  // Listens on options.listen (with TLS if `tls` is not null; it outlives
  // the server). Fails, with why, if the address cannot be bound.
  static grpc::Status Start(const Options& options, HttpTls* tls,
                            Handler handler, std::unique_ptr<HttpServer>* out);
  // Stops accepting, closes every connection (an exchange not answered
  // yet is answered into the void), and joins the loop's threads.
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  // Connections open now.
  std::size_t connections() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_HTTP_SERVER_H_
