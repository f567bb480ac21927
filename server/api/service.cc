#include "server/api/service.h"

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include <climits>
#include <random>

#include "server/api/proto_time.h"
#include "server/api/relay.h"
#include "server/api/service_split.h"
#include "server/api/stream.h"

namespace delayd {

using google::protobuf::Timestamp;

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

RequestLimits RequestLimits::Of(const Limits& l) {
  // Room for every other field, their tags and lengths: a page token, a
  // Backup directory (a path), timestamps and options.
  constexpr std::size_t kSlack = 8192;
  const std::size_t names = l.max_namespace_bytes + l.max_key_bytes + kSlack;
  // An event id takes at most 10 bytes as a varint, 11 with its own tag.
  return {
      .set = {names + l.max_payload_bytes,
              "--max-payload-bytes, --max-key-bytes and --max-namespace-bytes"},
      .ack = {names + Validator::kMaxAckIds * 11,
              "--max-namespace-bytes and the 10000 ids an Ack may take"},
      .other = {names, "--max-key-bytes and --max-namespace-bytes"},
      // A push target's PEMs (64 KiB each), headers and URL.
      .policy = {names + (256 << 10),
                 "--max-namespace-bytes and the size of a push target"},
      .test_push = {names + (256 << 10) + l.max_payload_bytes,
                    "--max-payload-bytes and the size of a push target"},
  };
}

// ---- validation ----

Status DelaydService::Namespace(std::string_view name, NamespacePin* pin,
                                NamespaceCache* cache, bool create) {
  if (cache != nullptr && cache->valid && cache->name == name) {
    *pin = cache->pins.back();
    return Status::Ok();
  }
  if (Status s = validator_.NamespaceName(name); !s.ok()) return s;
  const std::string_view ns = name.empty() ? "default" : name;
  Status s;
  if (create) {
    s = scheduler_.Intern(ns, pin);
  } else if (auto found = scheduler_.Find(ns)) {
    *pin = std::move(*found);
  } else {
    s = Status::NotFound("no namespace '" + std::string(ns) + "'");
  }
  if (s.ok() && cache != nullptr) {
    cache->name = name;
    cache->valid = true;
    cache->pins.push_back(*pin);
  }
  return s;
}

Status DelaydService::Absent(std::string_view name, std::string_view key,
                             std::string message) const {
  if (Status s = scheduler_.Unserved(name.empty() ? "default" : name, key);
      !s.ok()) {
    return s;
  }
  return Status::NotFound(std::move(message));
}

namespace {

// The `authorization` metadata of a call; empty if there is none.
std::string_view AuthorizationOf(const grpc::ServerContextBase* ctx) {
  const auto& md = ctx->client_metadata();
  const auto it = md.find("authorization");
  if (it == md.end()) return {};
  return {it->second.data(), it->second.size()};
}

}  // namespace

Status DelaydService::Identify(const grpc::ServerContextBase* ctx,
                               Caller* caller) const {
  return auth_.Identify(AuthorizationOf(ctx), caller);
}

Status DelaydService::Authorize(const Caller& caller, std::string_view name,
                                std::uint8_t permission) {
  return caller.May(name.empty() ? "default" : name, permission);
}

Status DelaydService::ToOp(const OpFields& f, WallNanos now, Op* op,
                           NamespacePin* pin, NamespaceCache* cache) {
  using Kind = OpFields::Kind;
  // Every field is checked before the namespace is looked up, and only a
  // set creates one: a refused call changes nothing.
  WallNanos fire_time = 0;
  if (Status s = validator_.Operation(f, now, &fire_time); !s.ok()) return s;
  if (const std::int64_t jitter = JitterNanos(f); jitter > 0) {
    // Each gRPC thread draws from its own generator.
    thread_local std::minstd_rand random(std::random_device{}());
    fire_time += std::uniform_int_distribution<std::int64_t>(0, jitter)(random);
  }
  if (Status s = Namespace(f.ns, pin, cache, f.kind == Kind::kSet); !s.ok()) {
    if (s.code() != Code::kNotFound) return s;
    return Absent(f.ns, f.key, "no pending timer '" + std::string(f.key) + "'");
  }
  const NamespaceId ns = pin->id();
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

template <typename Req, typename Resp, typename Fill>
grpc::ServerUnaryReactor* DelaydService::SubmitOp(const Unary<Req, Resp>& call,
                                                  RpcMetrics::Method method,
                                                  std::uint8_t permission,
                                                  Fill fill) {
  if (call.answered()) return call.reactor();
  const Req& req = call.req();
  if (Status s = Authorize(call.caller(), req.namespace_(), permission);
      !s.ok()) {
    return call.Reply(s);
  }
  // (The owner validates what it is sent.)
  if (ForwardToOwner(call, method, req.namespace_(), req.key())) {
    return call.reactor();
  }
  Op op;
  NamespacePin pin;
  if (Status s = ToOp(FieldsOf(req), scheduler_.clock().Wall(), &op, &pin);
      !s.ok()) {
    return call.Reply(s);
  }
  // (The pin keeps the namespace until the answer.)
  scheduler_.Submit(std::move(op),
                    [call, fill, pin = std::move(pin)](OpResult r) {
                      if (r.status.ok()) fill(r, call.resp());
                      call.Reply(r.status);
                    });
  return call.reactor();
}

grpc::ServerUnaryReactor* DelaydService::DoSetTimer(const CallIn& ctx,
                                                    const grpc::ByteBuffer* in,
                                                    grpc::ByteBuffer* out) {
  return SubmitOp(Start<v1::SetTimerRequest, v1::SetTimerResponse>(
                      ctx, in, out, RpcMetrics::kSetTimer, request_limits_.set),
                  RpcMetrics::kSetTimer, kWrite,
                  [](const OpResult& r, v1::SetTimerResponse* resp) {
                    resp->set_version(r.version);
                    SetTimestamp(r.fire_time, resp->mutable_fire_time());
                    resp->set_replaced(r.replaced);
                  });
}

grpc::ServerUnaryReactor* DelaydService::DoMoveTimer(const CallIn& ctx,
                                                     const grpc::ByteBuffer* in,
                                                     grpc::ByteBuffer* out) {
  return SubmitOp(
      Start<v1::MoveTimerRequest, v1::MoveTimerResponse>(
          ctx, in, out, RpcMetrics::kMoveTimer, request_limits_.other),
      RpcMetrics::kMoveTimer, kWrite,
      [](const OpResult& r, v1::MoveTimerResponse* resp) {
        resp->set_version(r.version);
        SetTimestamp(r.fire_time, resp->mutable_fire_time());
      });
}

grpc::ServerUnaryReactor* DelaydService::DoRemoveTimer(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return SubmitOp(
      Start<v1::RemoveTimerRequest, v1::RemoveTimerResponse>(
          ctx, in, out, RpcMetrics::kRemoveTimer, request_limits_.other),
      RpcMetrics::kRemoveTimer, kWrite,
      [](const OpResult& r, v1::RemoveTimerResponse* resp) {
        resp->set_version(r.version);
      });
}

grpc::ServerUnaryReactor* DelaydService::DoDrain(const CallIn& ctx,
                                                 const grpc::ByteBuffer* in,
                                                 grpc::ByteBuffer* out) {
  const auto call = Start<v1::DrainRequest, v1::DrainResponse>(
      ctx, in, out, RpcMetrics::kDrain, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  if (Status s = Authorize(call.caller(), req.namespace_(), kAdmin); !s.ok()) {
    return call.Reply(s);
  }
  // A cluster node drains its own partitions and has every other owner
  // drain theirs; the answer sums them (or says which node failed).
  return FromEveryOwner(
      call, RpcMetrics::kDrain,
      [this, &req](auto done) {
        NamespacePin pin;
        if (Status s = Namespace(req.namespace_(), &pin); !s.ok()) {
          // A namespace that does not exist has nothing to drain.
          return done(s.code() == Code::kNotFound ? Status::Ok() : s,
                      v1::DrainResponse());
        }
        scheduler_.Drain(pin.id(), [done, pin = std::move(pin)](
                                       Status s, std::uint64_t drained) {
          v1::DrainResponse resp;
          resp.set_drained(drained);
          done(s, std::move(resp));
        });
      },
      [](std::vector<v1::DrainResponse>& answers, v1::DrainResponse* out) {
        for (const auto& a : answers)
          out->set_drained(out->drained() + a.drained());
      });
}

grpc::ServerUnaryReactor* DelaydService::DoGetTimer(const CallIn& ctx,
                                                    const grpc::ByteBuffer* in,
                                                    grpc::ByteBuffer* out) {
  const auto call = Start<v1::GetTimerRequest, v1::Timer>(
      ctx, in, out, RpcMetrics::kGetTimer, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kRead);
  if (s.ok()) s = validator_.NamespaceName(req.namespace_());
  if (s.ok()) s = validator_.Key(req.key());
  if (!s.ok()) return call.Reply(s);
  if (ForwardToOwner(call, RpcMetrics::kGetTimer, req.namespace_(),
                     req.key())) {
    return call.reactor();
  }
  NamespacePin pin;
  if (!Namespace(req.namespace_(), &pin).ok()) {
    return call.Reply(Absent(req.namespace_(), req.key(),
                             "no pending timer '" + req.key() + "'"));
  }
  // (The pin keeps the namespace, and so its name, until the answer.)
  const std::string& name = scheduler_.dispatcher(pin.id()).name();
  scheduler_.Get(pin.id(), req.key(),
                 [call, pin = std::move(pin), &name](
                     Status s, std::optional<TimerInfo> t) {
                   if (t) FillTimer(*t, name, call.resp());
                   call.Reply(s);
                 });
  return call.reactor();
}

grpc::ServerUnaryReactor* DelaydService::DoListTimers(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  const auto call = Start<v1::ListTimersRequest, v1::ListTimersResponse>(
      ctx, in, out, RpcMetrics::kListTimers, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Scheduler::ListLimits limits;
  Scheduler::ListCursor cursor;
  Status s = Authorize(call.caller(), req.namespace_(), kRead);
  if (s.ok()) s = validator_.List(req, &limits, &cursor);
  if (!s.ok()) return call.Reply(s);
  if (forwarder_ != nullptr) {
    // A page holds the partitions one node owns from the cursor's on: this
    // node's, or the owner's (forwarded to it).
    const Forwarder::Run run = forwarder_->RunFrom(cursor.partition);
    if (!run.owner ||
        (!run.owner->empty() &&
         ctx->client_metadata().count(Forwarder::kForwardedBy) != 0)) {
      return call.Reply(Status::Unavailable("partition " +
                                            std::to_string(cursor.partition) +
                                            " is changing owners; try again"));
    }
    if (!run.owner->empty()) {
      forwarder_->Forward(ctx.get(), "ListTimers", in, out, *run.owner,
                          rpc_.forwarded(RpcMetrics::kListTimers), true,
                          [call](grpc::Status s) { call.Relay(std::move(s)); });
      return call.reactor();
    }
    limits.until = run.end;
  }
  NamespacePin pin;
  if (!Namespace(req.namespace_(), &pin).ok()) {
    // No such namespace here: no timers in this node's partitions (once
    // they are loaded).
    if (Status s = scheduler_.Served(cursor.partition, limits.until); !s.ok()) {
      return call.Reply(s);
    }
    if (limits.until < scheduler_.partitions()) {
      call.resp()->set_next_page_token(std::to_string(limits.until) + ".0");
    }
    return call.Reply(Status::Ok());
  }
  const std::string& name = scheduler_.dispatcher(pin.id()).name();
  scheduler_.List(
      pin.id(), req.key_prefix(), limits, cursor,
      [call, pin = std::move(pin), &name](
          Status s, std::vector<TimerInfo> timers,
          std::optional<Scheduler::ListCursor> next) {
        auto* resp = call.resp();
        for (const auto& t : timers) FillTimer(t, name, resp->add_timers());
        if (next) {
          resp->set_next_page_token(std::to_string(next->partition) + "." +
                                    std::to_string(next->record));
        }
        call.Reply(s);
      });
  return call.reactor();
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* DelaydService::Subscribe(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in) {
  auto& metrics = rpc_[RpcMetrics::kSubscribe];
  StreamStart start;
  if (Status s = OpenSubscribe(ctx, in, &start); !s.ok()) {
    return new FailedStream(s, metrics);
  }
  return new SubscribeReactor(scheduler_, ctx, std::move(start), metrics);
}

Status DelaydService::OpenSubscribe(grpc::ServerContextBase* ctx,
                                    const grpc::ByteBuffer* in,
                                    StreamStart* start) {
  // Read as a unary call's request is.
  v1::SubscribeRequest req;
  Caller caller;
  Status s = Identify(ctx, &caller);
  if (s.ok()) {
    s = ReadRequest(*in, request_limits_.other.bytes, "Subscribe",
                    request_limits_.other.from, &req);
  }
  if (s.ok()) s = StartStream(*ctx, caller, std::move(req), start);
  return s;
}

Status DelaydService::StartStream(const grpc::ServerContextBase& ctx,
                                  const Caller& caller,
                                  v1::SubscribeRequest req,
                                  StreamStart* start) {
  const bool watcher = req.mode() == v1::SubscribeRequest::WATCHER;
  if (Status s = Authorize(caller, req.namespace_(), watcher ? kRead : kWork);
      !s.ok()) {
    return s;
  }
  if (scheduler_.shutting_down()) {
    return Status::Unavailable("delayd is shutting down");
  }
  SubscribeOptions& options = start->options;
  if (Status s = validator_.Subscribe(req, &options); !s.ok()) return s;
  if (scheduler_.counters().subscribers.fetch_add(1) >=
      scheduler_.limits().max_subscribers) {
    scheduler_.counters().subscribers.fetch_sub(1);
    return Status::ResourceExhausted(
        "subscriber limit of " +
        std::to_string(scheduler_.limits().max_subscribers) + " reached");
  }
  start->ns = req.namespace_().empty() ? "default" : req.namespace_();
  if (forwarder_ == nullptr) return Status::Ok();
  if (ctx.client_metadata().count(Forwarder::kForwardedBy) != 0) {
    // Another node's relay (relay.h): its node counts the subscriber.
    start->attach = [](const std::shared_ptr<StreamSink>& sink) {
      sink->relayed = true;
      return StreamSubscription::AtEnd();
    };
    return Status::Ok();
  }
  // A cluster node: the other owners' events are relayed in (relay.h), each
  // node delivering its share of the worker's in-flight limit.
  if (!watcher) {
    const auto nodes =
        static_cast<std::uint32_t>(forwarder_->AllPeers().size() + 1);
    options.max_in_flight = std::max(1u, options.max_in_flight / nodes);
    req.set_max_in_flight(options.max_in_flight);
  }
  start->attach = [this, max_events = options.max_events, req = std::move(req)](
                      const std::shared_ptr<StreamSink>& sink) {
    sink->LimitEvents(max_events);
    auto relay =
        std::make_shared<Relay>(*forwarder_, scheduler_.timers(), sink, req);
    relay->Start();
    return [relay] { relay->Stop(); };
  };
  return Status::Ok();
}

}  // namespace delayd
