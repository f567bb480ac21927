#include "server/service.h"

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include <climits>

#include "server/limit_log.h"
#include "server/proto_time.h"
#include "server/stream.h"

namespace delayd {

using google::protobuf::Timestamp;

grpc::Status ToGrpc(const Status& status) {
  switch (status.code()) {
    case Code::kOk:
      return grpc::Status::OK;
    case Code::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, status.message()};
    case Code::kNotFound:
      return {grpc::StatusCode::NOT_FOUND, status.message()};
    case Code::kAlreadyExists:
      return {grpc::StatusCode::ALREADY_EXISTS, status.message()};
    case Code::kAborted:
      return {grpc::StatusCode::ABORTED, status.message()};
    case Code::kResourceExhausted:
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, status.message()};
    case Code::kUnavailable:
      return {grpc::StatusCode::UNAVAILABLE, status.message()};
    case Code::kInternal:
      return {grpc::StatusCode::INTERNAL, status.message()};
    case Code::kUnauthenticated:
      return {grpc::StatusCode::UNAUTHENTICATED, status.message()};
    case Code::kPermissionDenied:
      return {grpc::StatusCode::PERMISSION_DENIED, status.message()};
    case Code::kFailedPrecondition:
      return {grpc::StatusCode::FAILED_PRECONDITION, status.message()};
  }
  return {grpc::StatusCode::UNKNOWN, status.message()};
}

void RouteProtobufLogsToSpdlog() {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel level,
                                     const char* file, int line,
                                     const std::string& message) {
    spdlog::log(level == google::protobuf::LOGLEVEL_FATAL
                    ? spdlog::level::critical
                    : spdlog::level::debug,
                "protobuf ({}:{}): {}", file, line, message);
  });
}

namespace {
void FillTimer(const TimerInfo& info, const std::string& ns, v1::Timer* t) {
  t->set_namespace_(ns);
  t->set_key(info.key);
  t->set_payload(info.payload);
  SetTimestamp(info.fire_time, t->mutable_fire_time());
  t->set_version(info.version);
}

}  // namespace

void Finish(grpc::ServerUnaryReactor* reactor, const Status& status) {
  if (status.code() == Code::kResourceExhausted) {
    LogLimitHit("resource", status.message());
  }
  reactor->Finish(ToGrpc(status));
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx,
                                    const Status& status) {
  auto* reactor = ctx->DefaultReactor();
  Finish(reactor, status);
  return reactor;
}

// ---- validation ----

Status DelaydService::Namespace(std::string_view name, NamespaceId* id,
                                NamespaceCache* cache, bool create) {
  if (cache != nullptr && cache->valid && cache->name == name) {
    *id = cache->id;
    return Status::Ok();
  }
  if (Status s = validator_.NamespaceName(name); !s.ok()) return s;
  const std::string_view ns = name.empty() ? "default" : name;
  Status s;
  if (create) {
    s = scheduler_.Intern(ns, id);
  } else if (!scheduler_.Find(ns, id)) {
    s = Status::NotFound("no namespace '" + std::string(ns) + "'");
  }
  if (s.ok() && cache != nullptr) {
    cache->name = name;
    cache->valid = true;
    cache->id = *id;
    cache->pinned.push_back(*id);
  }
  return s;
}

namespace {

// The `authorization` metadata of a call; empty if there is none.
std::string_view AuthorizationOf(const grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  const auto it = md.find("authorization");
  if (it == md.end()) return {};
  return {it->second.data(), it->second.size()};
}

}  // namespace

Status DelaydService::Authorize(const grpc::CallbackServerContext* ctx,
                                std::string_view name,
                                std::uint8_t permission) const {
  if (!auth_.enabled()) return Status::Ok();
  return auth_.Check(AuthorizationOf(ctx), name.empty() ? "default" : name,
                     permission);
}

