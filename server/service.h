// The gRPC face of delayd: validates requests, posts them to the scheduler
// and maps the core's Status to a grpc::Status in exactly one function.
// Handlers never block; they use the callback API and finish from whichever
// strand completes the operation.
#ifndef DELAYD_SERVER_SERVICE_H_
#define DELAYD_SERVER_SERVICE_H_

#include <google/protobuf/arena.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/message_allocator.h>
#include <grpcpp/support/server_interceptor.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/auth.h"
#include "server/batch_wire.h"
#include "server/scheduler.h"
#include "server/status.h"
#include "server/tls.h"
#include "server/validate.h"

namespace delayd {

// Whether a listen address ("host:port") is on the loopback interface.
bool IsLoopback(std::string_view listen);

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

// Batch takes its request as bytes (see batch_wire.h); every other method
// takes parsed messages.
class DelaydService final : public v1::Delayd::WithRawCallbackMethod_Batch<
                                v1::Delayd::CallbackService> {
 public:
  DelaydService(Scheduler& scheduler, const Authorizer& auth)
      : scheduler_(scheduler),
        auth_(auth),
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

 private:
  // The last namespace resolved within one request, so that a Batch of
  // operations on one namespace validates and looks it up once.
  // (The name is a view into the request, which outlives the cache.)
  struct NamespaceCache {
    std::string_view name;
    bool valid = false;
    NamespaceId id = 0;
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
  const Validator validator_;
  ArenaMessageAllocator<v1::SetTimerRequest, v1::SetTimerResponse>
      set_allocator_;
};

// gRPC's callback API answers a request it cannot parse (bytes that are no
// such message, or a `string` field that is not UTF-8) with UNIMPLEMENTED and
// no message, as if the method did not exist (see grpc/grpc#30454). On
// delayd's methods this turns that answer into INVALID_ARGUMENT naming the
// message expected. Other calls (health, reflection, unknown methods) get no
// interceptor.
class ParseErrorInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  ParseErrorInterceptorFactory();
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  // Method path ("/delayd.v1.Delayd/SetTimer") to the error for a request
  // that does not parse as its input type.
  // (Ordered, to be searched by the call's method name without a copy.)
  std::map<std::string, std::string, std::less<>> errors_;
};

// The daemon's gRPC server: the service, health checking and reflection.
class DelaydServer {
 public:
  struct Options {
    std::string listen = "127.0.0.1:7070";
    Scheduler::Options scheduler;
    std::chrono::milliseconds keepalive_time = std::chrono::seconds(30);
    std::chrono::milliseconds keepalive_timeout = std::chrono::seconds(10);
    // TLS (empty cert: plaintext); see tls.h.
    TlsCertificates::Files tls;
    // Token file (empty: no authentication); see auth.h.
    std::string auth_tokens;
    // Largest Batch request in bytes; every other request is far smaller.
    std::size_t max_batch_bytes = 16 << 20;
    // Memory gRPC may take for connections and calls in flight (its
    // ResourceQuota); past it, new calls wait or are refused.
    std::size_t grpc_memory_bytes = 1u << 30;
    // Concurrent calls (streams) per client connection.
    int max_streams_per_connection = 1000;
  };

  explicit DelaydServer(Options options);
  ~DelaydServer();

  // Starts the scheduler (recovering the store, if any) and the server.
  // Fails if the store cannot be opened or read, or the address bound.
  Status Start();
  const Scheduler::RecoveryReport& recovery() const { return recovery_; }
  // The bound port (useful with port 0).
  int port() const { return port_; }
  // Graceful stop: health NOT_SERVING, new operations UNAVAILABLE, streams
  // ended with UNAVAILABLE, in-flight calls given until `grace` to finish,
  // then the scheduler stops. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);
  Scheduler& scheduler() { return *scheduler_; }
  // Reads the token file and the TLS certificates again (SIGHUP). What fails
  // to load is not applied and is said in the result; the rest is.
  Status Reload();
  // Whether anything guards the port: TLS or tokens.
  bool secured() const { return tls_ != nullptr || auth_.enabled(); }

 private:
  Options options_;
  Authorizer auth_;
  std::unique_ptr<TlsCertificates> tls_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<DelaydService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool stopped_ = false;
  Scheduler::RecoveryReport recovery_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_SERVICE_H_
