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
      [](Dispatcher& d, std::vector<std::uint64_t> ids,
         std::function<void(Status, v1::AckResponse)> done) {
        d.Ack(std::move(ids), [done = std::move(done)](AckResult r) {
          v1::AckResponse resp;
          resp.set_acked(r.acked);
          for (auto id : r.unknown) resp.add_unknown_ids(id);
          done(r.error, std::move(resp));
        });
      },
      [](v1::AckResponse* sum, const v1::AckResponse& part) {
        sum->set_acked(sum->acked() + part.acked());
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
      [retry_after, error = req.error(), release](
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
      },
      [](v1::NackResponse* sum, const v1::NackResponse& part) {
        sum->set_nacked(sum->nacked() + part.nacked());
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
      [extension](Dispatcher& d, std::vector<std::uint64_t> ids,
                  std::function<void(Status, v1::ExtendLeaseResponse)> done) {
        d.ExtendLease(std::move(ids), extension,
                      [done = std::move(done)](LeaseResult r) {
                        v1::ExtendLeaseResponse resp;
                        resp.set_extended(r.done);
                        for (auto id : r.unknown) resp.add_unknown_ids(id);
                        done(Status::Ok(), std::move(resp));
                      });
      },
      [](v1::ExtendLeaseResponse* sum, const v1::ExtendLeaseResponse& part) {
        sum->set_extended(sum->extended() + part.extended());
      });
}

}  // namespace delayd
