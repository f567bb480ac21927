// What workers call about their events: Ack, Nack and ExtendLease (work on
// the namespace), as unary calls or as requests on a Work stream. On a
// cluster node, the events of partitions other nodes own go to those nodes
// (the request with their ids only), and the answers are summed.
#include "server/api/relay.h"
#include "server/api/service.h"
#include "server/api/service_split.h"
#include "server/api/work_stream.h"

namespace delayd {

namespace {

// Each call's part on this node's dispatcher, and how parts' counts add up
// (see ByEventOwner).
void AckHere(Dispatcher& d, std::vector<std::uint64_t> ids,
             std::function<void(Status, v1::AckResponse)> done) {
  d.Ack(std::move(ids), [done = std::move(done)](AckResult r) {
    v1::AckResponse resp;
    resp.set_acked(r.acked);
    for (auto id : r.unknown) resp.add_unknown_ids(id);
    done(r.error, std::move(resp));
  });
}
void AddAcked(v1::AckResponse* sum, const v1::AckResponse& part) {
  sum->set_acked(sum->acked() + part.acked());
}

// `release`: another node giving back events its worker never got
// (relay.h), not a worker's failure.
auto NackHere(std::optional<std::chrono::nanoseconds> retry_after,
              std::string error, bool release) {
  return [retry_after, error = std::move(error), release](
             Dispatcher& d, std::vector<std::uint64_t> ids,
             std::function<void(Status, v1::NackResponse)> done) {
    auto answer = [done = std::move(done)](LeaseResult r) {
      v1::NackResponse resp;
      resp.set_nacked(r.done);
      for (auto id : r.unknown) resp.add_unknown_ids(id);
      done(Status::Ok(), std::move(resp));
    };
    if (release) return d.Release(std::move(ids), std::move(answer));
    d.Nack(std::move(ids), retry_after, error, std::move(answer));
  };
}
void AddNacked(v1::NackResponse* sum, const v1::NackResponse& part) {
  sum->set_nacked(sum->nacked() + part.nacked());
}

auto ExtendHere(std::chrono::nanoseconds extension) {
  return
      [extension](Dispatcher& d, std::vector<std::uint64_t> ids,
                  std::function<void(Status, v1::ExtendLeaseResponse)> done) {
        d.ExtendLease(std::move(ids), extension,
                      [done = std::move(done)](LeaseResult r) {
                        v1::ExtendLeaseResponse resp;
                        resp.set_extended(r.done);
                        for (auto id : r.unknown) resp.add_unknown_ids(id);
                        done(Status::Ok(), std::move(resp));
                      });
      };
}
void AddExtended(v1::ExtendLeaseResponse* sum,
                 const v1::ExtendLeaseResponse& part) {
  sum->set_extended(sum->extended() + part.extended());
}

}  // namespace

std::map<std::string, std::vector<std::uint64_t>> DelaydService::EventOwners(
    const google::protobuf::RepeatedField<std::uint64_t>& ids,
    const grpc::ServerContextBase& ctx) const {
  std::map<std::string, std::vector<std::uint64_t>> owners;
  for (std::uint64_t id : ids) {
    owners[forwarder_ == nullptr ? std::string()
                                 : forwarder_->OwnerOf(Partition::Of(id), ctx)]
        .push_back(id);
  }
  return owners;
}

std::map<std::string, std::vector<std::uint64_t>> DelaydService::AllOwners(
    const grpc::ServerContextBase& ctx) const {
  std::map<std::string, std::vector<std::uint64_t>> owners{{"", {}}};
  if (forwarder_ != nullptr) {
    for (const std::string& peer : forwarder_->Peers(ctx)) owners[peer];
  }
  return owners;
}

grpc::ServerUnaryReactor* DelaydService::DoAck(const CallIn& ctx,
                                               const grpc::ByteBuffer* in,
                                               grpc::ByteBuffer* out) {
  const auto call = Start<v1::AckRequest, v1::AckResponse>(
      ctx, in, out, RpcMetrics::kAck, request_limits_.ack);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kWork);
  if (s.ok()) s = validator_.Ack(req);
  if (!s.ok()) return call.Reply(s);
  return ByEventOwner(call, RpcMetrics::kAck,
                      EventOwners(req.event_ids(), *ctx), AckHere, AddAcked);
}

