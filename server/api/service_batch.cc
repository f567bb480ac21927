// Batch: many sets, moves and removes in one call, each answered on its own.
// On a cluster node, the operations on keys other nodes own go to those
// nodes, one forwarded Batch per owner, and the answers are joined in
// request order.
#include <atomic>
#include <map>

#include "server/api/proto_time.h"
#include "server/api/service.h"
#include "server/common/limit_log.h"

namespace delayd {
namespace {

// A Batch split between owners: answered once every part has answered.
struct BatchJoin {
  BatchJoin(UnaryCall* c, v1::BatchResponse* r, int parts)
      : call(c), resp(r), pending(parts) {}
  UnaryCall* const call;
  v1::BatchResponse* const resp;  // On the call's arena.
  std::atomic<int> pending;
  void PartDone() {
    if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      call->Reply(Status::Ok(), resp);
    }
  }
};

// One owner's part of a split Batch: its operations' positions in the
// request, and the forwarded call's bytes (alive until it is answered).
struct RemotePart {
  std::vector<std::uint32_t> positions;
  grpc::ByteBuffer request, response;
};

// The owner's message names its own operation's index
// ("operations[3].key: ..."); the caller's is `position`.
std::string Reindexed(const std::string& message, std::uint32_t position) {
  constexpr std::string_view kPrefix = "operations[";
  const std::size_t close = message.find(']');
  if (!message.starts_with(kPrefix) || close == std::string::npos) {
    return message;
  }
  return std::string(kPrefix) + std::to_string(position) +
         message.substr(close);
}

// Writes the owner's answer to `part` (or why there is none) into `resp`.
void TakeAnswer(const grpc::Status& status, const std::string& owner,
                RemotePart& part, v1::BatchResponse* resp) {
  v1::BatchResponse answer;
  grpc::Status s = status;
  if (s.ok() &&
      (!grpc::SerializationTraits<v1::BatchResponse>::Deserialize(
            &part.response, &answer)
            .ok() ||
       answer.results_size() != static_cast<int>(part.positions.size()))) {
    s = grpc::Status(grpc::StatusCode::INTERNAL,
                     "the owner's answer does not match its operations");
  }
  for (std::size_t k = 0; k < part.positions.size(); ++k) {
    const std::uint32_t at = part.positions[k];
    auto* r = resp->mutable_results(static_cast<int>(at));
    if (!s.ok()) {
      r->set_code(s.error_code());
      r->set_message("forwarded to " + owner + ": " + s.error_message());
      continue;
    }
    r->Swap(answer.mutable_results(static_cast<int>(k)));
    if (!r->message().empty()) r->set_message(Reindexed(r->message(), at));
  }
}

}  // namespace

grpc::ServerUnaryReactor* DelaydService::DoBatch(const CallIn& ctx,
                                                 const grpc::ByteBuffer* in,
                                                 grpc::ByteBuffer* out) {
  auto* call = new UnaryCall(ctx, out, rpc_[RpcMetrics::kBatch]);
  // Only a known token gets its request read; namespaces are checked below.
  Caller caller;
  if (Status s = Identify(ctx.get(), &caller); !s.ok()) return call->Reply(s);
  // The request in one piece: gRPC's own slice when it arrived in one, else
  // a copy. Operations below are views into it until converted.
  grpc::Slice slice;
  if (!in->TrySingleSlice(&slice).ok() && !in->DumpToSingleSlice(&slice).ok()) {
    return call->Reply(Status::Internal("could not read the request"));
  }
  const std::string_view wire(reinterpret_cast<const char*>(slice.begin()),
                              slice.size());
  std::vector<OpFields> fields;
  if (Status s = ReadBatch(wire, call, &fields); !s.ok()) {
    return call->Reply(s);
  }
  // A Batch touching a namespace the token may not write is refused whole.
  if (auth_.enabled()) {
    std::string_view checked;
    bool any = false;
    for (const OpFields& f : fields) {
      if (any && f.ns == checked) continue;
      if (Status s = Authorize(caller, f.ns, kWrite); !s.ok())
        return call->Reply(s);
      checked = f.ns;
      any = true;
    }
  }
  if (scheduler_.shutting_down()) {
    return call->Reply(Status::Unavailable("delayd is shutting down"));
  }
  auto* resp = call->New<v1::BatchResponse>();
  resp->mutable_results()->Reserve(static_cast<int>(fields.size()));
  for (std::size_t i = 0; i < fields.size(); ++i) resp->add_results();
  // (The reactor is taken first: the call may be answered, and gone,
  // before either returns.)
  auto* reactor = call->reactor();
  if (forwarder_ != nullptr && SplitBatch(ctx, in, call, fields, resp)) {
    return reactor;
  }
  SubmitBatchPart(fields, nullptr, resp,
                  [call, resp] { call->Reply(Status::Ok(), resp); });
  return reactor;
}

