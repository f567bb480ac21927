#include "server/http/http_door.h"

#include <civetweb.h>
#include <google/protobuf/message.h>
#include <grpcpp/client_context.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/support/byte_buffer.h>
#include <spdlog/spdlog.h>

#include "server/http/console_assets.h"
#include "server/http/fast_json.h"
#include "server/http/http_events.h"
#include "server/http/openapi.h"
#include "server/http/respond.h"
#include "server/http/routes.h"
#include "server/http/transcode.h"

namespace delayd::http {
namespace {

namespace pb = google::protobuf;

// The request's wire bytes, if fast_json.h reads it; nullopt leaves the
// body to protobuf's JSON parser.
std::optional<std::string> FastRequest(const Match& m, std::string_view query,
                                       const std::string& body) {
  if (!query.empty()) return std::nullopt;
  if (m.rpc->name() == "Batch") return fast::BatchRequestWire(body);
  if (m.rpc->name() != "SetTimer") return std::nullopt;
  const std::string *ns = nullptr, *key = nullptr;
  for (const auto& [field, value] : m.bindings) {
    (field == "namespace" ? ns : key) = &value;
  }
  if (ns == nullptr || key == nullptr) return std::nullopt;
  return fast::SetTimerRequestWire(body, *ns, *key);
}

// The answer's JSON, `wire` read (and used up) as a Response.
template <typename Response>
std::optional<std::string> FastAnswer(grpc::ByteBuffer* wire) {
  Response response;
  if (!grpc::SerializationTraits<Response>::Deserialize(wire, &response).ok()) {
    return std::nullopt;
  }
  if (auto json = fast::ResponseJson(response)) return json;
  return ToJson(response);
}

}  // namespace

HttpDoor::HttpDoor(const Options& options,
                   std::shared_ptr<grpc::Channel> channel)
    : options_(options),
      channel_(std::move(channel)),
      events_stub_(v1::Delayd::NewStub(channel_)),
      openapi_(OpenApiDocument()) {
  const pb::ServiceDescriptor* service = DelaydService();
  for (int i = 0; i < service->method_count(); ++i) {
    const pb::MethodDescriptor* m = service->method(i);
    if (m->server_streaming()) continue;
    Method& out = methods_[m];
    out.path = "/" + service->full_name() + "/" + m->name();
    out.rpc = std::make_unique<grpc::internal::RpcMethod>(
        out.path.c_str(), grpc::internal::RpcMethod::NORMAL_RPC, channel_);
  }
}

HttpDoor::~HttpDoor() {
  if (ctx_ != nullptr) mg_stop(ctx_);
  mg_exit_library();
}

grpc::Status HttpDoor::Start(const Options& options,
                             std::shared_ptr<grpc::Channel> channel,
                             std::unique_ptr<HttpDoor>* out) {
  std::unique_ptr<HttpDoor> door(new HttpDoor(options, std::move(channel)));
  std::string listening = options.listen;
  if (options.tls) {
    if (grpc::Status s = HttpTls::Create(*options.tls, &door->tls_); !s.ok()) {
      return s;
    }
    listening += "s";  // civetweb's mark of a TLS port
  }
  // (civetweb loads OpenSSL by dlopen("libssl.so") when asked for TLS.)
  mg_init_library(options.tls ? MG_FEATURES_TLS : 0);
  const std::string threads = std::to_string(options.threads);
  const std::string timeout = std::to_string(options.request_timeout.count());
  const char* config[] = {"listening_ports", listening.c_str(),
                          // civetweb's own CORS (on, for any origin, by
                          // default) is off: Preflight() decides.
                          "access_control_allow_origin", "", "num_threads",
                          threads.c_str(), "request_timeout_ms",
                          timeout.c_str(), "enable_keep_alive", "yes",
                          "keep_alive_timeout_ms", timeout.c_str(),
                          // Headers and body leave in two writes: without
                          // it, Nagle's algorithm holds the body for the
                          // client's delayed ACK (40 ms a request).
                          "tcp_nodelay", "1", nullptr};
  mg_callbacks callbacks{};
  // civetweb's own messages (a bad request line, a closed connection) are
  // a client's doing: logged at debug.
  callbacks.log_message = [](const mg_connection*, const char* message) {
    spdlog::debug("http: {}", message);
    return 1;
  };
  callbacks.init_ssl = [](void* ssl_ctx, void* self) {
    return static_cast<HttpDoor*>(self)->tls_->Install(ssl_ctx);
  };
  mg_init_data init{&callbacks, door.get(), config};
  char error[256] = "";
  mg_error_data err{};
  err.text = error;
  err.text_buffer_size = sizeof error;
  door->ctx_ = mg_start2(&init, &err);
  if (door->ctx_ == nullptr) {
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        "cannot listen on " + options.listen + " (--http-listen): " + error);
  }
  mg_server_port ports[1];
  if (mg_get_server_ports(door->ctx_, 1, ports) == 1) {
    door->port_ = ports[0].port;
  }
  mg_set_request_handler(door->ctx_, "/", &HttpDoor::Handle, door.get());
  *out = std::move(door);
  return grpc::Status::OK;
}

