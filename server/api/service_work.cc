// What workers call about their events: Ack, Nack and ExtendLease (work on
// the namespace).
#include "server/api/service.h"

namespace delayd {

grpc::ServerUnaryReactor* DelaydService::Ack(grpc::CallbackServerContext* ctx,
                                             const grpc::ByteBuffer* in,
                                             grpc::ByteBuffer* out) {
  auto* call = new UnaryCall(ctx, out, rpc_[RpcMetrics::kAck]);
  auto* req = call->New<v1::AckRequest>();
  Caller caller;
  if (auto* r =
          Read(ctx, *in, request_limits_.ack, "Ack", call, req, &caller)) {
    return r;
  }
  Status s = Authorize(caller, req->namespace_(), kWork);
  if (s.ok()) s = validator_.Ack(*req);
  if (!s.ok()) {
    return call->Reply(s);
  }
  auto* resp = call->New<v1::AckResponse>();
  NamespaceId ns;
  if (!Namespace(req->namespace_(), &ns).ok()) {
    // No such namespace: none of its events are outstanding.
    for (auto id : req->event_ids()) resp->add_unknown_ids(id);
    return call->Reply(Status::Ok(), resp);
  }
  auto* reactor = call->reactor();
  scheduler_.dispatcher(ns).Ack(
      {req->event_ids().begin(), req->event_ids().end()},
      [this, ns, call, resp](AckResult r) {
        if (r.error.ok()) {
          resp->set_acked(r.acked);
          for (auto id : r.unknown) resp->add_unknown_ids(id);
        }
        call->Reply(r.error, resp);
        scheduler_.Unpin(ns);
      });
  return reactor;
}

grpc::ServerUnaryReactor* DelaydService::Nack(grpc::CallbackServerContext* ctx,
                                              const grpc::ByteBuffer* in,
                                              grpc::ByteBuffer* out) {
  auto* call = new UnaryCall(ctx, out, rpc_[RpcMetrics::kNack]);
  auto* req = call->New<v1::NackRequest>();
  Caller caller;
  if (auto* r =
          Read(ctx, *in, request_limits_.ack, "Nack", call, req, &caller)) {
    return r;
  }
  std::optional<std::chrono::nanoseconds> retry_after;
  Status s = Authorize(caller, req->namespace_(), kWork);
  if (s.ok()) s = validator_.Nack(*req, &retry_after);
  if (!s.ok()) return call->Reply(s);
  auto* resp = call->New<v1::NackResponse>();
  NamespaceId ns;
  if (!Namespace(req->namespace_(), &ns).ok()) {
    for (auto id : req->event_ids()) resp->add_unknown_ids(id);
    return call->Reply(Status::Ok(), resp);
  }
  auto* reactor = call->reactor();
  scheduler_.dispatcher(ns).Nack(
      {req->event_ids().begin(), req->event_ids().end()}, retry_after,
      req->error(), [this, ns, call, resp](LeaseResult r) {
        resp->set_nacked(r.done);
        for (auto id : r.unknown) resp->add_unknown_ids(id);
        call->Reply(Status::Ok(), resp);
        scheduler_.Unpin(ns);
      });
  return reactor;
}

grpc::ServerUnaryReactor* DelaydService::ExtendLease(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  auto* call = new UnaryCall(ctx, out, rpc_[RpcMetrics::kExtendLease]);
  auto* req = call->New<v1::ExtendLeaseRequest>();
  Caller caller;
  if (auto* r = Read(ctx, *in, request_limits_.ack, "ExtendLease", call, req,
                     &caller)) {
    return r;
  }
  std::chrono::nanoseconds extension;
  Status s = Authorize(caller, req->namespace_(), kWork);
  if (s.ok()) s = validator_.ExtendLease(*req, &extension);
  if (!s.ok()) return call->Reply(s);
  auto* resp = call->New<v1::ExtendLeaseResponse>();
  NamespaceId ns;
  if (!Namespace(req->namespace_(), &ns).ok()) {
    for (auto id : req->event_ids()) resp->add_unknown_ids(id);
    return call->Reply(Status::Ok(), resp);
  }
  auto* reactor = call->reactor();
  scheduler_.dispatcher(ns).ExtendLease(
      {req->event_ids().begin(), req->event_ids().end()}, extension,
      [this, ns, call, resp](LeaseResult r) {
        resp->set_extended(r.done);
        for (auto id : r.unknown) resp->add_unknown_ids(id);
        call->Reply(Status::Ok(), resp);
        scheduler_.Unpin(ns);
      });
  return reactor;
}

}  // namespace delayd