grpc::ServerUnaryReactor* DelaydService::DoNack(const CallIn& ctx,
                                                const grpc::ByteBuffer* in,
                                                grpc::ByteBuffer* out) {
  const auto call = Start<v1::NackRequest, v1::NackResponse>(
      ctx, in, out, RpcMetrics::kNack, request_limits_.ack);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  std::optional<std::chrono::nanoseconds> retry_after;
  Status s = Authorize(call.caller(), req.namespace_(), kWork);
  if (s.ok()) s = validator_.Nack(req, &retry_after);
  if (!s.ok()) return call.Reply(s);
  const bool release = call.caller().peer() &&
                       ctx->client_metadata().count(Relay::kRelease) != 0;
  return ByEventOwner(call, RpcMetrics::kNack,
                      EventOwners(req.event_ids(), *ctx),
                      NackHere(retry_after, req.error(), release), AddNacked);
}

grpc::ServerUnaryReactor* DelaydService::DoExtendLease(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  const auto call = Start<v1::ExtendLeaseRequest, v1::ExtendLeaseResponse>(
      ctx, in, out, RpcMetrics::kExtendLease, request_limits_.ack);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  std::chrono::nanoseconds extension;
  Status s = Authorize(call.caller(), req.namespace_(), kWork);
  if (s.ok()) s = validator_.ExtendLease(req, &extension);
  if (!s.ok()) return call.Reply(s);
  return ByEventOwner(call, RpcMetrics::kExtendLease,
                      EventOwners(req.event_ids(), *ctx), ExtendHere(extension),
                      AddExtended);
}

namespace {

// The answer of one that was, from its unary response's.
template <typename Resp>
std::function<void(const Status&, const Resp&)> AnswerWith(
    std::uint64_t ref, std::uint32_t (Resp::*count)() const,
    std::function<void(v1::WorkAnswer)> done) {
  return
      [ref, count, done = std::move(done)](const Status& s, const Resp& resp) {
        if (!s.ok()) return done(FailedAnswer(ref, s));
        v1::WorkAnswer answer;
        answer.set_ref(ref);
        answer.set_done((resp.*count)());
        answer.mutable_unknown_ids()->CopyFrom(resp.unknown_ids());
        done(std::move(answer));
      };
}

// A stream that cannot start: its caller is unknown.
class RefusedWork
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  RefusedWork(const Status& status, MethodMetrics& metrics) {
    const grpc::Status answer = ToGrpc(status);
    metrics.Observe(answer.error_code(), std::nullopt);
    Finish(answer);
  }
  void OnDone() override { delete this; }
};

// Each request on a Work stream counts as a call of its method
// (delayd_grpc_requests_total{method="Ack"}, ...), from its reading to its
// answer, as the unary call would: dashboards of acks and their latency
// see the same figures whichever way workers send them.
std::function<void(v1::WorkAnswer)> CountedAs(
    MethodMetrics& metrics, std::function<void(v1::WorkAnswer)> done) {
  return [&metrics, done = std::move(done),
          started = std::chrono::steady_clock::now()](v1::WorkAnswer answer) {
    metrics.Observe(static_cast<grpc::StatusCode>(answer.code()),
                    std::chrono::steady_clock::now() - started);
    done(std::move(answer));
  };
}

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
DelaydService::Work(grpc::CallbackServerContext* ctx) {
  auto& metrics = rpc_[RpcMetrics::kWork];
  Caller caller;
  if (Status s = Identify(ctx, &caller); !s.ok()) {
    return new RefusedWork(s, metrics);
  }
  return new WorkReactor(scheduler_, ctx, metrics, request_limits_.ack.bytes,
                         WorkStart(ctx, caller), WorkHandle(ctx));
}

QueueReactor* DelaydService::WorkOnQueue(QueueCall* call) {
  grpc::ServerContextBase* ctx = &call->context();
  auto& metrics = rpc_[RpcMetrics::kWork];
  Caller caller;
  if (Status s = Identify(ctx, &caller); !s.ok()) {
    return new QueueFailedStream(s, metrics, call);
  }
  return new QueueWorkReactor(scheduler_, ctx, metrics,
                              request_limits_.ack.bytes, WorkStart(ctx, caller),
                              WorkHandle(ctx), call);
}

