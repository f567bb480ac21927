// The HTTP/JSON door: delayd's unary RPCs over HTTP/1.1 (routes.h), served
// by http_server.h (Boost.Beast) without a thread per connection or call.
//
// Each request becomes a call to the daemon's own gRPC service over an
// in-process channel (gRPC's callback API), with the request's
// `Authorization` header as the call's `authorization` metadata: the same
// validation, tokens and permissions, bounds and metrics as a gRPC client
// gets, with nothing to keep in step. What the door adds is HTTP's own
// limits:
//   - connections, idle and slow clients, request size and time
//     (http_server.h); a call is given `call_deadline`;
//   - watches (Server-Sent Events, http_events.h): at most `max_watches`
//     at once; another gets 429;
//   - TLS with the gRPC port's certificates, if it has them (http_tls.h);
//   - browsers: CORS only for `cors_origins`, and a call other than GET
//     from a page of another origin is refused (a browser sends some
//     cross-origin POSTs without asking first).
// It also serves the web console's files (console_assets.h).
//
// Thread safety: Serve runs on the server's threads, each call's answer on
// gRPC's; after Start the door's mutable state is the calls under way
// (InFlight, under its mutex), the count of watches (atomic) and the TLS
// identity (HttpTls's mutex).
#ifndef DELAYD_SERVER_HTTP_HTTP_DOOR_H_
#define DELAYD_SERVER_HTTP_HTTP_DOOR_H_

#include <grpcpp/channel.h>
#include <grpcpp/impl/rpc_method.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/common/mutex.h"
#include "server/http/http_events.h"
#include "server/http/http_server.h"
#include "server/http/http_tls.h"
#include "server/http/respond.h"
#include "server/http/routes.h"

namespace delayd::http {

// The calls the door has under way, so that stopping can end them and wait
// for their answers. Thread safety: any thread; mu_ guards the registry.
class InFlight {
 public:
  // Registers a call; nullopt if the door is stopping (refuse it then).
  std::optional<std::uint64_t> Add() EXCLUDES(mu_);
  // How to end call `id` early (it may have ended already).
  void SetCancel(std::uint64_t id, std::function<void()> cancel) EXCLUDES(mu_);
  void Done(std::uint64_t id) EXCLUDES(mu_);
  // Refuses new calls, cancels those under way and waits (up to
  // `deadline`) for their ends.
  void Stop(std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_);

 private:
  Mutex mu_;
  CondVar none_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::uint64_t next_ GUARDED_BY(mu_) = 1;
  std::map<std::uint64_t, std::function<void()>> calls_ GUARDED_BY(mu_);
};

class HttpDoor {
 public:
  struct Options {
    std::string listen;  // host:port (IPv4), port 0 for any
    int threads = 2;     // the event loop's
    std::chrono::milliseconds request_timeout = std::chrono::seconds(10);
    std::chrono::milliseconds idle_timeout = std::chrono::seconds(60);
    std::size_t max_body_bytes = 4 << 20;
    std::size_t max_connections = 10000;
    int max_watches = 1000;
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
  // Stops: ends the calls under way and closes every connection.
  ~HttpDoor();
  HttpDoor(const HttpDoor&) = delete;
  HttpDoor& operator=(const HttpDoor&) = delete;

  int port() const { return server_->port(); }
  std::size_t connections() const { return server_->connections(); }
  // New certificates for handshakes from now on (SIGHUP); FAILED_PRECONDITION
  // without TLS.
  grpc::Status SetTls(const TlsPem& pem);

 private:
  HttpDoor(const Options& options, std::shared_ptr<grpc::Channel> channel);
  void Serve(std::shared_ptr<Exchange> ex);
  void ServeUnary(const Call& call, const Match& m);
  // SetTimer and Batch in their plain JSON form (fast_json.h), passed as
  // wire bytes; false, having sent nothing, for any other request.
  bool ServeFast(const Call& call, const Match& m);
  // A call's context: the deadline and the caller's Authorization header;
  // nullopt (the answer sent) if the door is stopping.
  std::optional<std::uint64_t> Begin(const Call& call,
                                     grpc::ClientContext* ctx);
  // A watch, if fewer than max_watches are open.
  void Watch(const Call& call, const Match& m);
  // The allowed origin matching the request's Origin header, or null.
  const std::string* AllowedOrigin(const Exchange& ex) const;
  // Whether the request has no Origin or comes from a page of the door's
  // own origin (the console's).
  bool SameOrigin(const Exchange& ex) const;
  // Answers a CORS preflight (OPTIONS with Access-Control-Request-Method).
  void Preflight(const Call& call);
  // Answers a GET of a console file and returns true; false (nothing sent)
  // if `path` is not one. The page may run only its own script and reach
  // only this origin (Content-Security-Policy), and may not be framed.
  bool ServeConsole(const Call& call, std::string_view path);

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
  std::atomic<int> watches_{0};
  const std::string openapi_;  // GET /v1/openapi.json
  std::unique_ptr<HttpTls> tls_;
  InFlight in_flight_;
  std::unique_ptr<HttpServer> server_;  // (last: stopped first)
};

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_HTTP_DOOR_H_