Status DelaydService::AuthorizeAll(const grpc::CallbackServerContext* ctx,
                                   std::uint8_t permission) const {
  if (!auth_.enabled()) return Status::Ok();
  return auth_.Check(AuthorizationOf(ctx), "", permission);
}

Status DelaydService::ToOp(const OpFields& f, WallNanos now, Op* op,
                           NamespaceCache* cache) {
  using Kind = OpFields::Kind;
  // Every field is checked before the namespace is looked up, and only a
  // set creates one: a refused call changes nothing.
  WallNanos fire_time = 0;
  if (Status s = validator_.Operation(f, now, &fire_time); !s.ok()) return s;
  NamespaceId ns;
  if (Status s = Namespace(f.ns, &ns, cache, f.kind == Kind::kSet); !s.ok()) {
    if (s.code() != Code::kNotFound) return s;
    return Status::NotFound("no pending timer '" + std::string(f.key) + "'");
  }
  switch (f.kind) {
    case Kind::kRemove:
      *op = RemoveOp{ns, std::string(f.key), f.expected_version};
      break;
    case Kind::kMove:
      *op = MoveOp{ns, std::string(f.key), fire_time, f.expected_version};
      break;
    default:
      *op = SetOp{ns, Blob(f.key, f.payload), fire_time, f.if_absent};
  }
  return Status::Ok();
}

// ---- handlers ----

// Finishes a call whose request did not convert; otherwise submits `op` and
// finishes with its result, filling the response through `fill` on success.
template <typename Fill>
grpc::ServerUnaryReactor* DelaydService::SubmitOp(
    grpc::CallbackServerContext* ctx, const Status& converted, Op op,
    Fill fill) {
  if (!converted.ok()) return FinishNow(ctx, converted);
  auto* reactor = ctx->DefaultReactor();
  const NamespaceId ns = std::visit([](const auto& o) { return o.ns; }, op);
  scheduler_.Submit(std::move(op), [this, ns, reactor, fill](OpResult r) {
    if (r.status.ok()) fill(r);
    Finish(reactor, r.status);
    scheduler_.Unpin(ns);
  });
  return reactor;
}

grpc::ServerUnaryReactor* DelaydService::SetTimer(
    grpc::CallbackServerContext* ctx, const v1::SetTimerRequest* req,
    v1::SetTimerResponse* resp) {
  if (Status s = Authorize(ctx, req->namespace_(), kWrite); !s.ok()) {
    return FinishNow(ctx, s);
  }
  Op op;
  const Status s = ToOp(FieldsOf(*req), WallNow(), &op);
  return SubmitOp(ctx, s, std::move(op), [resp](const OpResult& r) {
    resp->set_version(r.version);
    SetTimestamp(r.fire_time, resp->mutable_fire_time());
    resp->set_replaced(r.replaced);
  });
}

grpc::ServerUnaryReactor* DelaydService::MoveTimer(
    grpc::CallbackServerContext* ctx, const v1::MoveTimerRequest* req,
    v1::MoveTimerResponse* resp) {
  if (Status s = Authorize(ctx, req->namespace_(), kWrite); !s.ok()) {
    return FinishNow(ctx, s);
  }
  Op op;
  const Status s = ToOp(FieldsOf(*req), WallNow(), &op);
  return SubmitOp(ctx, s, std::move(op), [resp](const OpResult& r) {
    resp->set_version(r.version);
    SetTimestamp(r.fire_time, resp->mutable_fire_time());
  });
}

grpc::ServerUnaryReactor* DelaydService::RemoveTimer(
    grpc::CallbackServerContext* ctx, const v1::RemoveTimerRequest* req,
    v1::RemoveTimerResponse* resp) {
  if (Status s = Authorize(ctx, req->namespace_(), kWrite); !s.ok()) {
    return FinishNow(ctx, s);
  }
  Op op;
  const Status s = ToOp(FieldsOf(*req), WallNow(), &op);
  return SubmitOp(ctx, s, std::move(op),
                  [resp](const OpResult& r) { resp->set_version(r.version); });
}

