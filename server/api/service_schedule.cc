// Recurring schedules: SetSchedule, DeleteSchedule, PauseSchedule,
// ResumeSchedule and TriggerSchedule (write on the namespace); GetSchedule,
// ListSchedules and PreviewSchedule (read).
// PreviewSchedule computes the next instants of a spec (server/schedule/) on
// the calling thread: at most Validator::kMaxPreview of them, each a bounded
// search.
#include <google/protobuf/util/time_util.h>

#include <algorithm>

#include "server/api/proto_time.h"
#include "server/api/service.h"
#include "server/api/service_split.h"

namespace delayd {
namespace {

constexpr std::uint32_t kDefaultPage = 100;
constexpr std::uint32_t kMaxPage = 1000;
// A page of schedules stops once their payloads reach this.
constexpr std::size_t kMaxPageBytes = 1 << 20;

void ToProto(std::string_view ns, const Partition::ScheduleInfo& info,
             v1::Schedule* out) {
  const ScheduleRecord& r = info.rec;
  out->set_namespace_(std::string(ns));
  out->set_key(info.key);
  v1::ScheduleSpec* spec = out->mutable_spec();
  if (!r.cron.empty()) {
    spec->set_cron(r.cron);
    spec->set_time_zone(r.zone);
  } else {
    *spec->mutable_every() =
        google::protobuf::util::TimeUtil::NanosecondsToDuration(r.every);
    // (An interval counts from its anchor: the start time, or the set.)
    SetTimestamp(r.anchor, spec->mutable_start_time());
  }
  if (r.start) SetTimestamp(*r.start, spec->mutable_start_time());
  if (r.end) SetTimestamp(*r.end, spec->mutable_end_time());
  spec->set_max_runs(r.max_runs);
  out->set_payload(r.payload);
  out->set_version(r.version);
  out->set_catch_up(r.catch_up == schedule::CatchUp::kNone ? v1::CATCH_UP_NONE
                    : r.catch_up == schedule::CatchUp::kAll
                        ? v1::CATCH_UP_ALL
                        : v1::CATCH_UP_LATEST);
  out->set_catch_up_limit(r.catch_up_limit);
  *out->mutable_jitter() =
      google::protobuf::util::TimeUtil::NanosecondsToDuration(r.jitter);
  out->set_runs(r.state.runs);
  if (r.state.last_instant > r.created_at) {
    SetTimestamp(r.state.last_instant, out->mutable_last_instant());
  }
  if (info.next) SetTimestamp(*info.next, out->mutable_next_instant());
  SetTimestamp(r.created_at, out->mutable_create_time());
  out->set_paused(r.state.paused);
  out->set_overlap(r.overlap == schedule::Overlap::kSkip ? v1::OVERLAP_SKIP
                   : r.overlap == schedule::Overlap::kBufferOne
                       ? v1::OVERLAP_BUFFER_ONE
                       : v1::OVERLAP_ALLOW);
}

// The first `limit` schedules of the nodes' pages in key order (about
// kMaxPageBytes of payloads at most); the next page starts after the last
// one if any was left out or a node has more.
void MergePages(std::vector<v1::ListSchedulesResponse>& pages,
                std::size_t limit, v1::ListSchedulesResponse* out) {
  std::vector<v1::Schedule*> all;
  bool more = false;
  for (auto& p : pages) {
    for (auto& sch : *p.mutable_schedules()) all.push_back(&sch);
    more = more || !p.next_page_token().empty();
  }
  std::sort(all.begin(), all.end(),
            [](const auto* x, const auto* y) { return x->key() < y->key(); });
  std::size_t bytes = 0;
  for (v1::Schedule* sch : all) {
    const std::size_t b = sch->payload().size() + sch->key().size();
    if (out->schedules_size() > 0 &&
        (static_cast<std::size_t>(out->schedules_size()) == limit ||
         bytes + b > kMaxPageBytes)) {
      more = true;
      break;
    }
    bytes += b;
    out->add_schedules()->Swap(sch);
  }
  if (more && out->schedules_size() > 0) {
    out->set_next_page_token(out->schedules(out->schedules_size() - 1).key());
  }
}

}  // namespace

grpc::ServerUnaryReactor* DelaydService::DoSetSchedule(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  const auto call = Start<v1::SetScheduleRequest, v1::Schedule>(
      ctx, in, out, RpcMetrics::kSetSchedule, request_limits_.set);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kWrite);
  ScheduleRecord rec;
  if (s.ok()) s = validator_.NamespaceName(req.namespace_());
  if (s.ok()) s = validator_.SetSchedule(req, scheduler_.clock().Wall(), &rec);
  if (!s.ok()) return call.Reply(s);
  if (ForwardToOwner(call, RpcMetrics::kSetSchedule, req.namespace_(),
                     req.key())) {
    return call.reactor();
  }
  NamespacePin pin;
  s = Namespace(req.namespace_(), &pin, nullptr, /*create=*/true);
  if (!s.ok()) return call.Reply(s);
  const NamespaceId ns = pin.id();
  // (The pin keeps the namespace, and its name, until the answer.)
  scheduler_.SetSchedule(
      ns, req.key(), std::move(rec), req.if_absent(), req.expected_version(),
      [this, call, pin = std::move(pin)](Partition::ScheduleResult r) {
        if (r.status.ok()) {
          ToProto(scheduler_.dispatcher(pin.id()).name(), r.info, call.resp());
        }
        call.Reply(r.status);
      });
  return call.reactor();
}

