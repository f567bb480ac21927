// The gRPC face of delayd: reads each request from its bytes within its
// method's size limit, validates it and posts it to the scheduler; the
// core's Status becomes a grpc::Status in exactly one function (ToGrpc).
// Handlers never block; they use the callback API and finish from whichever
// strand completes the operation.
#ifndef DELAYD_SERVER_API_SERVICE_H_
#define DELAYD_SERVER_API_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <string>
#include <string_view>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/api/auth.h"
#include "server/api/batch_wire.h"
#include "server/api/cluster_view.h"
#include "server/api/forward.h"
#include "server/api/queue_call.h"
#include "server/api/rpc_metrics.h"
#include "server/api/stream.h"
#include "server/api/unary_call.h"
#include "server/api/validate.h"
#include "server/common/stable_hash.h"
#include "server/common/status.h"
#include "server/core/scheduler.h"
#include "server/push/pusher.h"

namespace delayd {

// Sends protobuf's own log lines to spdlog instead of stderr. In the daemon
// they come from parsing what clients send (a `string` field that is not
// UTF-8), and the call is refused; they go to the debug level so that a
// client cannot flood the log. Fatal ones stay critical.
// Call once, before serving (protobuf's handler is not thread-safe to set).
void RouteProtobufLogsToSpdlog();

// Every method of the service, taking its request as bytes (see
// unary_call.h; Subscribe's stream writes bytes too, see stream.h).
// (Each WithRawCallbackMethod_X wraps the next: Raw<Base, A, B>::type is
// A<B<Base>>.)
template <class Base, template <class> class... Wrappers>
struct Raw {
  using type = Base;
};
template <class Base, template <class> class First,
          template <class> class... Rest>
struct Raw<Base, First, Rest...> {
  using type = First<typename Raw<Base, Rest...>::type>;
};
using RawDelayd =
    Raw<v1::Delayd::Service, v1::Delayd::WithRawCallbackMethod_SetTimer,
        v1::Delayd::WithRawCallbackMethod_MoveTimer,
        v1::Delayd::WithRawCallbackMethod_RemoveTimer,
        v1::Delayd::WithRawCallbackMethod_Drain,
        v1::Delayd::WithRawCallbackMethod_GetTimer,
        v1::Delayd::WithRawCallbackMethod_ListTimers,
        v1::Delayd::WithRawCallbackMethod_Batch,
        v1::Delayd::WithRawCallbackMethod_Subscribe,
        v1::Delayd::WithRawCallbackMethod_Ack,
        v1::Delayd::WithRawCallbackMethod_Nack,
        v1::Delayd::WithRawCallbackMethod_ExtendLease,
        v1::Delayd::WithRawCallbackMethod_Work,
        v1::Delayd::WithRawCallbackMethod_GetPolicy,
        v1::Delayd::WithRawCallbackMethod_SetPolicy,
        v1::Delayd::WithRawCallbackMethod_TestPushTarget,
        v1::Delayd::WithRawCallbackMethod_ListDeadLetters,
        v1::Delayd::WithRawCallbackMethod_RequeueDeadLetters,
        v1::Delayd::WithRawCallbackMethod_PurgeDeadLetters,
        v1::Delayd::WithRawCallbackMethod_Stats,
        v1::Delayd::WithRawCallbackMethod_Backup,
        v1::Delayd::WithRawCallbackMethod_PreviewSchedule,
        v1::Delayd::WithRawCallbackMethod_SetSchedule,
        v1::Delayd::WithRawCallbackMethod_GetSchedule,
        v1::Delayd::WithRawCallbackMethod_ListSchedules,
        v1::Delayd::WithRawCallbackMethod_DeleteSchedule,
        v1::Delayd::WithRawCallbackMethod_PauseSchedule,
        v1::Delayd::WithRawCallbackMethod_ResumeSchedule,
        v1::Delayd::WithRawCallbackMethod_TriggerSchedule,
        v1::Delayd::WithRawCallbackMethod_ClusterStatus>::type;

// The most bytes a request may have, by method, and the flags that set it.
struct RequestLimit {
  std::size_t bytes;
  std::string_view from;
};
struct RequestLimits {
  // SetTimer: one full timer.
  RequestLimit set;
  // Ack, Nack, ExtendLease: the most event ids such a call takes.
  RequestLimit ack;
  // Every other method but Batch: a namespace, a key and small fields.
  // (Batch is held to gRPC's receive limit, --max-batch-bytes, and counts
  // its operations on the bytes.)
  RequestLimit other;
  // SetPolicy (with a push target), and TestPushTarget (with a payload).
  RequestLimit policy;
  RequestLimit test_push;
  static RequestLimits Of(const Limits& l);
};

// Every unary method of delayd.v1.Delayd, as X(name). Batch reads its
// request straight from the bytes (batch_wire.h); ClusterStatus is answered
// by the cluster view (SetClusterView) off the calling thread.
// clang-format off
#define DELAYD_UNARY_METHODS(X) \
  X(SetTimer) \
  X(MoveTimer) \
  X(RemoveTimer) \
  X(Drain) \
  X(GetTimer) \
  X(ListTimers) \
  X(Batch) \
  X(Ack) \
  X(Nack) \
  X(ExtendLease) \
  X(GetPolicy) \
  X(TestPushTarget) \
  X(SetPolicy) \
  X(ListDeadLetters) \
  X(RequeueDeadLetters) \
  X(PurgeDeadLetters) \
  X(Stats) \
  X(Backup) \
  X(PreviewSchedule) \
  X(SetSchedule) \
  X(GetSchedule) \
  X(ListSchedules) \
  X(DeleteSchedule) \
  X(PauseSchedule) \
  X(ResumeSchedule) \
  X(TriggerSchedule) \
  X(ClusterStatus)
// clang-format on

// Declares unary method X of the callback API and DoX, which serves it.
#define DELAYD_UNARY(X)                                         \
  grpc::ServerUnaryReactor* X(grpc::CallbackServerContext* ctx, \
                              const grpc::ByteBuffer* in,       \
                              grpc::ByteBuffer* out) override { \
    return Do##X(CallIn(ctx), in, out);                         \
  }                                                             \
  grpc::ServerUnaryReactor* Do##X(                              \
      const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out);

