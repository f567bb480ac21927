#include "server/service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <climits>
#include <condition_variable>
#include <mutex>

namespace delayd {

using google::protobuf::Timestamp;

bool IsLoopback(std::string_view listen) {
  const std::size_t colon = listen.rfind(':');
  std::string_view host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host.starts_with("127.") || host == "localhost" || host == "::1";
}

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

constexpr std::int64_t kNanosPerSecond = 1'000'000'000;

// Writes `ns` into `t` in place (a Timestamp built apart and copied in costs
// a construction, a copy and a destruction per result).
void SetTimestamp(WallNanos ns, Timestamp* t) {
  std::int64_t s = ns / kNanosPerSecond;
  std::int64_t n = ns % kNanosPerSecond;
  if (n < 0) {
    n += kNanosPerSecond;
    --s;
  }
  t->set_seconds(s);
  t->set_nanos(static_cast<std::int32_t>(n));
}

void FillTimer(const TimerInfo& info, const std::string& ns, v1::Timer* t) {
  t->set_namespace_(ns);
  t->set_key(info.key);
  t->set_payload(info.payload);
  SetTimestamp(info.fire_time, t->mutable_fire_time());
  t->set_version(info.version);
}

// Finishes a unary call; the callbacks below run on scheduler strands.
void Finish(grpc::ServerUnaryReactor* reactor, const Status& status) {
  reactor->Finish(ToGrpc(status));
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx,
                                    const Status& status) {
  auto* reactor = ctx->DefaultReactor();
  Finish(reactor, status);
  return reactor;
}

// The write side of one Subscribe stream, shared between the reactor (gRPC
// threads) and a dispatcher (its strand). One write in flight at a time;
// events that arrive meanwhile are gathered into the next message. A write
// that has not completed within the stream-write timeout cancels the call
// (the client stopped reading): the reactor then ends, and the dispatcher
// gives a worker's events to others. A recursive mutex because gRPC may run
// a reaction inline from Finish().
class StreamSink : public Subscriber {
 public:
  StreamSink(grpc::ServerWriteReactor<v1::SubscribeResponse>* r,
             grpc::CallbackServerContext* ctx, asio::io_context& io,
             std::chrono::nanoseconds write_timeout)
      : reactor_(r), ctx_(ctx), write_timer_(io), write_timeout_(write_timeout) {}

  Backlog Deliver(std::string_view ns,
                  std::span<const Event* const> events) override {
    std::lock_guard lock(mu_);
    if (reactor_ == nullptr || ending_) return {};
    std::size_t bytes = 0;
    for (const Event* e : events) {
      v1::Event* out = next_.add_events();
      out->set_id(e->id);
      out->set_namespace_(std::string(ns));
      out->set_key(std::string(e->blob.key()));
      out->set_payload(std::string(e->blob.payload()));
      out->set_version(e->version);
      SetTimestamp(e->fire_time, out->mutable_fire_time());
      SetTimestamp(e->fired_at, out->mutable_fired_at());
      out->set_attempt(e->attempt);
      out->set_reason(e->reason == Reason::kDrained ? v1::REASON_DRAINED
                                                    : v1::REASON_EXPIRED);
      bytes += EventBytes(ns, *e);
    }
    next_bytes_ += bytes;
    unwritten_events_.fetch_add(events.size());
    unwritten_bytes_.fetch_add(bytes);
    Pump();
    return Unwritten();
  }

  Backlog Unwritten() const override {
    return {unwritten_events_.load(), unwritten_bytes_.load()};
  }

  void End(const Status& status) override {
    std::lock_guard lock(mu_);
    if (reactor_ == nullptr || ending_) return;
    ending_ = true;
    end_status_ = status;
    Pump();
  }

  // Tells the subscriber it is registered: an empty first message.
  void SendRegistered() {
    std::lock_guard lock(mu_);
    if (reactor_ == nullptr || ending_) return;
    force_write_ = true;
    Pump();
  }

  void OnWriteDone(bool ok) {
    std::function<void()> drained;
    {
      std::lock_guard lock(mu_);
      write_timer_.cancel();
      writing_ = false;
      unwritten_events_.fetch_sub(in_write_);
      unwritten_bytes_.fetch_sub(in_write_bytes_);
      in_write_ = in_write_bytes_ = 0;
      if (!ok && !ending_) {
        ending_ = true;
        end_status_ = Status::Unavailable("stream broken");
      }
      Pump();
      if (ok && !writing_ && !ending_) drained = on_drained;
    }
    if (drained) drained();
  }

  void Detach() {
    std::lock_guard lock(mu_);
    write_timer_.cancel();
    reactor_ = nullptr;
  }