grpc::ServerUnaryReactor* DelaydService::DoGetSchedule(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  const auto call = Start<v1::GetScheduleRequest, v1::Schedule>(
      ctx, in, out, RpcMetrics::kGetSchedule, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kRead);
  if (s.ok()) s = validator_.NamespaceName(req.namespace_());
  if (s.ok()) s = validator_.Key(req.key());
  if (!s.ok()) return call.Reply(s);
  if (ForwardToOwner(call, RpcMetrics::kGetSchedule, req.namespace_(),
                     req.key())) {
    return call.reactor();
  }
  NamespacePin pin;
  std::optional<Partition::ScheduleInfo> info;
  const std::string absent = "no schedule '" + req.key() + "'";
  if (!Namespace(req.namespace_(), &pin).ok()) {
    return call.Reply(Absent(req.namespace_(), req.key(), absent));
  }
  if (Status s = scheduler_.GetSchedule(pin.id(), req.key(), &info); !s.ok()) {
    return call.Reply(s);
  }
  if (!info) return call.Reply(Status::NotFound(absent));
  ToProto(scheduler_.dispatcher(pin.id()).name(), *info, call.resp());
  return call.Reply(Status::Ok());
}

grpc::ServerUnaryReactor* DelaydService::DoListSchedules(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  const auto call = Start<v1::ListSchedulesRequest, v1::ListSchedulesResponse>(
      ctx, in, out, RpcMetrics::kListSchedules, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kRead);
  if (s.ok()) s = validator_.NamespaceName(req.namespace_());
  if (s.ok() && req.page_size() > kMaxPage) {
    s = Status::InvalidArgument("page_size: at most " +
                                std::to_string(kMaxPage));
  }
  if (!s.ok()) return call.Reply(s);
  const std::size_t limit =
      req.page_size() == 0 ? kDefaultPage : req.page_size();
  // On a cluster node, each node owning partitions lists a page after the
  // same key; the pages merge by key.
  return FromEveryOwner(
      call, RpcMetrics::kListSchedules,
      [this, &req, limit](auto done) {
        v1::ListSchedulesResponse page;
        Status s = ListLocalSchedules(req, limit, &page);
        done(s, std::move(page));
      },
      [limit](std::vector<v1::ListSchedulesResponse>& pages,
              v1::ListSchedulesResponse* out) {
        MergePages(pages, limit, out);
      });
}

