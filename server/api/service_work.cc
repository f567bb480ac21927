// What workers call about their events: Ack, Nack and ExtendLease (work on
// the namespace). On a cluster node, the events of partitions other nodes
// own go to those nodes (the request with their ids only), and the answers
// are summed.
#include "server/api/relay.h"
#include "server/api/service.h"
#include "server/api/service_split.h"

namespace delayd {

std::map<std::string, std::vector<std::uint64_t>> DelaydService::EventOwners(
    const google::protobuf::RepeatedField<std::uint64_t>& ids,
    const grpc::CallbackServerContext& ctx) const {
  std::map<std::string, std::vector<std::uint64_t>> owners;
  for (std::uint64_t id : ids) {
    owners[forwarder_ == nullptr ? std::string()
                                 : forwarder_->OwnerOf(Partition::Of(id), ctx)]
        .push_back(id);
  }
  return owners;
}

std::map<std::string, std::vector<std::uint64_t>> DelaydService::AllOwners(
    const grpc::CallbackServerContext& ctx) const {
  std::map<std::string, std::vector<std::uint64_t>> owners{{"", {}}};
  if (forwarder_ != nullptr) {
    for (const std::string& peer : forwarder_->Peers(ctx)) owners[peer];
  }
  return owners;
}

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
  return ByEventOwner(
      call, RpcMetrics::kAck, EventOwners(req.event_ids(), *ctx),
      [this, ns = req.namespace_()](
          std::vector<std::uint64_t> ids,
          std::function<void(Status, v1::AckResponse)> done) {
        v1::AckResponse resp;
        NamespacePin pin;
        if (!Namespace(ns, &pin).ok()) {
          // No such namespace: none of its events are outstanding.
          for (auto id : ids) resp.add_unknown_ids(id);
          return done(Status::Ok(), std::move(resp));
        }
        scheduler_.dispatcher(pin.id()).Ack(
            std::move(ids),
            [done = std::move(done), pin = std::move(pin)](AckResult r) {
              v1::AckResponse resp;
              resp.set_acked(r.acked);
              for (auto id : r.unknown) resp.add_unknown_ids(id);
              done(r.error, std::move(resp));
            });
      },
      [](v1::AckResponse* sum, const v1::AckResponse& part) {
        sum->set_acked(sum->acked() + part.acked());
        sum->mutable_unknown_ids()->MergeFrom(part.unknown_ids());
      });
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
  // Another node giving back events its worker never got (relay.h).
  const bool release = call.caller().peer() &&
                       ctx->client_metadata().count(Relay::kRelease) != 0;
  return ByEventOwner(
      call, RpcMetrics::kNack, EventOwners(req.event_ids(), *ctx),
      [this, ns = req.namespace_(), retry_after, error = req.error(), release](
          std::vector<std::uint64_t> ids,
          std::function<void(Status, v1::NackResponse)> done) {
        NamespacePin pin;
        if (!Namespace(ns, &pin).ok()) {
          v1::NackResponse resp;
          for (auto id : ids) resp.add_unknown_ids(id);
          return done(Status::Ok(), std::move(resp));
        }
        auto answer = [done = std::move(done),
                       pin = std::move(pin)](LeaseResult r) {
          v1::NackResponse resp;
          resp.set_nacked(r.done);
          for (auto id : r.unknown) resp.add_unknown_ids(id);
          done(Status::Ok(), std::move(resp));
        };
        Dispatcher& d = scheduler_.dispatcher(pin.id());
        if (release) return d.Release(std::move(ids), std::move(answer));
        d.Nack(std::move(ids), retry_after, error, std::move(answer));
      },
      [](v1::NackResponse* sum, const v1::NackResponse& part) {
        sum->set_nacked(sum->nacked() + part.nacked());
        sum->mutable_unknown_ids()->MergeFrom(part.unknown_ids());
      });
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
  return ByEventOwner(
      call, RpcMetrics::kExtendLease, EventOwners(req.event_ids(), *ctx),
      [this, ns = req.namespace_(), extension](
          std::vector<std::uint64_t> ids,
          std::function<void(Status, v1::ExtendLeaseResponse)> done) {
        NamespacePin pin;
        if (!Namespace(ns, &pin).ok()) {
          v1::ExtendLeaseResponse resp;
          for (auto id : ids) resp.add_unknown_ids(id);
          return done(Status::Ok(), std::move(resp));
        }
        scheduler_.dispatcher(pin.id()).ExtendLease(
            std::move(ids), extension,
            [done = std::move(done), pin = std::move(pin)](LeaseResult r) {
              v1::ExtendLeaseResponse resp;
              resp.set_extended(r.done);
              for (auto id : r.unknown) resp.add_unknown_ids(id);
              done(Status::Ok(), std::move(resp));
            });
      },
      [](v1::ExtendLeaseResponse* sum, const v1::ExtendLeaseResponse& part) {
        sum->set_extended(sum->extended() + part.extended());
        sum->mutable_unknown_ids()->MergeFrom(part.unknown_ids());
      });
}

}  // namespace delayd
