// Namespace policies: GetPolicy (read on the namespace) and SetPolicy
// (admin on it).
#include <google/protobuf/util/field_mask_util.h>
#include <google/protobuf/util/time_util.h>
#include <spdlog/spdlog.h>

#include "server/api/service.h"

namespace delayd {
namespace {

google::protobuf::Duration ToDuration(std::chrono::nanoseconds d) {
  return google::protobuf::util::TimeUtil::NanosecondsToDuration(d.count());
}

// Every field, defaults included.
void ToProto(const Policy& p, v1::Policy* out) {
  out->set_max_attempts(p.max_attempts);
  *out->mutable_initial_backoff() = ToDuration(p.retry.initial_backoff);
  out->set_backoff_multiplier(p.retry.multiplier);
  *out->mutable_max_backoff() = ToDuration(p.retry.max_backoff);
  out->set_backoff_jitter(p.retry.jitter);
  *out->mutable_ack_timeout() = ToDuration(p.ack_timeout);
  out->set_max_dispatch_rate(p.max_dispatch_rate);
  out->set_dispatch_burst(p.dispatch_burst);
  out->set_max_in_flight(p.max_in_flight);
  out->set_paused(p.paused);
}

// Whether every path of `mask` names a field of Policy.
Status CheckMask(const google::protobuf::FieldMask& mask) {
  for (const std::string& path : mask.paths()) {
    if (v1::Policy::descriptor()->FindFieldByName(path) == nullptr) {
      return Status::InvalidArgument("update_mask: no policy field '" + path +
                                     "'");
    }
  }
  return Status::Ok();
}

}  // namespace

grpc::ServerUnaryReactor* DelaydService::GetPolicy(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  const auto call = Start<v1::GetPolicyRequest, v1::Policy>(
      ctx, in, out, RpcMetrics::kGetPolicy, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kRead);
  if (s.ok()) s = validator_.NamespaceName(req.namespace_());
  if (!s.ok()) return call.Reply(s);
  ToProto(scheduler_.PolicyOf(req.namespace_().empty() ? "default"
                                                       : req.namespace_()),
          call.resp());
  return call.Reply(Status::Ok());
}

grpc::ServerUnaryReactor* DelaydService::SetPolicy(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  const auto call = Start<v1::SetPolicyRequest, v1::Policy>(
      ctx, in, out, RpcMetrics::kSetPolicy, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kAdmin);
  if (s.ok()) s = validator_.NamespaceName(req.namespace_());
  if (s.ok()) s = CheckMask(req.update_mask());
  if (!s.ok()) return call.Reply(s);
  const std::string name =
      req.namespace_().empty() ? "default" : req.namespace_();
  // The fields the mask names, over the policy in force (read and changed
  // one SetPolicy at a time); without a mask, the request's policy whole.
  auto change = [this, &req](const Policy& current, Policy* next) {
    if (req.update_mask().paths().empty()) {
      return validator_.PolicyFields(req.policy(), next);
    }
    v1::Policy merged;
    ToProto(current, &merged);
    google::protobuf::util::FieldMaskUtil::MergeOptions replace;
    replace.set_replace_message_fields(true);
    google::protobuf::util::FieldMaskUtil::MergeMessageTo(
        req.policy(), req.update_mask(), replace, &merged);
    return validator_.PolicyFields(merged, next);
  };
  // The store's synced write happens off this thread; the answer comes
  // once the policy is durable and applied.
  scheduler_.SetPolicy(
      name, change, [call, name](Status s, const Policy& policy) {
        if (!s.ok()) {
          call.Reply(s);
          return;
        }
        spdlog::info(
            "namespace '{}': policy set (paused {}, max_attempts {}, "
            "max_dispatch_rate {}/s, "
            "max_in_flight {}, backoff {} ms x{} up to {} ms, jitter {}, ack "
            "timeout {} ms)",
            name, policy.paused, policy.max_attempts, policy.max_dispatch_rate,
            policy.max_in_flight,
            policy.retry.initial_backoff.count() / 1'000'000,
            policy.retry.multiplier,
            policy.retry.max_backoff.count() / 1'000'000, policy.retry.jitter,
            policy.ack_timeout.count() / 1'000'000);
        ToProto(policy, call.resp());
        call.Reply(Status::Ok());
      });
  return call.reactor();
}

}  // namespace delayd
