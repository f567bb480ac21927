// Recurring schedules: PreviewSchedule (read on the namespace), the next
// instants of a spec (server/schedule/), computed on the calling thread: at
// most Validator::kMaxPreview of them, each a bounded search.
#include "server/api/proto_time.h"
#include "server/api/service.h"

namespace delayd {

grpc::ServerUnaryReactor* DelaydService::PreviewSchedule(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  const auto call =
      Start<v1::PreviewScheduleRequest, v1::PreviewScheduleResponse>(
          ctx, in, out, RpcMetrics::kPreviewSchedule, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kRead);
  if (s.ok()) s = validator_.NamespaceName(req.namespace_());
  Validator::Preview p;
  if (s.ok())
    s = validator_.PreviewSchedule(req, scheduler_.clock().Wall(), &p);
  if (!s.ok()) return call.Reply(s);
  // As a schedule created at `after` would run.
  schedule::State state;
  state.last_instant = p.after;
  for (std::uint64_t i = 0; i < p.count; ++i) {
    const auto next =
        schedule::NextInstant(p.spec, p.bounds, state, state.last_instant);
    if (!next) break;
    SetTimestamp(*next, call.resp()->add_instants());
    state.last_instant = *next;
  }
  return call.Reply(Status::Ok());
}

}  // namespace delayd