grpc::Status HttpDoor::SetTls(const TlsPem& pem) {
  if (!tls_) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "the HTTP door has no TLS");
  }
  return tls_->Set(pem);
}

int HttpDoor::Handle(mg_connection* conn, void* self) {
  static_cast<HttpDoor*>(self)->Serve(conn);
  return 1;  // handled
}

bool HttpDoor::ReadBody(mg_connection* conn, std::string* body) {
  auto too_big = [&] {
    SendError(
        conn,
        grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                     "the body is larger than " +
                         std::to_string(options_.max_body_bytes) + " bytes"),
        413);
    return false;
  };
  const mg_request_info* ri = mg_get_request_info(conn);
  if (ri->content_length > 0 && static_cast<std::uint64_t>(ri->content_length) >
                                    options_.max_body_bytes) {
    return too_big();
  }
  // Room past the end for fast_json.h's reader to parse the body in place.
  if (ri->content_length > 0) {
    body->reserve(static_cast<std::size_t>(ri->content_length) +
                  fast::kPadding);
  }
  char buf[16384];
  for (;;) {
    const int n = mg_read(conn, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) return false;  // The client went away or timed out.
    if (body->size() + n > options_.max_body_bytes) return too_big();
    body->append(buf, n);
  }
}

const std::string* HttpDoor::AllowedOrigin(mg_connection* conn) const {
  const char* origin = mg_get_header(conn, "Origin");
  if (origin == nullptr) return nullptr;
  for (const std::string& allowed : options_.cors_origins) {
    if (allowed == "*" || allowed == origin) return &allowed;
  }
  return nullptr;
}

bool HttpDoor::SameOrigin(mg_connection* conn) const {
  const char* origin = mg_get_header(conn, "Origin");
  if (origin == nullptr) return true;  // not from a browser's page
  const char* host = mg_get_header(conn, "Host");
  return host != nullptr &&
         std::string_view(origin) ==
             std::string(tls_ ? "https://" : "http://") + host;
}

void HttpDoor::Preflight(mg_connection* conn, const std::string* origin) {
  if (origin == nullptr) {
    SendError(conn, grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                 "cross-origin calls from this origin are not "
                                 "allowed (--http-cors-origin)"));
    return;
  }
  mg_response_header_start(conn, 204);
  AddCorsHeaders(conn);
  mg_response_header_add(conn, "Access-Control-Allow-Methods",
                         "GET, PUT, POST, DELETE", -1);
  mg_response_header_add(conn, "Access-Control-Allow-Headers",
                         "Authorization, Content-Type, Last-Event-ID", -1);
  mg_response_header_add(conn, "Access-Control-Max-Age", "600", -1);
  mg_response_header_add(conn, "Content-Length", "0", -1);
  mg_response_header_send(conn);
}

