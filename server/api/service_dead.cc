// Dead letters: ListDeadLetters (read on the namespace),
// RequeueDeadLetters and PurgeDeadLetters (write on it).
#include "server/api/service.h"
#include "server/api/stream.h"

namespace delayd {
namespace {

// About as much as a ListTimers page holds.
constexpr std::size_t kPageBytes = 3 << 20;

}  // namespace

grpc::ServerUnaryReactor* DelaydService::ListDeadLetters(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  auto* call = new UnaryCall(ctx, out, rpc_[RpcMetrics::kListDeadLetters]);
  auto* req = call->New<v1::ListDeadLettersRequest>();
  Caller caller;
  if (auto* r = Read(ctx, *in, request_limits_.other, "ListDeadLetters", call,
                     req, &caller)) {
    return r;
  }
  std::size_t limit = 0;
  std::uint64_t from = 0;
  Status s = Authorize(caller, req->namespace_(), kRead);
  if (s.ok()) s = validator_.DeadLetterPage(*req, &limit, &from);
  if (!s.ok()) return call->Reply(s);
  auto* resp = call->New<v1::ListDeadLettersResponse>();
  NamespaceId ns;
  if (!Namespace(req->namespace_(), &ns).ok()) {
    return call->Reply(Status::Ok(), resp);  // None.
  }
  auto* reactor = call->reactor();
  std::string name = req->namespace_().empty() ? "default" : req->namespace_();
  scheduler_.dispatcher(ns).ListDeadLetters(
      from, limit, kPageBytes,
      [this, ns, call, resp, name = std::move(name)](DeadLetterPage page) {
        if (page.error.ok()) {
          for (const DeadLetter& l : page.letters) {
            auto* out = resp->add_dead_letters();
            ToProto(name, l.event, out->mutable_event());
            out->set_error(l.error);
          }
          if (page.next) resp->set_next_page_token(std::to_string(*page.next));
        }
        call->Reply(page.error, resp);
        scheduler_.Unpin(ns);
      });
  return reactor;
}

grpc::ServerUnaryReactor* DelaydService::RequeueDeadLetters(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ChangeDeadLetters(ctx, in, out, RpcMetrics::kRequeueDeadLetters,
                           "RequeueDeadLetters",
                           &Dispatcher::RequeueDeadLetters);
}

grpc::ServerUnaryReactor* DelaydService::PurgeDeadLetters(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ChangeDeadLetters(ctx, in, out, RpcMetrics::kPurgeDeadLetters,
                           "PurgeDeadLetters", &Dispatcher::PurgeDeadLetters);
}

grpc::ServerUnaryReactor* DelaydService::ChangeDeadLetters(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out, RpcMetrics::Method method, std::string_view name,
    DeadLetterChange change) {
  auto* call = new UnaryCall(ctx, out, rpc_[method]);
  auto* req = call->New<v1::DeadLettersRequest>();
  Caller caller;
  if (auto* r = Read(ctx, *in, request_limits_.ack, name, call, req, &caller)) {
    return r;
  }
  std::vector<std::uint64_t> ids;
  Status s = Authorize(caller, req->namespace_(), kWrite);
  if (s.ok()) s = validator_.DeadLetterIds(*req, &ids);
  if (!s.ok()) return call->Reply(s);
  auto* resp = call->New<v1::DeadLettersResponse>();
  NamespaceId ns;
  if (!Namespace(req->namespace_(), &ns).ok()) {
    for (auto id : ids) resp->add_unknown_ids(id);
    return call->Reply(Status::Ok(), resp);
  }
  auto* reactor = call->reactor();
  (scheduler_.dispatcher(ns).*change)(
      std::move(ids), [this, ns, call, resp](Status s, LeaseResult r) {
        if (s.ok()) {
          resp->set_count(r.done);
          for (auto id : r.unknown) resp->add_unknown_ids(id);
        }
        call->Reply(s, resp);
        scheduler_.Unpin(ns);
      });
  return reactor;
}

}  // namespace delayd
