// The HTTP/JSON door: delayd's unary RPCs over HTTP/1.1 (routes.h), served
// by civetweb (already in the binary through prometheus-cpp's metrics
// endpoint; Debian-packaged; bounded threads, request size and timeouts).
//
// Each request becomes a call to the daemon's own gRPC service over an
// in-process channel, with the request's `Authorization` header as the
// call's `authorization` metadata: the same validation, tokens and
// permissions, bounds and metrics as a gRPC client gets, with nothing to
// keep in step. What the door adds is HTTP's own limits:
//   - at most `threads` requests at once (each holds a civetweb thread);
//     further connections wait in the listen queue;
//   - a request's headers and body must arrive within `request_timeout` (a
//     client that sends a byte at a time loses its connection), and a body
//     is at most `max_body_bytes` (413 beyond it, before it is read);
//   - a call is given `call_deadline`;
//   - watches (Server-Sent Events, http_events.h) take at most half the
//     threads; another gets 429;
//   - TLS with the gRPC port's certificates, if it has them (http_tls.h);
//   - browsers: CORS only for `cors_origins`, and a call other than GET
//     from a page of another origin is refused (a browser sends some
//     cross-origin POSTs without asking first).
// It also serves the web console's files (console_assets.h).
//
// Thread safety: civetweb calls Serve() on its worker threads; after
// Start() the door's only mutable state is the atomic count of watches and
// the TLS identity (swapped under HttpTls's mutex).
#ifndef DELAYD_SERVER_HTTP_HTTP_DOOR_H_
#define DELAYD_SERVER_HTTP_HTTP_DOOR_H_

#include <grpcpp/channel.h>
#include <grpcpp/impl/rpc_method.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/http/http_events.h"
#include "server/http/http_tls.h"
#include "server/http/routes.h"

struct mg_connection;
struct mg_context;

namespace delayd::http {

class HttpDoor {
 public:
  struct Options {
    std::string listen;  // host:port (IPv4), port 0 for any
    int threads = 16;
    std::chrono::milliseconds request_timeout = std::chrono::seconds(10);
    std::size_t max_body_bytes = 4 << 20;
    std::chrono::milliseconds call_deadline = std::chrono::seconds(30);
    // Origins whose pages may call the API from a browser (CORS): exact
    // "scheme://host[:port]" strings, or "*". Empty: no CORS headers, and
    // a preflight is refused.
    std::vector<std::string> cors_origins;
    // HTTPS with these certificates (http_tls.h); plain HTTP if unset.
    std::optional<TlsPem> tls;
  };

  // Starts listening. Fails (with why) if the address cannot be bound.
  static grpc::Status Start(const Options& options,
                            std::shared_ptr<grpc::Channel> channel,
                            std::unique_ptr<HttpDoor>* out);
  ~HttpDoor();  // Stops: waits for requests in progress.
  HttpDoor(const HttpDoor&) = delete;
  HttpDoor& operator=(const HttpDoor&) = delete;

  int port() const { return port_; }
  // New certificates for handshakes from now on (SIGHUP); FAILED_PRECONDITION
  // without TLS.
  grpc::Status SetTls(const TlsPem& pem);

 private:
  HttpDoor(const Options& options, std::shared_ptr<grpc::Channel> channel);
  static int Handle(mg_connection* conn, void* self);
  void Serve(mg_connection* conn);
  void ServeUnary(mg_connection* conn, const Match& m, std::string_view query,
                  const std::string& body);
  // SetTimer and Batch in their plain JSON form (fast_json.h), passed as
  // wire bytes; false, having sent nothing, for any other request.
  bool ServeFast(mg_connection* conn, const Match& m, std::string_view query,
                 const std::string& body);
  // The deadline and the caller's Authorization header.
  void PrepareCall(mg_connection* conn, grpc::ClientContext* ctx) const;
  // A watch, if fewer than half the threads hold one.
  void Watch(mg_connection* conn, const Match& m, std::string_view query,
             const EventCall& events);
  // The allowed origin matching the request's Origin header, or null.
  const std::string* AllowedOrigin(mg_connection* conn) const;
  // Whether the request has no Origin or comes from a page of the door's
  // own origin (the console's).
  bool SameOrigin(mg_connection* conn) const;
  // Answers a CORS preflight (OPTIONS with Access-Control-Request-Method).
  void Preflight(mg_connection* conn, const std::string* origin);
  // Reads the body into *body; false (the response sent) if it is too big or
  // does not arrive whole.
  bool ReadBody(mg_connection* conn, std::string* body);

  const Options options_;
  std::shared_ptr<grpc::Channel> channel_;
  // The unary methods, by descriptor (built once: a method registered with
  // the channel skips its lookup on each call).
  struct Method {
    std::string path;  // "/delayd.v1.Delayd/SetTimer"
    std::unique_ptr<grpc::internal::RpcMethod> rpc;
  };
  std::unordered_map<const google::protobuf::MethodDescriptor*, Method>
      methods_;
  std::unique_ptr<v1::Delayd::Stub> events_stub_;  // pulls and watches
  // Watches hold a thread each for as long as they last: at most half the
  // threads, so that calls are still served.
  std::atomic<int> watches_{0};
  const std::string openapi_;  // GET /v1/openapi.json
  std::unique_ptr<HttpTls> tls_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
};

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_HTTP_DOOR_H_