void HttpDoor::Serve(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  const std::string_view path =
      ri->local_uri_raw != nullptr ? ri->local_uri_raw : ri->local_uri;
  const std::string_view method = ri->request_method;
  // The origin answers carry (respond.h), for this request alone: a
  // keep-alive connection's next request may come from elsewhere.
  const std::string* origin = AllowedOrigin(conn);
  mg_set_user_connection_data(conn, const_cast<std::string*>(origin));
  if (method == "OPTIONS" &&
      mg_get_header(conn, "Access-Control-Request-Method") != nullptr) {
    Preflight(conn, origin);
    return;
  }
  // A browser sends some cross-origin POSTs without asking first (a form's,
  // or fetch's no-cors), and a page could so change a daemon it can reach:
  // a call that may change something, from a page of another origin not
  // listed, is refused. (Only browsers send Origin; curl and SDKs do not.)
  if (method != "GET" && method != "HEAD" && origin == nullptr &&
      !SameOrigin(conn)) {
    SendError(conn, grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                 "calls from pages of other origins are "
                                 "refused (see --http-cors-origin)"));
    return;
  }
  if ((method == "GET" || method == "HEAD") && !path.starts_with("/v1") &&
      ServeConsole(conn, path)) {
    return;
  }
  if (path == "/v1/openapi.json" &&
      std::string_view(ri->request_method) == "GET") {
    Send(conn, 200, openapi_);
    return;
  }
  bool known = false;
  const std::optional<Match> m = MatchRoute(ri->request_method, path, &known);
  if (!m) {
    SendError(conn,
              grpc::Status(grpc::StatusCode::NOT_FOUND,
                           known ? "this path does not take " +
                                       std::string(ri->request_method)
                                 : "no such route: " + std::string(path)),
              known ? 405 : 404);
    return;
  }
  std::string body;
  if (!ReadBody(conn, &body)) return;
  const char* query = ri->query_string != nullptr ? ri->query_string : "";
  const EventCall events{events_stub_.get(),
                         mg_get_header(conn, "Authorization")};
  if (m->route->kind == Route::kPull) {
    ServePull(conn, *m, body, events);
    return;
  }
  if (m->route->kind == Route::kWatch) {
    Watch(conn, *m, query, events);
    return;
  }
  ServeUnary(conn, *m, query, body);
}

void HttpDoor::Watch(mg_connection* conn, const Match& m,
                     std::string_view query, const EventCall& events) {
  if (!IsWatch(query)) {
    ServeWatch(conn, m, query, events);  // (which refuses it)
    return;
  }
  if (watches_.fetch_add(1) < std::max(1, options_.threads / 2)) {
    ServeWatch(conn, m, query, events);
  } else {
    SendError(conn, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 "too many watches on the HTTP door (half of "
                                 "--http-threads)"));
  }
  watches_.fetch_sub(1);
}

void HttpDoor::PrepareCall(mg_connection* conn,
                           grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + options_.call_deadline);
  if (const char* auth = mg_get_header(conn, "Authorization")) {
    ctx->AddMetadata("authorization", auth);
  }
}

bool HttpDoor::ServeFast(mg_connection* conn, const Match& m,
                         std::string_view query, const std::string& body) {
  std::optional<std::string> wire = FastRequest(m, query, body);
  if (!wire) return false;
  grpc::Slice slice(std::move(*wire));
  const grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  PrepareCall(conn, &ctx);
  const grpc::Status s =
      grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
          channel_.get(), *methods_.at(m.rpc).rpc, &ctx, request, &response);
  if (!s.ok()) {
    SendError(conn, s);
    return true;
  }
  const std::optional<std::string> json =
      m.rpc->name() == "Batch" ? FastAnswer<v1::BatchResponse>(&response)
                               : FastAnswer<v1::SetTimerResponse>(&response);
  if (json) {
    Send(conn, 200, *json);
  } else {
    SendError(conn, grpc::Status(grpc::StatusCode::INTERNAL,
                                 "could not read the daemon's answer"));
  }
  return true;
}

void HttpDoor::ServeUnary(mg_connection* conn, const Match& m,
                          std::string_view query, const std::string& body) {
  if (ServeFast(conn, m, query, body)) return;
  const pb::Message* prototype =
      pb::MessageFactory::generated_factory()->GetPrototype(
          m.rpc->input_type());
  std::unique_ptr<pb::Message> request(prototype->New());
  if (grpc::Status s = BuildRequest(m, query, body, request.get()); !s.ok()) {
    SendError(conn, s);
    return;
  }
  grpc::ClientContext ctx;
  PrepareCall(conn, &ctx);
  std::unique_ptr<pb::Message> response(pb::MessageFactory::generated_factory()
                                            ->GetPrototype(m.rpc->output_type())
                                            ->New());
  // gRPC's blocking call, as generated sync stubs make it: the call runs on
  // this thread's own completion queue, with no hand-over to gRPC's threads
  // and back.
  const grpc::Status s =
      grpc::internal::BlockingUnaryCall<pb::Message, pb::Message>(
          channel_.get(), *methods_.at(m.rpc).rpc, &ctx, *request,
          response.get());
  if (!s.ok()) {
    SendError(conn, s);
    return;
  }
  Send(conn, 200, ToJson(*response));
}

}  // namespace delayd::http