Status DelaydService::ReadBatch(std::string_view wire, UnaryCall* call,
                                std::vector<OpFields>* fields) {
  const std::size_t max_ops = scheduler_.limits().max_batch_ops;
  const Status too_many = Status::InvalidArgument("operations: more than " +
                                                  std::to_string(max_ops) +
                                                  " (the max-batch-ops limit)");
  // Per call, and never longer than max_ops + 1 entries: the reader stops
  // there, and protobuf parses only requests counted within the limit.
  fields->reserve(std::min(max_ops + 1, wire.size() / 8 + 1));
  switch (ReadBatchRequest(wire, max_ops, fields)) {
    case WireRead::kOk:
      break;
    case WireRead::kTooMany:
      LogLimitHit("max-batch-ops", too_many.message());
      return too_many;
    case WireRead::kNotPlain: {
      // Not the plain encoding: protobuf decides what it means.
      const auto count = CountBatchOperations(wire, max_ops);
      if (count && *count > max_ops) {
        LogLimitHit("max-batch-ops", too_many.message());
        return too_many;
      }
      // Parsed without its unknown fields (see KnownFieldsOnly), on the
      // call's arena: the fields are views into it.
      auto* parsed = call->New<v1::BatchRequest>();
      const auto known =
          count ? KnownFieldsOnly(wire, v1::BatchRequest::descriptor())
                : std::nullopt;
      if (!known || !parsed->ParseFromString(*known)) {
        return Status::InvalidArgument(
            "request: not a valid delayd.v1.BatchRequest");
      }
      fields->clear();
      for (const auto& o : parsed->operations()) fields->push_back(FieldsOf(o));
      break;
    }
  }
  if (fields->empty()) return Status::InvalidArgument("operations: empty");
  return Status::Ok();
}

void DelaydService::SubmitBatchPart(const std::vector<OpFields>& fields,
                                    const std::vector<std::uint32_t>* which,
                                    v1::BatchResponse* resp,
                                    std::function<void()> done) {
  const WallNanos now = scheduler_.clock().Wall();
  const std::size_t n = which != nullptr ? which->size() : fields.size();
  // Invalid operations get their error here; the rest go to the scheduler.
  std::vector<Op> ops;
  std::vector<std::uint32_t> positions;
  NamespaceCache cache;
  ops.reserve(n);
  positions.reserve(n);
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint32_t i =
        which != nullptr ? (*which)[k] : static_cast<std::uint32_t>(k);
    Op op;
    NamespacePin pin;
    if (Status s = ToOp(fields[i], now, &op, &pin, &cache); !s.ok()) {
      auto* r = resp->mutable_results(static_cast<int>(i));
      r->set_code(ToGrpc(s).error_code());
      r->set_message("operations[" + std::to_string(i) + "]." + s.message());
      continue;
    }
    ops.push_back(std::move(op));
    positions.push_back(i);
  }
  if (ops.empty()) return done();
  scheduler_.SubmitBatch(
      std::move(ops),
      [resp, done = std::move(done), pins = std::move(cache.pins),
       positions = std::move(positions)](std::vector<OpResult> results) {
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
        done();
      });
}

bool DelaydService::SplitBatch(const CallIn& ctx, const grpc::ByteBuffer* in,
                               UnaryCall* call,
                               const std::vector<OpFields>& fields,
                               v1::BatchResponse* resp) {
  std::vector<std::uint32_t> local;
  std::map<std::string, std::shared_ptr<RemotePart>> remote;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const OpFields& f = fields[i];
    std::string owner =
        forwarder_->OwnerOf(StablePartition(f.ns.empty() ? "default" : f.ns,
                                            f.key, scheduler_.partitions()),
                            *ctx);
    if (owner.empty()) {
      local.push_back(static_cast<std::uint32_t>(i));
      continue;
    }
    auto& part = remote[std::move(owner)];
    if (part == nullptr) part = std::make_shared<RemotePart>();
    part->positions.push_back(static_cast<std::uint32_t>(i));
  }
  if (remote.empty()) return false;
  auto& forwarded = rpc_.forwarded(RpcMetrics::kBatch);
  if (local.empty() && remote.size() == 1) {
    // One owner of everything: the request goes as it came.
    forwarder_->Forward(ctx.get(), "Batch", in, call->out(),
                        remote.begin()->first, forwarded, true,
                        [call](grpc::Status s) { call->Relay(std::move(s)); });
    return true;
  }
  auto join = std::make_shared<BatchJoin>(
      call, resp, static_cast<int>(remote.size() + (local.empty() ? 0 : 1)));
  for (const auto& entry : remote) {
    // (Copies for the callback: a structured binding cannot be captured.)
    const std::string owner = entry.first;
    const std::shared_ptr<RemotePart> part = entry.second;
    v1::BatchRequest req;
    for (std::uint32_t i : part->positions) {
      ToProto(fields[i], req.add_operations());
    }
    bool own_buffer;
    (void)grpc::SerializationTraits<v1::BatchRequest>::Serialize(
        req, &part->request, &own_buffer);
    forwarder_->Forward(ctx.get(), "Batch", &part->request, &part->response,
                        owner, forwarded, true,
                        [join, owner, part](grpc::Status s) {
                          TakeAnswer(s, owner, *part, join->resp);
                          join->PartDone();
                        });
  }
  if (!local.empty()) {
    SubmitBatchPart(fields, &local, resp, [join] { join->PartDone(); });
  }
  return true;
}

}  // namespace delayd
