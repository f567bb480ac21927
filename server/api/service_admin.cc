// The daemon-wide calls: Stats (admin on `*`, or read on the one namespace
// asked for) and Backup (admin on `*`).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>

#include "delayd/text/build_info.h"
#include "server/api/service.h"
#include "server/api/service_split.h"

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

// Adds each count (every uint64 field) of `from` to `into`'s; one that
// `from` leaves unset (StatsResponse's daemon-wide figures) stays as it is.
void AddCounts(const google::protobuf::Message& from,
               google::protobuf::Message* into) {
  const auto* d = into->GetDescriptor();
  const auto* r = into->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    if (f->is_repeated() ||
        f->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_UINT64 ||
        (f->has_presence() && !r->HasField(from, f))) {
      continue;
    }
    r->SetUInt64(into, f, r->GetUInt64(*into, f) + r->GetUInt64(from, f));
  }
}

// Two nodes' latencies as one: counts summed, each quantile the larger
// (an upper estimate, as each node's is).
void AddLatency(const v1::LatencySummary& from, v1::LatencySummary* into) {
  if (from.count() == 0) return;
  const auto later = [](const google::protobuf::Duration& x,
                        const google::protobuf::Duration& y) {
    return std::make_pair(x.seconds(), x.nanos()) >
           std::make_pair(y.seconds(), y.nanos());
  };
  if (into->count() == 0 || later(from.p50(), into->p50())) {
    *into->mutable_p50() = from.p50();
  }
  if (into->count() == 0 || later(from.p99(), into->p99())) {
    *into->mutable_p99() = from.p99();
  }
  into->set_count(into->count() + from.count());
}

// The nodes' figures as one: counts summed, namespaces joined by name (in
// name order).
void SumStats(std::vector<v1::StatsResponse>& answers, v1::StatsResponse* out) {
  std::map<std::string, v1::NamespaceStats> namespaces;
  bool durable = true, daemon_wide = false;
  for (v1::StatsResponse& a : answers) {
    AddCounts(a, out);
    daemon_wide = daemon_wide || a.has_durable();
    if (a.has_partitions()) {
      out->set_partitions(std::max(out->partitions(), a.partitions()));
    }
    durable = durable && a.durable();
    AddLatency(a.firing_lateness(), out->mutable_firing_lateness());
    AddLatency(a.delivery_lateness(), out->mutable_delivery_lateness());
    for (v1::NamespaceStats& n : *a.mutable_namespaces()) {
      auto [it, added] = namespaces.try_emplace(n.namespace_());
      if (added) {
        it->second.Swap(&n);
        continue;
      }
      AddCounts(n, &it->second);
      it->second.set_paused(it->second.paused() || n.paused());
      if (n.push_failures_in_a_row() > it->second.push_failures_in_a_row()) {
        it->second.set_push_failures_in_a_row(n.push_failures_in_a_row());
        it->second.set_push_last_error(n.push_last_error());
      }
    }
  }
  if (daemon_wide) out->set_durable(durable);
  if (answers.size() > 0 && !answers[0].has_firing_lateness()) {
    out->clear_firing_lateness();
    out->clear_delivery_lateness();
  }
  for (auto& [name, n] : namespaces) out->add_namespaces()->Swap(&n);
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

grpc::ServerUnaryReactor* DelaydService::DoBackup(const CallIn& ctx,
                                                  const grpc::ByteBuffer* in,
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

grpc::ServerUnaryReactor* DelaydService::DoStats(const CallIn& ctx,
                                                 const grpc::ByteBuffer* in,
                                                 grpc::ByteBuffer* out) {
  const auto call = Start<v1::StatsRequest, v1::StatsResponse>(
      ctx, in, out, RpcMetrics::kStats, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  if (!req.namespace_().empty()) {
    // One namespace, for a caller who may read it: nothing daemon-wide,
    // which would tell of the other tenants.
    Status s = Authorize(call.caller(), req.namespace_(), kRead);
    if (s.ok()) s = validator_.NamespaceName(req.namespace_());
    if (!s.ok()) return call.Reply(s);
  } else if (Status s = call.caller().May("", kAdmin); !s.ok()) {
    return call.Reply(s);
  }
  // On a cluster node, every node's figures summed.
  return FromEveryOwner(
      call, RpcMetrics::kStats,
      [this, &req](auto done) {
        v1::StatsResponse figures;
        LocalStats(req.namespace_(), &figures);
        done(Status::Ok(), std::move(figures));
      },
      [](std::vector<v1::StatsResponse>& answers, v1::StatsResponse* out) {
        SumStats(answers, out);
        out->set_version(VersionAndCommit());  // (the answering node's)
      });
}

void DelaydService::LocalStats(const std::string& ns, v1::StatsResponse* resp) {
  if (!ns.empty()) {
    auto* figures = resp->add_namespaces();
    figures->set_namespace_(ns);
    // (Subscribers waiting for a namespace no write has created yet are
    // counted too.)
    scheduler_.FiguresOf(
        ns, [figures](const NamespaceCounters& c) { Fill(c, figures); });
    figures->set_paused(scheduler_.PolicyOf(ns).paused);
    PushHealth(figures);
    return;
  }
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
  for (auto& n : *resp->mutable_namespaces()) {
    n.set_paused(scheduler_.PolicyOf(n.namespace_()).paused);
    PushHealth(&n);
  }
  Fill(scheduler_.metrics().firing_lateness(), resp->mutable_firing_lateness());
  Fill(scheduler_.metrics().delivery_lateness(),
       resp->mutable_delivery_lateness());
}

void DelaydService::PushHealth(v1::NamespaceStats* n) const {
  if (pusher_ == nullptr) return;
  const push::Pusher::Health health = pusher_->HealthOf(n->namespace_());
  n->set_push_failures_in_a_row(health.failures_in_a_row);
  n->set_push_last_error(health.last_error);
}

grpc::ServerUnaryReactor* DelaydService::DoClusterStatus(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
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
