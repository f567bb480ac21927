// The gRPC face of delayd: validates requests, posts them to the scheduler
// and maps the core's Status to a grpc::Status in exactly one function.
// Handlers never block; they use the callback API and finish from whichever
// strand completes the operation.
#ifndef DELAYD_SERVER_SERVICE_H_
#define DELAYD_SERVER_SERVICE_H_

#include <google/protobuf/arena.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/message_allocator.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/auth.h"
#include "server/batch_wire.h"
#include "server/scheduler.h"
#include "server/status.h"
#include "server/validate.h"

namespace delayd {

// The one mapping from the core's status to gRPC's.
grpc::Status ToGrpc(const Status& status);

// Sends protobuf's own log lines to spdlog instead of stderr. In the daemon
// they come from parsing what clients send (a `string` field that is not
// UTF-8), and the call is refused; they go to the debug level so that a
// client cannot flood the log. Fatal ones stay critical.
// Call once, before serving (protobuf's handler is not thread-safe to set).
void RouteProtobufLogsToSpdlog();

// The arena of one call's messages: a first block of 4 KiB, growing to 1 MiB
// blocks for large calls.
inline google::protobuf::ArenaOptions CallArenaOptions() {
  google::protobuf::ArenaOptions o;
  o.start_block_size = 4096;
  o.max_block_size = 1 << 20;
  return o;
}

// Request and response of one call on one protobuf arena: parsing a request,
// and building its response, then costs a few large allocations instead of
// many small ones.
template <typename Request, typename Response>
class ArenaMessageAllocator : public grpc::MessageAllocator<Request, Response> {
 public:
  grpc::MessageHolder<Request, Response>* AllocateMessages() override {
    return new Holder;
  }

 private:
  class Holder : public grpc::MessageHolder<Request, Response> {
   public:
    Holder() : arena_(CallArenaOptions()) {
      this->set_request(
          google::protobuf::Arena::CreateMessage<Request>(&arena_));
      this->set_response(
          google::protobuf::Arena::CreateMessage<Response>(&arena_));
    }
    void Release() override { delete this; }

   private:
    google::protobuf::Arena arena_;
  };
};

// Finishes a unary call (from any thread: the callbacks run on scheduler
// strands). A limit hit is logged (rate-limited).
void Finish(grpc::ServerUnaryReactor* reactor, const Status& status);
// Finishes a unary call at once, in its handler.
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* ctx,
                                    const Status& status);

// Batch takes its request as bytes (see batch_wire.h); every other method
// takes parsed messages. Stats and Backup are in service_admin.cc.
class DelaydService final : public v1::Delayd::WithRawCallbackMethod_Batch<
                                v1::Delayd::CallbackService> {
 public:
  // `backup_dir`: where Backup writes (empty: Backup is refused).
  DelaydService(Scheduler& scheduler, const Authorizer& auth,
                std::string backup_dir = "")
      : scheduler_(scheduler),
        auth_(auth),
        backup_dir_(std::move(backup_dir)),
        validator_(scheduler.limits(), scheduler.partitions()) {
    SetMessageAllocatorFor_SetTimer(&set_allocator_);
  }

  grpc::ServerUnaryReactor* SetTimer(grpc::CallbackServerContext* ctx,
                                     const v1::SetTimerRequest* req,
                                     v1::SetTimerResponse* resp) override;
  grpc::ServerUnaryReactor* MoveTimer(grpc::CallbackServerContext* ctx,
                                      const v1::MoveTimerRequest* req,
                                      v1::MoveTimerResponse* resp) override;
  grpc::ServerUnaryReactor* RemoveTimer(grpc::CallbackServerContext* ctx,
                                        const v1::RemoveTimerRequest* req,
                                        v1::RemoveTimerResponse* resp) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* ctx,
                                  const v1::DrainRequest* req,
                                  v1::DrainResponse* resp) override;
  grpc::ServerUnaryReactor* GetTimer(grpc::CallbackServerContext* ctx,
                                     const v1::GetTimerRequest* req,
                                     v1::Timer* resp) override;
  grpc::ServerUnaryReactor* ListTimers(grpc::CallbackServerContext* ctx,
                                       const v1::ListTimersRequest* req,
                                       v1::ListTimersResponse* resp) override;
  // A serialized delayd.v1.BatchRequest in, a BatchResponse out.
  grpc::ServerUnaryReactor* Batch(grpc::CallbackServerContext* ctx,
                                  const grpc::ByteBuffer* req,
                                  grpc::ByteBuffer* resp) override;
  grpc::ServerWriteReactor<v1::SubscribeResponse>* Subscribe(
      grpc::CallbackServerContext* ctx,
      const v1::SubscribeRequest* req) override;
  grpc::ServerUnaryReactor* Ack(grpc::CallbackServerContext* ctx,
                                const v1::AckRequest* req,
                                v1::AckResponse* resp) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx,
                                  const v1::StatsRequest* req,
                                  v1::StatsResponse* resp) override;
  grpc::ServerUnaryReactor* Backup(grpc::CallbackServerContext* ctx,
                                   const v1::BackupRequest* req,
                                   v1::BackupResponse* resp) override;

 private:
  // The last namespace resolved within one request, so that a Batch of
  // operations on one namespace validates and looks it up once.
  // (The name is a view into the request, which outlives the cache.)
  struct NamespaceCache {
    std::string_view name;
    bool valid = false;
    NamespaceId id = 0;
    // Every namespace resolved (and pinned) through the cache: the caller
    // unpins them once the request is answered.
    std::vector<NamespaceId> pinned;
  };
  // Resolves a namespace: creates it if `create` (a write), else NOT_FOUND
  // if it does not exist.
  Status Namespace(std::string_view name, NamespaceId* id,
                   NamespaceCache* cache = nullptr, bool create = false);
  // Whether the caller's token allows `permission` on namespace `name`
  // (empty: the default namespace); see auth.h. Checked before anything
  // else, so a refused call learns nothing and changes nothing.
  Status Authorize(const grpc::CallbackServerContext* ctx,
                   std::string_view name, std::uint8_t permission) const;
  // Stats spans every namespace.
  Status AuthorizeAll(const grpc::CallbackServerContext* ctx,
                      std::uint8_t permission) const;
  // Validates a set, move or remove and converts it for the scheduler.
  Status ToOp(const OpFields& f, WallNanos now, Op* op,
              NamespaceCache* cache = nullptr);
  template <typename Fill>
  grpc::ServerUnaryReactor* SubmitOp(grpc::CallbackServerContext* ctx,
                                     const Status& converted, Op op, Fill fill);

  Scheduler& scheduler_;
  const Authorizer& auth_;
  const std::string backup_dir_;
  std::mutex backup_mu_;  // One backup at a time.
  const Validator validator_;
  ArenaMessageAllocator<v1::SetTimerRequest, v1::SetTimerResponse>
      set_allocator_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_SERVICE_H_
