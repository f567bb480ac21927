#include "server/http/http_door.h"

#include <google/protobuf/message.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/client_callback.h>

#include "server/http/console_assets.h"
#include "server/http/fast_json.h"
#include "server/http/openapi.h"
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

grpc::Status Stopping() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "the HTTP door is stopping");
}

const char* ContentType(std::string_view path) {
  if (path == "/") return "text/html; charset=utf-8";
  if (path.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (path.ends_with(".css")) return "text/css; charset=utf-8";
  if (path.ends_with(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

}  // namespace

// ---- InFlight ----

std::optional<std::uint64_t> InFlight::Add() {
  MutexLock lock(&mu_);
  if (stopping_) return std::nullopt;
  const std::uint64_t id = next_++;
  calls_.emplace(id, nullptr);
  return id;
}

void InFlight::SetCancel(std::uint64_t id, std::function<void()> cancel) {
  {
    MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end()) return;
    if (!stopping_) {
      it->second = std::move(cancel);
      return;
    }
  }
  cancel();  // (Outside mu_: a call's end may run inline, and take it.)
}

void InFlight::Done(std::uint64_t id) {
  MutexLock lock(&mu_);
  calls_.erase(id);
  if (calls_.empty()) none_.SignalAll();
}

void InFlight::Stop(std::chrono::steady_clock::time_point deadline) {
  std::vector<std::function<void()>> cancels;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    for (auto& [id, cancel] : calls_) {
      if (cancel) cancels.push_back(cancel);
    }
  }
  // (Outside mu_: a call's end may run inline, and take it.)
  for (auto& cancel : cancels) cancel();
  MutexLock lock(&mu_);
  while (!calls_.empty() && none_.WaitUntil(&mu_, deadline)) {
  }
}

// ---- HttpDoor ----

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
  in_flight_.Stop(std::chrono::steady_clock::now() + std::chrono::seconds(5));
}

grpc::Status HttpDoor::Start(const Options& options,
                             std::shared_ptr<grpc::Channel> channel,
                             std::unique_ptr<HttpDoor>* out) {
  std::unique_ptr<HttpDoor> door(new HttpDoor(options, std::move(channel)));
  if (options.tls) {
    if (grpc::Status s = HttpTls::Create(*options.tls, &door->tls_); !s.ok()) {
      return s;
    }
  }
  HttpServer::Options server;
  server.listen = options.listen;
  server.threads = options.threads;
  server.request_timeout = options.request_timeout;
  server.idle_timeout = options.idle_timeout;
  server.max_body_bytes = options.max_body_bytes;
  server.max_connections = options.max_connections;
  HttpDoor* self = door.get();
  if (grpc::Status s = HttpServer::Start(
          server, door->tls_.get(),
          [self](std::shared_ptr<Exchange> ex) { self->Serve(std::move(ex)); },
          &door->server_);
      !s.ok()) {
    return s;
  }
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

const std::string* HttpDoor::AllowedOrigin(const Exchange& ex) const {
  const auto origin = ex.header("Origin");
  if (!origin) return nullptr;
  for (const std::string& allowed : options_.cors_origins) {
    if (allowed == "*" || allowed == *origin) return &allowed;
  }
  return nullptr;
}

bool HttpDoor::SameOrigin(const Exchange& ex) const {
  const auto origin = ex.header("Origin");
  if (!origin) return true;  // not from a browser's page
  const auto host = ex.header("Host");
  return host && *origin == std::string(ex.secure() ? "https://" : "http://") +
                                std::string(*host);
}

void HttpDoor::Preflight(const Call& call) {
  if (call.origin == nullptr) {
    SendError(call, grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                 "cross-origin calls from this origin are not "
                                 "allowed (--http-cors-origin)"));
    return;
  }
  call.ex->Reply(204,
                 CorsLines(call) +
                     "Access-Control-Allow-Methods: GET, PUT, POST, DELETE\r\n"
                     "Access-Control-Allow-Headers: Authorization, "
                     "Content-Type, Last-Event-ID\r\n"
                     "Access-Control-Max-Age: 600\r\n",
                 "");
}

bool HttpDoor::ServeConsole(const Call& call, std::string_view path) {
  if (path == "/index.html") path = "/";
  for (const Asset& a : ConsoleAssets()) {
    if (a.path != path) continue;
    // Revalidated on each load, so a new daemon's console is never mixed
    // with an old one's cached script.
    SendWhole(call, 200, ContentType(path),
              "Cache-Control: no-cache\r\n"
              "Content-Security-Policy: default-src 'none'; script-src "
              "'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
              "form-action 'none'; base-uri 'none'; frame-ancestors 'none'\r\n"
              "X-Content-Type-Options: nosniff\r\n"
              "Referrer-Policy: no-referrer\r\n",
              std::string(a.body), call.ex->method() != "HEAD");
    return true;
  }
  return false;
}