grpc::ServerUnaryReactor* DelaydService::Drain(grpc::CallbackServerContext* ctx,
                                               const v1::DrainRequest* req,
                                               v1::DrainResponse* resp) {
  if (Status s = Authorize(ctx, req->namespace_(), kAdmin); !s.ok()) {
    return FinishNow(ctx, s);
  }
  NamespaceId ns;
  if (Status s = Namespace(req->namespace_(), &ns); !s.ok()) {
    // A namespace that does not exist has nothing to drain.
    if (s.code() == Code::kNotFound) s = Status::Ok();
    return FinishNow(ctx, s);
  }
  auto* reactor = ctx->DefaultReactor();
  scheduler_.Drain(ns,
                   [this, ns, reactor, resp](Status s, std::uint64_t drained) {
                     resp->set_drained(drained);
                     Finish(reactor, s);
                     scheduler_.Unpin(ns);
                   });
  return reactor;
}

grpc::ServerUnaryReactor* DelaydService::GetTimer(
    grpc::CallbackServerContext* ctx, const v1::GetTimerRequest* req,
    v1::Timer* resp) {
  if (Status s = Authorize(ctx, req->namespace_(), kRead); !s.ok()) {
    return FinishNow(ctx, s);
  }
  if (Status s = validator_.NamespaceName(req->namespace_()); !s.ok()) {
    return FinishNow(ctx, s);
  }
  if (Status s = validator_.Key(req->key()); !s.ok()) {
    return FinishNow(ctx, s);
  }
  NamespaceId ns;
  if (!Namespace(req->namespace_(), &ns).ok()) {
    return FinishNow(ctx,
                     Status::NotFound("no pending timer '" + req->key() + "'"));
  }
  auto* reactor = ctx->DefaultReactor();
  const std::string& name = scheduler_.dispatcher(ns).name();
  // (The pin keeps the namespace, and so its name, until the answer.)
  scheduler_.Get(
      ns, req->key(),
      [this, ns, reactor, resp, &name](Status s, std::optional<TimerInfo> t) {
        if (t) FillTimer(*t, name, resp);
        Finish(reactor, s);
        scheduler_.Unpin(ns);
      });
  return reactor;
}

grpc::ServerUnaryReactor* DelaydService::ListTimers(
    grpc::CallbackServerContext* ctx, const v1::ListTimersRequest* req,
    v1::ListTimersResponse* resp) {
  if (Status s = Authorize(ctx, req->namespace_(), kRead); !s.ok()) {
    return FinishNow(ctx, s);
  }
  Scheduler::ListLimits limits;
  Scheduler::ListCursor cursor;
  if (Status s = validator_.List(*req, &limits, &cursor); !s.ok()) {
    return FinishNow(ctx, s);
  }
  NamespaceId ns;
  if (!Namespace(req->namespace_(), &ns).ok()) {
    return FinishNow(ctx, Status::Ok());  // No such namespace: no timers.
  }
  auto* reactor = ctx->DefaultReactor();
  const std::string& name = scheduler_.dispatcher(ns).name();
  scheduler_.List(
      ns, req->key_prefix(), limits, cursor,
      [this, ns, reactor, resp, &name](
          Status s, std::vector<TimerInfo> timers,
          std::optional<Scheduler::ListCursor> next) {
        for (const auto& t : timers) FillTimer(t, name, resp->add_timers());
        if (next) {
          resp->set_next_page_token(std::to_string(next->partition) + "." +
                                    std::to_string(next->record));
        }
        Finish(reactor, s);
        scheduler_.Unpin(ns);
      });
  return reactor;
}

