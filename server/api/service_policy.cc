// Namespace policies: GetPolicy (read on the namespace) and SetPolicy
// (admin on it).
#include <google/protobuf/util/field_mask_util.h>
#include <google/protobuf/util/time_util.h>
#include <spdlog/spdlog.h>

#include "server/api/service.h"
#include "server/api/validate_push.h"

namespace delayd {
namespace {

google::protobuf::Duration ToDuration(std::chrono::nanoseconds d) {
  return google::protobuf::util::TimeUtil::NanosecondsToDuration(d.count());
}

// Every field, defaults included; the push target as reads show it, or
// (`whole`) with its secrets, to merge a change into.
void ToProto(const Policy& p, v1::Policy* out, bool whole = false) {
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
  if (p.dedup_window.count() != 0) {
    *out->mutable_dedup_window() = ToDuration(p.dedup_window);
  }
  if (p.push.empty()) return;
  PushTargetToProto(p.push, out->mutable_push());
  if (whole) {
    auto* push = out->mutable_push();
    push->clear_secret_ids();
    push->clear_has_client_key();
    for (const std::string& secret : p.push.secrets) push->add_secrets(secret);
    push->set_client_key_pem(p.push.client_key_pem);
  }
}

// Whether a SetPolicy with `mask` sets the target's url from `req`.
bool SetsPushUrl(const google::protobuf::FieldMask& mask) {
  if (mask.paths().empty()) return true;
  for (const std::string& path : mask.paths()) {
    if (path == "push" || path == "push.url") return true;
  }
  return false;
}

// Whether every path of `mask` names a field of Policy.
Status CheckMask(const google::protobuf::FieldMask& mask) {
  for (const std::string& path : mask.paths()) {
    // The push target's fields by "push.<field>".
    const auto dot = path.find('.');
    const bool known =
        dot == std::string::npos
            ? v1::Policy::descriptor()->FindFieldByName(path) != nullptr
            : path.substr(0, dot) == "push" &&
                  v1::PushTarget::descriptor()->FindFieldByName(
                      path.substr(dot + 1)) != nullptr;
    if (!known) {
      return Status::InvalidArgument("update_mask: no policy field '" + path +
                                     "'");
    }
  }
  return Status::Ok();
}

}  // namespace

grpc::ServerUnaryReactor* DelaydService::DoGetPolicy(const CallIn& ctx,
                                                     const grpc::ByteBuffer* in,
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

grpc::ServerUnaryReactor* DelaydService::DoSetPolicy(const CallIn& ctx,
                                                     const grpc::ByteBuffer* in,
                                                     grpc::ByteBuffer* out) {
  const auto call = Start<v1::SetPolicyRequest, v1::Policy>(
      ctx, in, out, RpcMetrics::kSetPolicy, request_limits_.policy);
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
  // A target's host name is resolved and checked here, before the change
  // (which runs one at a time) and without holding anything.
  if (const std::string& url = req.policy().push().url();
      !url.empty() && push_ != nullptr && SetsPushUrl(req.update_mask())) {
    if (const std::string host = PushHost(url); !host.empty()) {
      if (s = push_->rules.CheckHost(host); !s.ok()) return call.Reply(s);
    }
  }
  auto change = [this, &req](const Policy& current, Policy* next) {
    const v1::Policy* in = &req.policy();
    v1::Policy merged;
    if (!req.update_mask().paths().empty()) {
      ToProto(current, &merged, /*whole=*/true);
      google::protobuf::util::FieldMaskUtil::MergeOptions replace;
      replace.set_replace_message_fields(true);
      google::protobuf::util::FieldMaskUtil::MergeMessageTo(
          req.policy(), req.update_mask(), replace, &merged);
      in = &merged;
    }
    Status s = validator_.PolicyFields(*in, next);
    if (s.ok())
      s = PushTargetFields(in->push(), push_, current.push, &next->push);
    // Stored in a form that a cluster's older nodes cannot read.
    ClusterView* cluster = cluster_view_.load();
    if (s.ok() && cluster != nullptr &&
        (!next->push.empty() || next->dedup_window.count() != 0)) {
      s = cluster->RequireLevel(kLevelPushAndDedup,
                                "push targets and dedup windows");
    }
    return s;
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
        if (!policy.push.empty()) {
          spdlog::info("namespace '{}': push target {} {}", name,
                       policy.push.method, policy.push.url);
        }
        ToProto(policy, call.resp());
        call.Reply(Status::Ok());
      });
  return call.reactor();
}

grpc::ServerUnaryReactor* DelaydService::DoTestPushTarget(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  const auto call =
      Start<v1::TestPushTargetRequest, v1::TestPushTargetResponse>(
          ctx, in, out, RpcMetrics::kTestPushTarget, request_limits_.test_push);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kAdmin);
  if (s.ok()) s = validator_.NamespaceName(req.namespace_());
  if (s.ok() && req.key().size() > scheduler_.limits().max_key_bytes) {
    s = Status::InvalidArgument("key: longer than --max-key-bytes");
  }
  if (s.ok() && pusher_ == nullptr) {
    s = Status::FailedPrecondition("push delivery is not running here");
  }
  if (!s.ok()) return call.Reply(s);
  const std::string name =
      req.namespace_().empty() ? "default" : req.namespace_();
  PushTarget target;
  if (req.has_target()) {
    s = PushTargetFields(req.target(), push_, scheduler_.PolicyOf(name).push,
                         &target);
    if (s.ok() && target.empty()) {
      s = Status::InvalidArgument("target: url is required");
    }
    if (const std::string host = PushHost(target.url);
        s.ok() && !host.empty()) {
      s = push_->rules.CheckHost(host);
    }
    if (!s.ok()) return call.Reply(s);
  }
  pusher_->Test(
      name, std::move(target), req.key().empty() ? "delayd-test" : req.key(),
      req.payload(),
      [call](Status s, const push::Verdict& v, std::chrono::nanoseconds took) {
        if (s.ok()) {
          auto* resp = call.resp();
          resp->set_outcome(v.kind == push::Verdict::kOk      ? "ack"
                            : v.kind == push::Verdict::kRetry ? "retry"
                                                              : "dead_letter");
          resp->set_http_status(static_cast<std::uint32_t>(v.status));
          resp->set_error(v.error);
          *resp->mutable_duration() = ToDuration(took);
        }
        call.Reply(s);
      });
  return call.reactor();
}

}  // namespace delayd