void HttpDoor::Serve(std::shared_ptr<Exchange> ex) {
  // The origin answers carry, for this request alone: a keep-alive
  // connection's next request may come from elsewhere.
  const Call call{ex, AllowedOrigin(*ex)};
  const std::string_view path = ex->path();
  const std::string_view method = ex->method();
  if (method == "OPTIONS" && ex->header("Access-Control-Request-Method")) {
    return Preflight(call);
  }
  // A browser sends some cross-origin POSTs without asking first (a form's,
  // or fetch's no-cors), and a page could so change a daemon it can reach:
  // a call that may change something, from a page of another origin not
  // listed, is refused. (Only browsers send Origin; curl and SDKs do not.)
  if (method != "GET" && method != "HEAD" && call.origin == nullptr &&
      !SameOrigin(*ex)) {
    return SendError(call,
                     grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                  "calls from pages of other origins "
                                  "are refused (see --http-cors-origin)"));
  }
  if ((method == "GET" || method == "HEAD") && !path.starts_with("/v1") &&
      ServeConsole(call, path)) {
    return;
  }
  if (path == "/v1/openapi.json" && method == "GET") {
    return Send(call, 200, openapi_);
  }
  std::string allow;
  const std::optional<Match> m = MatchRoute(method, path, &allow);
  if (!m) {
    if (allow.empty()) {
      return SendError(call,
                       grpc::Status(grpc::StatusCode::NOT_FOUND,
                                    "no such route: " + std::string(path)),
                       404);
    }
    // RFC 9110, 15.5.6: a 405 names the methods the path takes.
    return SendError(
        call,
        grpc::Status(grpc::StatusCode::NOT_FOUND,
                     "this path does not take " + std::string(method) +
                         " (it takes " + allow + ")"),
        405, "Allow: " + allow + "\r\n");
  }
  if (!m->bad_encoding.empty()) {
    return SendError(
        call, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                           m->bad_encoding + ": not percent-encoded UTF-8"));
  }
  if (m->route->kind == Route::kUnary) return ServeUnary(call, *m);
  const auto id = in_flight_.Add();
  if (!id) return SendError(call, Stopping());
  EventCall events{events_stub_.get(),
                   std::string(ex->header("Authorization").value_or("")),
                   [this, id = *id](std::function<void()> cancel) {
                     in_flight_.SetCancel(id, std::move(cancel));
                   },
                   [this, id = *id] { in_flight_.Done(id); }};
  if (m->route->kind == Route::kPull) {
    return ServePull(call, *m, ex->body(), std::move(events));
  }
  if (!IsWatch(ex->query())) {
    return ServeWatch(call, *m, ex->query(), std::move(events));  // (refused)
  }
  if (watches_.fetch_add(1) >= options_.max_watches) {
    watches_.fetch_sub(1);
    events.done();
    return SendError(call, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                        "too many watches on the HTTP door "
                                        "(--http-max-watches)"));
  }
  events.done = [this, done = std::move(events.done)] {
    watches_.fetch_sub(1);
    done();
  };
  ServeWatch(call, *m, ex->query(), std::move(events));
}

std::optional<std::uint64_t> HttpDoor::Begin(const Call& call,
                                             grpc::ClientContext* ctx) {
  const auto id = in_flight_.Add();
  if (!id) {
    SendError(call, Stopping());
    return std::nullopt;
  }
  ctx->set_deadline(std::chrono::system_clock::now() + options_.call_deadline);
  if (const auto auth = call.ex->header("Authorization")) {
    ctx->AddMetadata("authorization", std::string(*auth));
  }
  in_flight_.SetCancel(*id, [ctx] { ctx->TryCancel(); });
  return id;
}

bool HttpDoor::ServeFast(const Call& call, const Match& m) {
  std::optional<std::string> wire =
      FastRequest(m, call.ex->query(), call.ex->body());
  if (!wire) return false;
  struct State {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request, response;
  };
  auto st = std::make_shared<State>();
  grpc::Slice slice(std::move(*wire));
  st->request = grpc::ByteBuffer(&slice, 1);
  const auto id = Begin(call, &st->ctx);
  if (!id) return true;
  const bool batch = m.rpc->name() == "Batch";
  grpc::internal::CallbackUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel_.get(), *methods_.at(m.rpc).rpc, &st->ctx, &st->request,
      &st->response, [this, st, call, batch, id = *id](grpc::Status s) {
        in_flight_.Done(id);
        if (!s.ok()) return SendError(call, s);
        const std::optional<std::string> json =
            batch ? FastAnswer<v1::BatchResponse>(&st->response)
                  : FastAnswer<v1::SetTimerResponse>(&st->response);
        if (json) return Send(call, 200, *json);
        SendError(call, grpc::Status(grpc::StatusCode::INTERNAL,
                                     "could not read the daemon's answer"));
      });
  return true;
}

void HttpDoor::ServeUnary(const Call& call, const Match& m) {
  if (ServeFast(call, m)) return;
  auto* factory = pb::MessageFactory::generated_factory();
  struct State {
    grpc::ClientContext ctx;
    std::unique_ptr<pb::Message> request, response;
  };
  auto st = std::make_shared<State>();
  st->request.reset(factory->GetPrototype(m.rpc->input_type())->New());
  if (grpc::Status s =
          BuildRequest(m, call.ex->query(), call.ex->body(), st->request.get());
      !s.ok()) {
    return SendError(call, s);
  }
  st->response.reset(factory->GetPrototype(m.rpc->output_type())->New());
  const auto id = Begin(call, &st->ctx);
  if (!id) return;
  grpc::internal::CallbackUnaryCall<pb::Message, pb::Message>(
      channel_.get(), *methods_.at(m.rpc).rpc, &st->ctx, st->request.get(),
      st->response.get(), [this, st, call, id = *id](grpc::Status s) {
        in_flight_.Done(id);
        if (!s.ok()) return SendError(call, s);
        Send(call, 200, ToJson(*st->response));
      });
}

}  // namespace delayd::http