std::function<Status(v1::SubscribeRequest, StreamStart*)>
DelaydService::WorkStart(grpc::ServerContextBase* ctx, const Caller& caller) {
  return [this, ctx, caller](v1::SubscribeRequest req, StreamStart* start) {
    return StartStream(*ctx, caller, std::move(req), start);
  };
}

std::function<void(const std::string&, v1::WorkRequest,
                   std::function<void(v1::WorkAnswer)>)>
DelaydService::WorkHandle(grpc::ServerContextBase* ctx) {
  return [this, ctx](const std::string& ns, v1::WorkRequest req,
                     std::function<void(v1::WorkAnswer)> done) {
    WorkRequest(ctx, ns, std::move(req), std::move(done));
  };
}

void DelaydService::WorkRequest(grpc::ServerContextBase* ctx,
                                const std::string& ns, v1::WorkRequest req,
                                std::function<void(v1::WorkAnswer)> done) {
  const std::uint64_t ref = req.ref();
  // The stream's caller may work on its namespace, and on no other.
  auto own = [&ns](std::string* name) {
    if (!name->empty() && *name != ns) {
      return Status::InvalidArgument(
          "namespace: a Work stream's requests are on its own namespace ('" +
          ns + "')");
    }
    *name = ns;
    return Status::Ok();
  };
  switch (req.request_case()) {
    case v1::WorkRequest::kAck: {
      done = CountedAs(rpc_[RpcMetrics::kAck], std::move(done));
      v1::AckRequest& r = *req.mutable_ack();
      Status s = own(r.mutable_namespace_());
      if (s.ok()) s = validator_.Ack(r);
      if (!s.ok()) return done(FailedAnswer(ref, s));
      const auto owners = EventOwners(r.event_ids(), *ctx);
      ByEventOwner(StreamCall<v1::AckRequest, v1::AckResponse>(
                       ctx, std::move(r),
                       AnswerWith(ref, &v1::AckResponse::acked, done)),
                   RpcMetrics::kAck, owners, AckHere, AddAcked);
      return;
    }
    case v1::WorkRequest::kNack: {
      done = CountedAs(rpc_[RpcMetrics::kNack], std::move(done));
      v1::NackRequest& r = *req.mutable_nack();
      std::optional<std::chrono::nanoseconds> retry_after;
      Status s = own(r.mutable_namespace_());
      if (s.ok()) s = validator_.Nack(r, &retry_after);
      if (!s.ok()) return done(FailedAnswer(ref, s));
      const auto owners = EventOwners(r.event_ids(), *ctx);
      std::string error = r.error();
      ByEventOwner(StreamCall<v1::NackRequest, v1::NackResponse>(
                       ctx, std::move(r),
                       AnswerWith(ref, &v1::NackResponse::nacked, done)),
                   RpcMetrics::kNack, owners,
                   NackHere(retry_after, std::move(error), false), AddNacked);
      return;
    }
    case v1::WorkRequest::kExtendLease: {
      done = CountedAs(rpc_[RpcMetrics::kExtendLease], std::move(done));
      v1::ExtendLeaseRequest& r = *req.mutable_extend_lease();
      std::chrono::nanoseconds extension;
      Status s = own(r.mutable_namespace_());
      if (s.ok()) s = validator_.ExtendLease(r, &extension);
      if (!s.ok()) return done(FailedAnswer(ref, s));
      const auto owners = EventOwners(r.event_ids(), *ctx);
      ByEventOwner(
          StreamCall<v1::ExtendLeaseRequest, v1::ExtendLeaseResponse>(
              ctx, std::move(r),
              AnswerWith(ref, &v1::ExtendLeaseResponse::extended, done)),
          RpcMetrics::kExtendLease, owners, ExtendHere(extension), AddExtended);
      return;
    }
    default:
      return done(
          FailedAnswer(ref, Status::InvalidArgument("request: none set")));
  }
}

}  // namespace delayd
