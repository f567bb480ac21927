// What workers call about their events: Ack, Nack and ExtendLease (work on
// the namespace).
#include "server/api/service.h"

namespace delayd {

grpc::ServerUnaryReactor* DelaydService::Ack(grpc::CallbackServerContext* ctx,
                                             const grpc::ByteBuffer* in,
                                             grpc::ByteBuffer* out) {
  const auto call = Start<v1::AckRequest, v1::AckResponse>(
      ctx, in, out, RpcMetrics::kAck, request_limits_.ack);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kWork);
  if (s.ok()) s = validator_.Ack(req);
  if (!s.ok()) return call.Reply(s);
  NamespacePin pin;
  if (!Namespace(req.namespace_(), &pin).ok()) {
    // No such namespace: none of its events are outstanding.
    for (auto id : req.event_ids()) call.resp()->add_unknown_ids(id);
    return call.Reply(Status::Ok());
  }
  scheduler_.dispatcher(pin.id()).Ack(
      {req.event_ids().begin(), req.event_ids().end()},
      [call, pin = std::move(pin)](AckResult r) {
        if (r.error.ok()) {
          call.resp()->set_acked(r.acked);
          for (auto id : r.unknown) call.resp()->add_unknown_ids(id);
        }
        call.Reply(r.error);
      });
  return call.reactor();
}

grpc::ServerUnaryReactor* DelaydService::Nack(grpc::CallbackServerContext* ctx,
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
  NamespacePin pin;
  if (!Namespace(req.namespace_(), &pin).ok()) {
    for (auto id : req.event_ids()) call.resp()->add_unknown_ids(id);
    return call.Reply(Status::Ok());
  }
  scheduler_.dispatcher(pin.id()).Nack(
      {req.event_ids().begin(), req.event_ids().end()}, retry_after,
      req.error(), [call, pin = std::move(pin)](LeaseResult r) {
        call.resp()->set_nacked(r.done);
        for (auto id : r.unknown) call.resp()->add_unknown_ids(id);
        call.Reply(Status::Ok());
      });
  return call.reactor();
}

grpc::ServerUnaryReactor* DelaydService::ExtendLease(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  const auto call = Start<v1::ExtendLeaseRequest, v1::ExtendLeaseResponse>(
      ctx, in, out, RpcMetrics::kExtendLease, request_limits_.ack);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  std::chrono::nanoseconds extension;
  Status s = Authorize(call.caller(), req.namespace_(), kWork);
  if (s.ok()) s = validator_.ExtendLease(req, &extension);
  if (!s.ok()) return call.Reply(s);
  NamespacePin pin;
  if (!Namespace(req.namespace_(), &pin).ok()) {
    for (auto id : req.event_ids()) call.resp()->add_unknown_ids(id);
    return call.Reply(Status::Ok());
  }
  scheduler_.dispatcher(pin.id()).ExtendLease(
      {req.event_ids().begin(), req.event_ids().end()}, extension,
      [call, pin = std::move(pin)](LeaseResult r) {
        call.resp()->set_extended(r.done);
        for (auto id : r.unknown) call.resp()->add_unknown_ids(id);
        call.Reply(Status::Ok());
      });
  return call.reactor();
}

}  // namespace delayd