// Ack, Nack and ExtendLease are in service_work.cc; GetPolicy and SetPolicy
// in service_policy.cc; the dead-letter calls in service_dead.cc; Stats,
// Backup and ClusterStatus in service_admin.cc; the schedule calls in
// service_schedule.cc; Batch in service_batch.cc. On a cluster node (a
// forwarder given), calls on a key another node owns are forwarded to it;
// calls on events go to the nodes owning their partitions; Drain, Stats and
// the listings ask every node owning partitions; a Subscribe relays the
// other nodes' events (relay.h).
class DelaydService final : public RawDelayd {
 public:
  // `backup_dir`: where Backup writes (empty: Backup is refused).
  // `forwarder`: a cluster node's (else null), outliving the service.
  DelaydService(Scheduler& scheduler, const Authorizer& auth,
                std::string backup_dir = "", Forwarder* forwarder = nullptr)
      : scheduler_(scheduler),
        auth_(auth),
        forwarder_(forwarder),
        backup_dir_(std::move(backup_dir)),
        validator_(scheduler.limits(), scheduler.partitions()),
        request_limits_(RequestLimits::Of(scheduler.limits())),
        rpc_(*scheduler.metrics().registry()) {
    if (forwarder_ != nullptr) {
      forwarder_->CountInFlight(&rpc_.forwarded_in_flight());
    }
  }

  // Push delivery, outliving the service (null: push targets are
  // refused). Set before the service serves.
  void SetPusher(push::Pusher* pusher) {
    pusher_ = pusher;
    push_ = pusher != nullptr ? &pusher->options() : nullptr;
  }

  // A Subscribe's start, from its request (a stream served on the loop's
  // queue: loop_server.h), as Subscribe makes it.
  Status OpenSubscribe(grpc::ServerContextBase* ctx, const grpc::ByteBuffer* in,
                       StreamStart* start);
  MethodMetrics& subscribe_metrics() { return rpc_[RpcMetrics::kSubscribe]; }
  // A Work stream served on the loop's queue, as Work serves it.
  QueueReactor* WorkOnQueue(QueueCall* call);

  // Each unary method takes a serialized request and answers a serialized
  // response. The callback API calls X, which calls DoX; a call served on
  // the loop's queue calls DoX with its own CallIn.
  DELAYD_UNARY_METHODS(DELAYD_UNARY)
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Subscribe(
      grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* in) override;
  // Its requests are applied by WorkRequest (service_work.cc).
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Work(
      grpc::CallbackServerContext* ctx) override;

  // A cluster node's view of its cluster (outliving the service), once the
  // node has joined; until then ClusterStatus is refused.
  void SetClusterView(ClusterView* view) { cluster_view_.store(view); }