Status DelaydService::ListLocalSchedules(const v1::ListSchedulesRequest& req,
                                         std::size_t limit,
                                         v1::ListSchedulesResponse* out) {
  NamespacePin pin;
  if (!Namespace(req.namespace_(), &pin).ok()) return scheduler_.Loading();
  const std::string& name = scheduler_.dispatcher(pin.id()).name();
  std::size_t bytes = 0;
  std::string last;
  bool full = false;
  std::vector<std::string> keys;
  if (Status s = scheduler_.ListSchedules(pin.id(), req.prefix(),
                                          req.page_token(), limit, &keys);
      !s.ok()) {
    return s;
  }
  for (const std::string& key : keys) {
    std::optional<Partition::ScheduleInfo> info;
    if (Status s = scheduler_.GetSchedule(pin.id(), key, &info); !s.ok()) {
      return s;
    }
    if (!info) continue;  // deleted since
    if (bytes > 0 && bytes + info->rec.payload.size() > kMaxPageBytes) {
      full = true;
      break;
    }
    bytes += info->rec.payload.size() + key.size();
    ToProto(name, *info, out->add_schedules());
    last = key;
  }
  if (full || out->schedules_size() == static_cast<int>(limit)) {
    out->set_next_page_token(last);
  }
  return Status::Ok();
}

grpc::ServerUnaryReactor* DelaydService::DoDeleteSchedule(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  const auto call =
      Start<v1::DeleteScheduleRequest, v1::DeleteScheduleResponse>(
          ctx, in, out, RpcMetrics::kDeleteSchedule, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kWrite);
  if (s.ok()) s = validator_.NamespaceName(req.namespace_());
  if (s.ok()) s = validator_.Key(req.key());
  if (!s.ok()) return call.Reply(s);
  if (ForwardToOwner(call, RpcMetrics::kDeleteSchedule, req.namespace_(),
                     req.key())) {
    return call.reactor();
  }
  NamespacePin pin;
  if (!Namespace(req.namespace_(), &pin).ok()) {
    return call.Reply(
        Absent(req.namespace_(), req.key(), "no schedule '" + req.key() + "'"));
  }
  scheduler_.RemoveSchedule(pin.id(), req.key(), req.expected_version(),
                            [call, pin](Partition::ScheduleResult r) {
                              if (r.status.ok())
                                call.resp()->set_version(r.info.rec.version);
                              call.Reply(r.status);
                            });
  return call.reactor();
}

grpc::ServerUnaryReactor* DelaydService::DoPreviewSchedule(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
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
  for (const WallNanos at :
       schedule::Preview(p.spec, p.bounds, p.after, p.count)) {
    SetTimestamp(at, call.resp()->add_instants());
  }
  return call.Reply(Status::Ok());
}

grpc::ServerUnaryReactor* DelaydService::ActOnSchedule(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out,
    RpcMetrics::Method method, Partition::ScheduleAction action) {
  const auto call = Start<v1::ScheduleActionRequest, v1::Schedule>(
      ctx, in, out, method, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = Authorize(call.caller(), req.namespace_(), kWrite);
  if (s.ok()) s = validator_.NamespaceName(req.namespace_());
  if (s.ok()) s = validator_.Key(req.key());
  if (!s.ok()) return call.Reply(s);
  if (ForwardToOwner(call, method, req.namespace_(), req.key())) {
    return call.reactor();
  }
  NamespacePin pin;
  if (!Namespace(req.namespace_(), &pin).ok()) {
    return call.Reply(
        Absent(req.namespace_(), req.key(), "no schedule '" + req.key() + "'"));
  }
  scheduler_.ActOnSchedule(pin.id(), req.key(), action, req.expected_version(),
                           [this, call, pin](Partition::ScheduleResult r) {
                             if (r.status.ok()) {
                               ToProto(scheduler_.dispatcher(pin.id()).name(),
                                       r.info, call.resp());
                             }
                             call.Reply(r.status);
                           });
  return call.reactor();
}

grpc::ServerUnaryReactor* DelaydService::DoPauseSchedule(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return ActOnSchedule(ctx, in, out, RpcMetrics::kPauseSchedule,
                       Partition::ScheduleAction::kPause);
}

grpc::ServerUnaryReactor* DelaydService::DoResumeSchedule(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return ActOnSchedule(ctx, in, out, RpcMetrics::kResumeSchedule,
                       Partition::ScheduleAction::kResume);
}

grpc::ServerUnaryReactor* DelaydService::DoTriggerSchedule(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return ActOnSchedule(ctx, in, out, RpcMetrics::kTriggerSchedule,
                       Partition::ScheduleAction::kTrigger);
}

}  // namespace delayd