namespace {

// What one Batch call keeps until it finishes: its response, on an arena.
struct BatchCall {
  google::protobuf::Arena arena{CallArenaOptions()};
  v1::BatchResponse* resp =
      google::protobuf::Arena::CreateMessage<v1::BatchResponse>(&arena);
};

// Serializes the response into gRPC's buffer and finishes the call.
void FinishBatch(grpc::ServerUnaryReactor* reactor, const BatchCall& call,
                 grpc::ByteBuffer* out) {
  bool own_buffer;
  const grpc::Status s =
      grpc::SerializationTraits<v1::BatchResponse>::Serialize(*call.resp, out,
                                                              &own_buffer);
  reactor->Finish(s);
}

}  // namespace

grpc::ServerUnaryReactor* DelaydService::Batch(grpc::CallbackServerContext* ctx,
                                               const grpc::ByteBuffer* req,
                                               grpc::ByteBuffer* out) {
  // Only a known token gets its request read; namespaces are checked below.
  if (Status s = AuthorizeAll(ctx, 0); !s.ok()) return FinishNow(ctx, s);
  // The request in one piece: gRPC's own slice when it arrived in one, else
  // a copy. Operations below are views into it until converted.
  grpc::Slice slice;
  if (!req->TrySingleSlice(&slice).ok() &&
      !req->DumpToSingleSlice(&slice).ok()) {
    return FinishNow(ctx, Status::Internal("could not read the request"));
  }
  const std::string_view wire(reinterpret_cast<const char*>(slice.begin()),
                              slice.size());
  auto call = std::make_shared<BatchCall>();
  const std::size_t max_ops = scheduler_.limits().max_batch_ops;
  const Status too_many = Status::InvalidArgument("operations: more than " +
                                                  std::to_string(max_ops) +
                                                  " (the max-batch-ops limit)");
  // Per call, and never longer than max_ops + 1 entries: the reader stops
  // there, and protobuf parses only requests counted within the limit.
  std::vector<OpFields> fields;
  fields.reserve(std::min(max_ops + 1, wire.size() / 8 + 1));
  switch (ReadBatchRequest(wire, max_ops, &fields)) {
    case WireRead::kOk:
      break;
    case WireRead::kTooMany:
      LogLimitHit("max-batch-ops", too_many.message());
      return FinishNow(ctx, too_many);
    case WireRead::kNotPlain: {
      // Not the plain encoding: protobuf decides what it means.
      const auto count = CountBatchOperations(wire, max_ops);
      if (count && *count > max_ops) {
        LogLimitHit("max-batch-ops", too_many.message());
        return FinishNow(ctx, too_many);
      }
      auto* parsed = google::protobuf::Arena::CreateMessage<v1::BatchRequest>(
          &call->arena);
      if (!count || wire.size() > static_cast<std::size_t>(INT_MAX) ||
          !parsed->ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
        return FinishNow(ctx,
                         Status::InvalidArgument(
                             "request: not a valid delayd.v1.BatchRequest"));
      }
      fields.clear();
      for (const auto& o : parsed->operations()) fields.push_back(FieldsOf(o));
      break;
    }
  }
  const std::size_t n = fields.size();
  if (n == 0) {
    return FinishNow(ctx, Status::InvalidArgument("operations: empty"));
  }
  // A Batch touching a namespace the token may not write is refused whole.
  if (auth_.enabled()) {
    std::string_view checked;
    bool any = false;
    for (const OpFields& f : fields) {
      if (any && f.ns == checked) continue;
      if (Status s = Authorize(ctx, f.ns, kWrite); !s.ok()) {
        return FinishNow(ctx, s);
      }
      checked = f.ns;
      any = true;
    }
  }
  if (scheduler_.shutting_down()) {
    return FinishNow(ctx, Status::Unavailable("delayd is shutting down"));
  }
  const WallNanos now = WallNow();
  // Invalid operations get their error here; the rest go to the scheduler.
  v1::BatchResponse* resp = call->resp;
  resp->mutable_results()->Reserve(static_cast<int>(n));
  std::vector<Op> ops;
  std::vector<std::uint32_t> positions;
  NamespaceCache cache;
  ops.reserve(n);
  positions.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    resp->add_results();
    Op op;
    if (Status s = ToOp(fields[i], now, &op, &cache); !s.ok()) {
      auto* r = resp->mutable_results(static_cast<int>(i));
      r->set_code(ToGrpc(s).error_code());
      r->set_message("operations[" + std::to_string(i) + "]." + s.message());
      continue;
    }
    ops.push_back(std::move(op));
    positions.push_back(static_cast<std::uint32_t>(i));
  }
  auto* reactor = ctx->DefaultReactor();
  if (ops.empty()) {
    FinishBatch(reactor, *call, out);
    for (NamespaceId ns : cache.pinned) scheduler_.Unpin(ns);
    return reactor;
  }
  scheduler_.SubmitBatch(
      std::move(ops),
      [this, reactor, call, out, pinned = std::move(cache.pinned),
       positions = std::move(positions)](std::vector<OpResult> results) {
        v1::BatchResponse* resp = call->resp;
        for (std::size_t k = 0; k < results.size(); ++k) {
          auto* r = resp->mutable_results(static_cast<int>(positions[k]));
          const OpResult& res = results[k];
          r->set_code(ToGrpc(res.status).error_code());
          r->set_message(res.status.message());
          if (res.status.ok()) {
            r->set_version(res.version);
            if (res.fire_time != 0) {
              SetTimestamp(res.fire_time, r->mutable_fire_time());
            }
          }
        }
        FinishBatch(reactor, *call, out);
        for (NamespaceId ns : pinned) scheduler_.Unpin(ns);
      });
  return reactor;
}