 private:
  // PauseSchedule, ResumeSchedule and TriggerSchedule: the same request
  // and answer, a different action (service_schedule.cc).
  grpc::ServerUnaryReactor* ActOnSchedule(const CallIn& ctx,
                                          const grpc::ByteBuffer* in,
                                          grpc::ByteBuffer* out,
                                          RpcMetrics::Method method,
                                          Partition::ScheduleAction action);
  // RequeueDeadLetters and PurgeDeadLetters: the same request and answer,
  // a different change (service_dead.cc).
  using DeadLetterChange = void (Dispatcher::*)(
      std::vector<std::uint64_t>, std::function<void(Status, LeaseResult)>);
  grpc::ServerUnaryReactor* ChangeDeadLetters(const CallIn& ctx,
                                              const grpc::ByteBuffer* in,
                                              grpc::ByteBuffer* out,
                                              RpcMetrics::Method method,
                                              DeadLetterChange change);

  // Subscribe, and a Work stream's first message: authorizes and validates
  // `req`, counts the subscriber (RESOURCE_EXHAUSTED past the limit) and
  // says how the stream subscribes.
  Status StartStream(const grpc::ServerContextBase& ctx, const Caller& caller,
                     v1::SubscribeRequest req, StreamStart* start);
  // A Work stream's request after the first (on namespace `ns`, which its
  // caller may work on): applied as the unary call of its kind, `done`
  // given the answer (once, from any thread).
  void WorkRequest(grpc::ServerContextBase* ctx, const std::string& ns,
                   v1::WorkRequest req,
                   std::function<void(v1::WorkAnswer)> done);
  // A Work stream's start and requests, as its reactor takes them.
  std::function<Status(v1::SubscribeRequest, StreamStart*)> WorkStart(
      grpc::ServerContextBase* ctx, const Caller& caller);
  std::function<void(const std::string&, v1::WorkRequest,
                     std::function<void(v1::WorkAnswer)>)>
  WorkHandle(grpc::ServerContextBase* ctx);

  // The last namespace resolved within one request, so that a Batch of
  // operations on one namespace validates and looks it up once.
  // (The name is a view into the request, which outlives the cache.)
  struct NamespaceCache {
    std::string_view name;
    bool valid = false;
    // A pin of every namespace resolved through the cache (the last is the
    // cached one), kept until the request is answered.
    std::vector<NamespacePin> pins;
  };
  // Resolves a namespace into `pin`: creates it if `create` (a write), else
  // NOT_FOUND if it does not exist.
  Status Namespace(std::string_view name, NamespacePin* pin,
                   NamespaceCache* cache = nullptr, bool create = false);
  // What a call on `key` of namespace `name`, unknown here, gets: NOT_FOUND
  // with `message`, unless this node cannot know (Scheduler::Unserved).
  Status Absent(std::string_view name, std::string_view key,
                std::string message) const;
  // The caller of `ctx`, by the token it sent; see auth.h. Checked before
  // a request is parsed, so an unknown caller costs nothing more.
  Status Identify(const grpc::ServerContextBase* ctx, Caller* caller) const;
  // Whether `caller` may do `permission` on namespace `name` (empty: the
  // default namespace). Checked before anything else is done with the
  // request, so a refused call learns nothing and changes nothing.
  static Status Authorize(const Caller& caller, std::string_view name,
                          std::uint8_t permission);
  // A unary call with its caller identified and its request read within
  // `limit` (else answered at once: see Unary).
  template <typename Req, typename Resp>
  Unary<Req, Resp> Start(const CallIn& ctx, const grpc::ByteBuffer* in,
                         grpc::ByteBuffer* out, RpcMetrics::Method method,
                         const RequestLimit& limit) {
    return Unary<Req, Resp>(ctx, in, out, rpc_[method], limit.bytes, limit.from,
                            [this, base = ctx.get()](Caller* caller) {
                              return Identify(base, caller);
                            });
  }
  // A cluster node: forwards `call` (of `method`, its caller identified,
  // authorized and its request validated) to the node owning namespace
  // `ns`'s key `key` if that is another node, answering it with the owner's
  // answer (forward.h). True if it did.
  template <typename Req, typename Resp>
  bool ForwardToOwner(const Unary<Req, Resp>& call, RpcMetrics::Method method,
                      std::string_view ns, std::string_view key) {
    if (forwarder_ == nullptr) return false;
    const std::string owner =
        forwarder_->OwnerOf(StablePartition(ns.empty() ? "default" : ns, key,
                                            scheduler_.partitions()),
                            *call.ctx());
    if (owner.empty()) return false;
    forwarder_->Forward(call.ctx(), rpc_[method].name(), call.in(), call.out(),
                        owner, rpc_.forwarded(method), true,
                        [call](grpc::Status s) { call.Relay(std::move(s)); });
    return true;
  }
  // The event ids of `ids` by the node owning their partition (an event
  // id's low bits): this node's under "" (all of them if it is not in a
  // cluster, or `ctx` was forwarded here).
  std::map<std::string, std::vector<std::uint64_t>> EventOwners(
      const google::protobuf::RepeatedField<std::uint64_t>& ids,
      const grpc::ServerContextBase& ctx) const;
  // Every node owning partitions (this one under "", with no ids): for a
  // call on a whole namespace.
  std::map<std::string, std::vector<std::uint64_t>> AllOwners(
      const grpc::ServerContextBase& ctx) const;
  // Ack, Nack, ExtendLease and the dead-letter changes (service_split.h):
  // answers `call` by parts, `owners`' "" part by `local` (the namespace's
  // dispatcher, the ids, and where to give its answer; not called if the
  // namespace does not exist here: its ids are unknown), each other one
  // forwarded to its node as `call`'s request with that part's ids. The
  // answers' unknown_ids are joined and their counts summed by `add`.
  // (`call` is a Unary, or a request made on a Work stream: a StreamCall.)
  template <typename Call, typename Local, typename Merge>
  auto ByEventOwner(const Call& call, RpcMetrics::Method method,
                    std::map<std::string, std::vector<std::uint64_t>> owners,
                    Local local, Merge add) -> decltype(call.reactor());
  // Drain, Stats, ListDeadLetters and ListSchedules (service_split.h):
  // `call` answered by every node owning partitions (one when not in a
  // cluster, or when `call` was forwarded here), this one by `local` (given
  // where to put its answer), the others forwarded; `merge` makes one
  // answer of theirs.
  template <typename Req, typename Resp, typename Local, typename Merge>
  grpc::ServerUnaryReactor* FromEveryOwner(const Unary<Req, Resp>& call,
                                           RpcMetrics::Method method,
                                           Local local, Merge merge);
  // Validates a set, move or remove and converts it for the scheduler,
  // pinning its namespace in `pin`.
  Status ToOp(const OpFields& f, WallNanos now, Op* op, NamespacePin* pin,
              NamespaceCache* cache = nullptr);
  // A SetTimer, MoveTimer or RemoveTimer `call`: checks `permission`,
  // submits the operation and answers with its result, filled into the
  // response by `fill` on success.
  template <typename Req, typename Resp, typename Fill>
  grpc::ServerUnaryReactor* SubmitOp(const Unary<Req, Resp>& call,
                                     RpcMetrics::Method method,
                                     std::uint8_t permission, Fill fill);