 private:
  // About what an event costs on the wire and in the queued message.
  static std::size_t EventBytes(std::string_view ns, const Event& e) {
    return ns.size() + e.blob.key().size() + e.blob.payload().size() + 64;
  }

  // Starts the next write, or finishes once writes are done. Under mu_.
  void Pump() {
    if (reactor_ == nullptr || writing_ || finished_) return;
    if (ending_) {
      finished_ = true;
      reactor_->Finish(ToGrpc(end_status_));
      return;
    }
    if (next_.events_size() == 0 && !force_write_) return;
    force_write_ = false;
    writing_ = true;
    in_write_ = static_cast<std::size_t>(next_.events_size());
    in_write_bytes_ = next_bytes_;
    next_bytes_ = 0;
    in_flight_msg_.Swap(&next_);
    next_.Clear();
    write_timer_.expires_after(write_timeout_);
    write_timer_.async_wait([this, self = weak_from_this()](
                                const asio::error_code& ec) {
      if (ec) return;
      auto alive = self.lock();
      if (!alive) return;
      std::lock_guard lock(mu_);
      if (!writing_ || reactor_ == nullptr) return;
      spdlog::warn(
          "subscriber {}: a write did not complete within {} s; ending the "
          "stream ({} events unwritten)",
          ctx_->peer(),
          std::chrono::duration<double>(write_timeout_).count(),
          unwritten_events_.load());
      ctx_->TryCancel();
    });
    reactor_->StartWrite(&in_flight_msg_);
  }