grpc::ServerWriteReactor<v1::SubscribeResponse>* DelaydService::Subscribe(
    grpc::CallbackServerContext* ctx, const v1::SubscribeRequest* req) {
  const bool watcher = req->mode() == v1::SubscribeRequest::WATCHER;
  if (Status s = Authorize(ctx, req->namespace_(), watcher ? kRead : kWork);
      !s.ok()) {
    return new FailedStream(s);
  }
  if (scheduler_.shutting_down()) {
    return new FailedStream(Status::Unavailable("delayd is shutting down"));
  }
  SubscribeOptions options;
  if (Status s = validator_.Subscribe(*req, &options); !s.ok()) {
    return new FailedStream(s);
  }
  if (scheduler_.counters().subscribers.fetch_add(1) >=
      scheduler_.limits().max_subscribers) {
    scheduler_.counters().subscribers.fetch_sub(1);
    return new FailedStream(Status::ResourceExhausted(
        "subscriber limit of " +
        std::to_string(scheduler_.limits().max_subscribers) + " reached"));
  }
  return new SubscribeReactor(
      scheduler_, ctx,
      req->namespace_().empty() ? "default" : req->namespace_(), options);
}

grpc::ServerUnaryReactor* DelaydService::Ack(grpc::CallbackServerContext* ctx,
                                             const v1::AckRequest* req,
                                             v1::AckResponse* resp) {
  if (Status s = Authorize(ctx, req->namespace_(), kWork); !s.ok()) {
    return FinishNow(ctx, s);
  }
  if (Status s = validator_.Ack(*req); !s.ok()) return FinishNow(ctx, s);
  NamespaceId ns;
  if (!Namespace(req->namespace_(), &ns).ok()) {
    // No such namespace: none of its events are outstanding.
    for (auto id : req->event_ids()) resp->add_unknown_ids(id);
    return FinishNow(ctx, Status::Ok());
  }
  auto* reactor = ctx->DefaultReactor();
  scheduler_.dispatcher(ns).Ack(
      {req->event_ids().begin(), req->event_ids().end()},
      [this, ns, reactor, resp](AckResult r) {
        if (r.error.ok()) {
          resp->set_acked(r.acked);
          for (auto id : r.unknown) resp->add_unknown_ids(id);
        }
        Finish(reactor, r.error);
        scheduler_.Unpin(ns);
      });
  return reactor;
}

}  // namespace delayd
