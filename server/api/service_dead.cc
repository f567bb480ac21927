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
  const auto call =
      Start<v1::ListDeadLettersRequest, v1::ListDeadLettersResponse>(
          ctx, in, out, RpcMetrics::kListDeadLetters, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  std::size_t limit = 0;
  std::uint64_t from = 0;
  Status s = Authorize(call.caller(), req.namespace_(), kRead);
  if (s.ok()) s = validator_.DeadLetterPage(req, &limit, &from);
  if (!s.ok()) return call.Reply(s);
  NamespacePin pin;
  if (!Namespace(req.namespace_(), &pin).ok()) {
    return call.Reply(Status::Ok());  // None.
  }
  std::string name = req.namespace_().empty() ? "default" : req.namespace_();
  scheduler_.dispatcher(pin.id()).ListDeadLetters(
      from, limit, kPageBytes,
      [call, pin = std::move(pin),
       name = std::move(name)](DeadLetterPage page) {
        if (page.error.ok()) {
          auto* resp = call.resp();
          for (const DeadLetter& l : page.letters) {
            auto* out = resp->add_dead_letters();
            ToProto(name, l.event, out->mutable_event());
            out->set_error(l.error);
          }
          if (page.next) resp->set_next_page_token(std::to_string(*page.next));
        }
        call.Reply(page.error);
      });
  return call.reactor();
}

grpc::ServerUnaryReactor* DelaydService::RequeueDeadLetters(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ChangeDeadLetters(ctx, in, out, RpcMetrics::kRequeueDeadLetters,
                           &Dispatcher::RequeueDeadLetters);
}

grpc::ServerUnaryReactor* DelaydService::PurgeDeadLetters(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  return ChangeDeadLetters(ctx, in, out, RpcMetrics::kPurgeDeadLetters,
                           &Dispatcher::PurgeDeadLetters);
}

grpc::ServerUnaryReactor* DelaydService::ChangeDeadLetters(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out, RpcMetrics::Method method, DeadLetterChange change) {
  const auto call = Start<v1::DeadLettersRequest, v1::DeadLettersResponse>(
      ctx, in, out, method, request_limits_.ack);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  std::vector<std::uint64_t> ids;
  Status s = Authorize(call.caller(), req.namespace_(), kWrite);
  if (s.ok()) s = validator_.DeadLetterIds(req, &ids);
  if (!s.ok()) return call.Reply(s);
  NamespacePin pin;
  if (!Namespace(req.namespace_(), &pin).ok()) {
    for (auto id : ids) call.resp()->add_unknown_ids(id);
    return call.Reply(Status::Ok());
  }
  (scheduler_.dispatcher(pin.id()).*change)(
      std::move(ids), [call, pin = std::move(pin)](Status s, LeaseResult r) {
        if (s.ok()) {
          call.resp()->set_count(r.done);
          for (auto id : r.unknown) call.resp()->add_unknown_ids(id);
        }
        call.Reply(s);
      });
  return call.reactor();
}

}  // namespace delayd