  mutable std::recursive_mutex mu_;
  grpc::ServerWriteReactor<v1::SubscribeResponse>* reactor_;
  grpc::CallbackServerContext* const ctx_;
  asio::steady_timer write_timer_;
  const std::chrono::nanoseconds write_timeout_;
  v1::SubscribeResponse next_;
  v1::SubscribeResponse in_flight_msg_;
  std::size_t next_bytes_ = 0;
  std::size_t in_write_ = 0;
  std::size_t in_write_bytes_ = 0;
  std::atomic<std::size_t> unwritten_events_{0};
  std::atomic<std::size_t> unwritten_bytes_{0};
  bool writing_ = false;
  bool force_write_ = false;
  bool ending_ = false;
  bool finished_ = false;
  Status end_status_;
};

class SubscribeReactor
    : public grpc::ServerWriteReactor<v1::SubscribeResponse> {
 public:
  SubscribeReactor(Scheduler& scheduler, grpc::CallbackServerContext* ctx,
                   std::string ns, SubscribeOptions options)
      : scheduler_(scheduler),
        ns_(std::move(ns)),
        id_(scheduler.NewSubscriberId()),
        sink_(std::make_shared<StreamSink>(
            this, ctx, scheduler.io(),
            scheduler.limits().stream_write_timeout)) {
    scheduler_.Subscribe(ns_, id_, sink_, options,
                         [sink = sink_] { sink->SendRegistered(); });
  }

  void OnWriteDone(bool ok) override { sink_->OnWriteDone(ok); }
  void OnCancel() override {
    sink_->End(Status::Unavailable("subscriber went away"));
  }
  void OnDone() override {
    sink_->Detach();
    scheduler_.Unsubscribe(ns_, id_);
    scheduler_.counters().subscribers.fetch_sub(1);
    delete this;
  }

 private:
  Scheduler& scheduler_;
  const std::string ns_;
  const std::uint64_t id_;
  std::shared_ptr<StreamSink> sink_;
};

class FailedStream : public grpc::ServerWriteReactor<v1::SubscribeResponse> {
 public:
  explicit FailedStream(const Status& status) { Finish(ToGrpc(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

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
  if (s.ok() && cache != nullptr) *cache = {name, true, *id};
  return s;
}

Status DelaydService::Authorize(const grpc::CallbackServerContext* ctx,
                                std::string_view name,
                                std::uint8_t permission) const {
  if (!auth_.enabled()) return Status::Ok();
  const auto& md = ctx->client_metadata();
  const auto it = md.find("authorization");
  const std::string_view header =
      it == md.end() ? std::string_view()
                     : std::string_view(it->second.data(), it->second.size());
  return auth_.Check(header, name.empty() ? "default" : name, permission);
}

Status DelaydService::AuthorizeAll(const grpc::CallbackServerContext* ctx,
                                   std::uint8_t permission) const {
  if (!auth_.enabled()) return Status::Ok();
  const auto& md = ctx->client_metadata();
  const auto it = md.find("authorization");
  const std::string_view header =
      it == md.end() ? std::string_view()
                     : std::string_view(it->second.data(), it->second.size());
  return auth_.Check(header, "", permission);
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
  scheduler_.Submit(std::move(op), [reactor, fill](OpResult r) {
    if (r.status.ok()) fill(r);
    Finish(reactor, r.status);
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
  scheduler_.Drain(ns, [reactor, resp](Status s, std::uint64_t drained) {
    resp->set_drained(drained);
    Finish(reactor, s);
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
    return FinishNow(
        ctx, Status::NotFound("no pending timer '" + req->key() + "'"));
  }
  auto* reactor = ctx->DefaultReactor();
  const std::string& name = scheduler_.dispatcher(ns).name();
  scheduler_.Get(ns, req->key(),
                 [reactor, resp, &name](Status s, std::optional<TimerInfo> t) {
                   if (t) FillTimer(*t, name, resp);
                   Finish(reactor, s);
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
      [reactor, resp, &name](Status s, std::vector<TimerInfo> timers,
                             std::optional<Scheduler::ListCursor> next) {
        for (const auto& t : timers) FillTimer(t, name, resp->add_timers());
        if (next) {
          resp->set_next_page_token(std::to_string(next->partition) + "." +
                                    std::to_string(next->record));
        }
        Finish(reactor, s);
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
  const Status too_many = Status::InvalidArgument(
      "operations: more than " + std::to_string(max_ops) +
      " (the max-batch-ops limit)");
  // Per call, and never longer than max_ops + 1 entries: the reader stops
  // there, and protobuf parses only requests counted within the limit.
  std::vector<OpFields> fields;
  fields.reserve(std::min(max_ops + 1, wire.size() / 8 + 1));
  switch (ReadBatchRequest(wire, max_ops, &fields)) {
    case WireRead::kOk:
      break;
    case WireRead::kTooMany:
      return FinishNow(ctx, too_many);
    case WireRead::kNotPlain: {
      // Not the plain encoding: protobuf decides what it means.
      const auto count = CountBatchOperations(wire, max_ops);
      if (count && *count > max_ops) return FinishNow(ctx, too_many);
      auto* parsed = google::protobuf::Arena::CreateMessage<v1::BatchRequest>(
          &call->arena);
      if (!count || wire.size() > static_cast<std::size_t>(INT_MAX) ||
          !parsed->ParseFromArray(wire.data(), static_cast<int>(wire.size()))) {
        return FinishNow(ctx, Status::InvalidArgument(
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
    return reactor;
  }
  scheduler_.SubmitBatch(
      std::move(ops), [reactor, call, out, positions = std::move(positions)](
                          std::vector<OpResult> results) {
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
      [reactor, resp](AckResult r) {
        if (!r.error.ok()) {
          Finish(reactor, r.error);
          return;
        }
        resp->set_acked(r.acked);
        for (auto id : r.unknown) resp->add_unknown_ids(id);
        Finish(reactor, Status::Ok());
      });
  return reactor;
}

grpc::ServerUnaryReactor* DelaydService::Stats(grpc::CallbackServerContext* ctx,
                                               const v1::StatsRequest*,
                                               v1::StatsResponse* resp) {
  if (Status s = AuthorizeAll(ctx, kAdmin); !s.ok()) return FinishNow(ctx, s);
  Counters& c = scheduler_.counters();
  resp->set_pending_timers(c.pending.load());
  resp->set_ready_events(c.ready.load());
  resp->set_in_flight_events(c.in_flight.load());
  resp->set_workers(c.workers.load());
  resp->set_watchers(c.watchers.load());
  resp->set_partitions(scheduler_.partitions());
  resp->set_timers_set(c.set.load());
  resp->set_timers_fired(c.fired.load());
  resp->set_events_acked(c.acked.load());
  resp->set_events_redelivered(c.redelivered.load());
  resp->set_durable(scheduler_.durable());
  resp->set_store_errors(c.store_errors.load());
  return FinishNow(ctx, Status::Ok());
}

// ---- server ----

namespace {

class ParseErrorInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit ParseErrorInterceptor(const std::string& error) : error_(error) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    // gRPC hands the interceptor no message when the request did not parse.
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE)) {
      unparsed_ = methods->GetRecvMessage() == nullptr;
    }
    if (unparsed_ &&
        methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS) &&
        methods->GetSendStatus().error_code() ==
            grpc::StatusCode::UNIMPLEMENTED) {
      methods->ModifySendStatus(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, error_));
    }
    methods->Proceed();
  }

 private:
  const std::string& error_;  // Owned by the factory, which outlives calls.
  bool unparsed_ = false;
};

}  // namespace

ParseErrorInterceptorFactory::ParseErrorInterceptorFactory() {
  const google::protobuf::ServiceDescriptor* service =
      v1::SetTimerRequest::descriptor()->file()->FindServiceByName("Delayd");
  for (int i = 0; i < service->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* m = service->method(i);
    errors_.emplace("/" + service->full_name() + "/" + m->name(),
                    "request: not a valid " + m->input_type()->full_name());
  }
}

grpc::experimental::Interceptor*
ParseErrorInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const auto it = errors_.find(std::string_view(info->method()));
  if (it == errors_.end()) return nullptr;
  return new ParseErrorInterceptor(it->second);
}

DelaydServer::DelaydServer(Options options) : options_(std::move(options)) {}

DelaydServer::~DelaydServer() { Shutdown(std::chrono::milliseconds(0)); }

Status DelaydServer::Start() {
  // Credentials first: a file that does not load stops the start before the
  // store is opened.
  if (!options_.auth_tokens.empty()) {
    TokenTable table;
    if (Status s = TokenTable::Load(options_.auth_tokens, &table); !s.ok()) {
      return s;
    }
    auth_.Enable(std::move(table));
  }
  if (!options_.tls.cert.empty() || !options_.tls.key.empty()) {
    if (options_.tls.cert.empty() || options_.tls.key.empty()) {
      return Status::InvalidArgument(
          "--tls-cert and --tls-key go together");
    }
    if (Status s = TlsCertificates::Create(options_.tls, &tls_); !s.ok()) {
      return s;
    }
  } else if (!options_.tls.client_ca.empty()) {
    return Status::InvalidArgument(
        "--tls-client-ca needs --tls-cert and --tls-key");
  }
  scheduler_ = std::make_unique<Scheduler>(options_.scheduler);
  if (Status s = scheduler_->Start(&recovery_); !s.ok()) {
    scheduler_.reset();
    return s;
  }
  service_ = std::make_unique<DelaydService>(*scheduler_, auth_);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::InsecureServerCredentials();
  if (tls_) credentials = tls_->credentials();
  builder.AddListeningPort(options_.listen, credentials, &port_);
  builder.RegisterService(service_.get());
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<ParseErrorInterceptorFactory>());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // Keep idle streams alive behind proxies and notice dead peers.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(options_.keepalive_time.count()));
  builder.AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(options_.keepalive_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // gRPC has one receive limit per server, not per method. It is what the
  // largest request needs: a Batch up to --max-batch-bytes, or one
  // full-size timer. Requests of other methods are parsed within it and then
  // held to their own field limits; their parsed size is at most a few
  // times their bytes (no repeated message fields outside Batch, which reads
  // its own bytes and stops at --max-batch-ops).
  const Limits& l = options_.scheduler.limits;
  const std::size_t unary_message =
      l.max_payload_bytes + l.max_key_bytes + l.max_namespace_bytes + 4096;
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<std::size_t>(
      std::max(options_.max_batch_bytes, unary_message), 1u << 30)));
  // All of gRPC's memory for connections and calls, bounded.
  grpc::ResourceQuota quota("delayd");
  quota.Resize(options_.grpc_memory_bytes);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             options_.max_streams_per_connection);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    server_.reset();
    return Status::Unavailable("cannot listen on " + options_.listen);
  }
  server_->GetHealthCheckService()->SetServingStatus(true);
  return Status::Ok();
}

Status DelaydServer::Reload() {
  std::string errors;
  if (auth_.enabled()) {
    TokenTable table;
    if (Status s = TokenTable::Load(options_.auth_tokens, &table); s.ok()) {
      auth_.Reload(std::move(table));
    } else {
      errors += s.message();
    }
  }
  if (tls_) {
    if (Status s = tls_->Reload(); !s.ok()) {
      errors += (errors.empty() ? "" : "; ") + s.message();
    }
  }
  if (!errors.empty()) return Status::InvalidArgument(errors);
  return Status::Ok();
}

void DelaydServer::Shutdown(std::chrono::milliseconds grace) {
  if (stopped_ || !scheduler_) return;
  stopped_ = true;
  if (server_) server_->GetHealthCheckService()->SetServingStatus(false);
  // End every stream, then let in-flight unary calls finish.
  std::mutex mu;
  std::condition_variable cv;
  bool closed = false;
  scheduler_->Shutdown([&] {
    std::lock_guard lock(mu);
    closed = true;
    cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    cv.wait_for(lock, grace + std::chrono::seconds(1), [&] { return closed; });
  }
  spdlog::debug("shutdown: operations answered, streams ended");
  // Every call has been answered; what remains is sending the answers. gRPC
  // would wait out the whole deadline for idle client connections, so give
  // it only a short one.
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::min<std::chrono::milliseconds>(
                          grace, std::chrono::milliseconds(200)));
  }
  spdlog::debug("shutdown: server stopped");
  scheduler_->Stop();
  server_.reset();
}

}  // namespace delayd
