// The daemon-wide calls: Stats (admin on `*`, or read on the one namespace
// asked for) and Backup (admin on `*`).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "server/api/service.h"

namespace delayd {
namespace {

void Fill(const NamespaceCounters& c, v1::NamespaceStats* out) {
  out->set_pending_timers(c.pending.load(std::memory_order_relaxed));
  out->set_ready_events(c.ready.load(std::memory_order_relaxed));
  out->set_in_flight_events(c.in_flight.load(std::memory_order_relaxed));
  out->set_retrying_events(c.retrying.load(std::memory_order_relaxed));
  out->set_dead_letters(c.dead_letters.load(std::memory_order_relaxed));
  out->set_workers(c.workers.load(std::memory_order_relaxed));
  out->set_watchers(c.watchers.load(std::memory_order_relaxed));
  out->set_timers_set(c.set.load(std::memory_order_relaxed));
  out->set_timers_moved(c.moved.load(std::memory_order_relaxed));
  out->set_timers_removed(c.removed.load(std::memory_order_relaxed));
  out->set_timers_expired(c.expired.load(std::memory_order_relaxed));
  out->set_timers_drained(c.drained.load(std::memory_order_relaxed));
  out->set_events_delivered(c.delivered.load(std::memory_order_relaxed));
  out->set_events_redelivered(c.redelivered.load(std::memory_order_relaxed));
  out->set_events_acked(c.acked.load(std::memory_order_relaxed));
}

void Fill(const prometheus::Histogram& h, v1::LatencySummary* out) {
  const Quantiles q = QuantilesOf(h);
  out->set_count(q.count);
  if (q.count == 0) return;
  auto set = [](double seconds, google::protobuf::Duration* d) {
    const auto ns = static_cast<std::int64_t>(seconds * 1e9);
    d->set_seconds(ns / 1'000'000'000);
    d->set_nanos(static_cast<std::int32_t>(ns % 1'000'000'000));
  };
  set(q.p50, out->mutable_p50());
  set(q.p99, out->mutable_p99());
}

}  // namespace

grpc::ServerUnaryReactor* DelaydService::Backup(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  const auto call = Start<v1::BackupRequest, v1::BackupResponse>(
      ctx, in, out, RpcMetrics::kBackup, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  Status s = call.caller().May("", kAdmin);
  if (s.ok() && backup_dir_.empty()) {
    s = Status::FailedPrecondition(
        "backups are off: start delayd with --backup-dir");
  }
  if (s.ok() && !scheduler_.durable()) {
    s = Status::FailedPrecondition("--in-memory: there is no store to back up");
  }
  if (s.ok() &&
      (req.dir().empty() || req.dir().find('\0') != std::string::npos)) {
    s = Status::InvalidArgument("dir: empty or not a path");
  }
  if (s.ok() && backup_running_.exchange(true)) {
    s = Status::FailedPrecondition("a backup is already running");
  }
  if (!s.ok()) return call.Reply(s);
  // The file system's calls and the backup itself block: off this thread.
  scheduler_.Offload([this, call, dir = req.dir()] {
    const Status s = WriteBackup(dir, call.resp());
    backup_running_ = false;
    call.Reply(s);
  });
  return call.reactor();
}

Status DelaydService::WriteBackup(const std::string& dir,
                                  v1::BackupResponse* resp) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(backup_dir_, ec);
  const fs::path root = fs::weakly_canonical(backup_dir_, ec);
  if (ec) {
    return Status::Internal("--backup-dir " + backup_dir_ + ": " +
                            ec.message());
  }
  // A relative dir is taken under the root; an absolute one must be in it.
  const fs::path target = fs::weakly_canonical(root / dir, ec);
  const fs::path rel = target.lexically_relative(root);
  if (ec || rel.empty() || rel == "." || *rel.begin() == "..") {
    return Status::InvalidArgument(
        "dir: must name a new directory inside --backup-dir (" + root.string() +
        ")");
  }
  if (fs::exists(target, ec)) {
    return Status::AlreadyExists(target.string() + " already exists");
  }
  fs::create_directories(target.parent_path(), ec);
  const auto started = std::chrono::steady_clock::now();
  Status s = scheduler_.Backup(target.string());
  if (s.ok()) {
    resp->set_dir(target.string());
    spdlog::info("backup written to {} in {:.3f} s", target.string(),
                 std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - started)
                     .count());
  }
  return s;
}

grpc::ServerUnaryReactor* DelaydService::Stats(grpc::CallbackServerContext* ctx,
                                               const grpc::ByteBuffer* in,
                                               grpc::ByteBuffer* out) {
  const auto call = Start<v1::StatsRequest, v1::StatsResponse>(
      ctx, in, out, RpcMetrics::kStats, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  v1::StatsResponse* resp = call.resp();
  if (!req.namespace_().empty()) {
    // One namespace, for a caller who may read it: nothing daemon-wide,
    // which would tell of the other tenants.
    Status s = Authorize(call.caller(), req.namespace_(), kRead);
    if (s.ok()) s = validator_.NamespaceName(req.namespace_());
    if (!s.ok()) return call.Reply(s);
    auto* figures = resp->add_namespaces();
    figures->set_namespace_(req.namespace_());
    // (Subscribers waiting for a namespace no write has created yet are
    // counted too.)
    scheduler_.FiguresOf(
        req.namespace_(),
        [figures](const NamespaceCounters& c) { Fill(c, figures); });
    figures->set_paused(scheduler_.PolicyOf(req.namespace_()).paused);
    return call.Reply(Status::Ok());
  }
  if (Status s = call.caller().May("", kAdmin); !s.ok()) return call.Reply(s);
  Counters& c = scheduler_.counters();
  resp->set_pending_timers(c.pending.load());
  resp->set_ready_events(c.ready.load());
  resp->set_in_flight_events(c.in_flight.load());
  resp->set_retrying_events(c.retrying.load());
  resp->set_dead_letters(c.dead_letters.load());
  resp->set_workers(c.workers.load());
  resp->set_watchers(c.watchers.load());
  resp->set_partitions(scheduler_.partitions());
  resp->set_timers_set(c.set.load());
  resp->set_timers_fired(c.fired.load());
  resp->set_events_acked(c.acked.load());
  resp->set_events_redelivered(c.redelivered.load());
  resp->set_durable(scheduler_.durable());
  resp->set_store_errors(c.store_errors.load());
  scheduler_.ForEachNamespace(
      [resp](const std::string& name, const NamespaceCounters& figures) {
        auto* out = resp->add_namespaces();
        out->set_namespace_(name);
        Fill(figures, out);
      },
      /*waiting=*/true);
  std::sort(resp->mutable_namespaces()->begin(),
            resp->mutable_namespaces()->end(),
            [](const auto& a, const auto& b) {
              return a.namespace_() < b.namespace_();
            });
  for (auto& ns : *resp->mutable_namespaces()) {
    ns.set_paused(scheduler_.PolicyOf(ns.namespace_()).paused);
  }
  Fill(scheduler_.metrics().firing_lateness(), resp->mutable_firing_lateness());
  Fill(scheduler_.metrics().delivery_lateness(),
       resp->mutable_delivery_lateness());
  return call.Reply(Status::Ok());
}

grpc::ServerUnaryReactor* DelaydService::ClusterStatus(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in,
    grpc::ByteBuffer* out) {
  const auto call = Start<v1::ClusterStatusRequest, v1::ClusterStatusResponse>(
      ctx, in, out, RpcMetrics::kClusterStatus, request_limits_.other);
  if (call.answered()) return call.reactor();
  if (Status s = call.caller().May("", kAdmin); !s.ok()) return call.Reply(s);
  ClusterView* view = cluster_view_.load();
  if (view == nullptr) {
    return call.Reply(Status::FailedPrecondition(
        "not a cluster node (started without --advertise), or not joined "
        "yet"));
  }
  // It reads the database: off this thread.
  scheduler_.Offload([call, view] { call.Reply(view->Describe(call.resp())); });
  return call.reactor();
}

}  // namespace delayd