  // Batch (service_batch.cc). Reads a request's operations into `fields`
  // (views into `wire`, or into a message on `call`'s arena), within the
  // max-batch-ops limit.
  Status ReadBatch(std::string_view wire, UnaryCall* call,
                   std::vector<OpFields>* fields);
  // Validates and submits the operations at `which` (indexes into
  // `fields`; null: all), writing each one's result into `resp` at its
  // index; then runs `done`.
  void SubmitBatchPart(const std::vector<OpFields>& fields,
                       const std::vector<std::uint32_t>* which,
                       v1::BatchResponse* resp, std::function<void()> done);
  // A cluster node: sends the operations other nodes own to them, one
  // forwarded Batch per owner, submits its own, and answers `call` with
  // every result in `resp` once all have answered. False (nothing done)
  // if this node owns every operation.
  bool SplitBatch(const CallIn& ctx, const grpc::ByteBuffer* in,
                  UnaryCall* call, const std::vector<OpFields>& fields,
                  v1::BatchResponse* resp);

  // One page of this node's dead letters of `req`'s namespace, from id
  // `from` (service_dead.cc).
  void ListLocalDeadLetters(
      const v1::ListDeadLettersRequest& req, std::size_t limit,
      std::uint64_t from,
      std::function<void(Status, v1::ListDeadLettersResponse)> done);

  // One page of this node's schedules of `req`'s namespace
  // (service_schedule.cc).
  Status ListLocalSchedules(const v1::ListSchedulesRequest& req,
                            std::size_t limit, v1::ListSchedulesResponse* out);

  // This node's figures: of namespace `ns`, or (empty) of the daemon
  // (service_admin.cc).
  void LocalStats(const std::string& ns, v1::StatsResponse* resp);

  // Checks `dir` against --backup-dir and writes the backup there
  // (blocking: run by Scheduler::Offload).
  Status WriteBackup(const std::string& dir, v1::BackupResponse* resp);

  Scheduler& scheduler_;
  const Authorizer& auth_;
  Forwarder* const forwarder_;
  std::atomic<ClusterView*> cluster_view_{nullptr};
  const std::string backup_dir_;
  std::atomic<bool> backup_running_{false};  // One backup at a time.
  const Validator validator_;
  // A namespace's push target's failures, into its figures.
  void PushHealth(v1::NamespaceStats* n) const;
  push::Pusher* pusher_ = nullptr;
  const push::PushOptions* push_ = nullptr;
  const RequestLimits request_limits_;
  RpcMetrics rpc_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_SERVICE_H_
