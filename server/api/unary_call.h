// One unary call taken as bytes.
//
// gRPC 1.51 has one receive limit per server, and it must let a full Batch
// in (--max-batch-bytes, 4 MiB by default). Parsed, a request that size made
// of small unknown fields takes several times its bytes: protobuf keeps each
// unknown field as an entry of its own (8 concurrent 4 MB requests of 2-byte
// fields grew the daemon by 296 MB). So every method takes its request as
// bytes and refuses one over its own limit before parsing it; see
// RequestLimits in service.h.
#ifndef DELAYD_SERVER_API_UNARY_CALL_H_
#define DELAYD_SERVER_API_UNARY_CALL_H_

#include <google/protobuf/arena.h>
#include <google/protobuf/message_lite.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <string_view>

#include "server/api/auth.h"
#include "server/api/rpc_metrics.h"
#include "server/common/status.h"

namespace delayd {

// The one mapping from the core's status to gRPC's.
grpc::Status ToGrpc(const Status& status);

// The arena of one call's messages: a first block of 4 KiB, growing to 1 MiB
// blocks for large calls. Parsing a request, and building its response, then
// costs a few large allocations instead of many small ones.
inline google::protobuf::ArenaOptions CallArenaOptions() {
  google::protobuf::ArenaOptions o;
  o.start_block_size = 4096;
  o.max_block_size = 1 << 20;
  return o;
}

// Parses `in` into `request` if it is at most `limit` bytes; else
// RESOURCE_EXHAUSTED naming `method` and the flags the limit follows
// (`from`), and nothing is parsed. INVALID_ARGUMENT naming the message type
// if it does not parse.
Status ReadRequest(const grpc::ByteBuffer& in, std::size_t limit,
                   std::string_view method, std::string_view from,
                   google::protobuf::MessageLite* request);

// A unary call as its handler receives it: its context, and how it is
// answered: through the callback API's default reactor, or through a
// function (a call served on the loop's queue: loop_server.h). Made once per
// call, before its handler runs; the handler keeps nothing of it but what
// UnaryCall and Unary copy.
class CallIn {
 public:
  using Answer = std::function<void(grpc::Status)>;
  // The callback API's call (implicit: a handler of the callback API passes
  // its context as it is).
  CallIn(grpc::CallbackServerContext* ctx)  // NOLINT(runtime/explicit)
      : ctx_(ctx), reactor_(ctx->DefaultReactor()) {}
  // A call answered by `answer` (given the status; the response, if OK, is
  // in the call's out buffer by then).
  CallIn(grpc::ServerContextBase* ctx, Answer answer)
      : ctx_(ctx), answer_(std::move(answer)) {}

  grpc::ServerContextBase* get() const { return ctx_; }
  grpc::ServerContextBase* operator->() const { return ctx_; }
  grpc::ServerContextBase& operator*() const { return *ctx_; }
  // The callback API's reactor, or null.
  grpc::ServerUnaryReactor* reactor() const { return reactor_; }
  const Answer& answer() const { return answer_; }

 private:
  grpc::ServerContextBase* const ctx_;
  grpc::ServerUnaryReactor* const reactor_ = nullptr;
  const Answer answer_;
};

// One unary call's messages, on an arena, and its answer. Created by a
// handler; Reply finishes the call (from any thread: replies often come from
// scheduler strands) and deletes this. The response is serialized into
// gRPC's buffer before Finish, so nothing of this is needed after it.
// (The callback API's call is finished through gRPC's default reactor: a
// reactor of our own would have gRPC run its OnDone through an executor
// thread, a hop that cost 14 % of unary and 7 % of Batch throughput. A call
// on the loop's queue is finished by its CallIn's answer.)
class UnaryCall {
 public:
  using Answer = CallIn::Answer;

  // The call's code and latency go to `metrics` when it is answered.
  UnaryCall(const CallIn& call, grpc::ByteBuffer* out, MethodMetrics& metrics)
      : reactor_(call.reactor()),
        answer_(call.answer()),
        out_(out),
        metrics_(metrics),
        started_(std::chrono::steady_clock::now()) {}
  UnaryCall(const UnaryCall&) = delete;
  UnaryCall& operator=(const UnaryCall&) = delete;

  // What the handler returns to gRPC. Take it before the call may be
  // answered from another thread.
  grpc::ServerUnaryReactor* reactor() const { return reactor_; }

  // A message on the call's arena.
  template <typename M>
  M* New() {
    return google::protobuf::Arena::CreateMessage<M>(&arena_);
  }

  // Finishes the call with `status`, answered by `response` if it is ok
  // (which needs one), and deletes this. A limit hit is logged
  // (rate-limited). Returns the reactor.
  grpc::ServerUnaryReactor* Reply(
      const Status& status,
      const google::protobuf::MessageLite* response = nullptr);
  // Finishes the call with `status` as it is, its response (if OK) already
  // in out() (another node's answer: forward.h), and deletes this.
  void Relay(grpc::Status status);
  grpc::ByteBuffer* out() const { return out_; }

 private:
  ~UnaryCall() = default;

  grpc::ServerUnaryReactor* const reactor_;
  Answer answer_;
  grpc::ByteBuffer* const out_;
  MethodMetrics& metrics_;
  const std::chrono::steady_clock::time_point started_;
  google::protobuf::Arena arena_{CallArenaOptions()};
};

// A handle on one unary call as every handler starts it: its request read
// within `limit` into a Req, its response a Resp, both on the call's arena.
// If reading fails (an unknown caller, a request over its limit or not
// parsing: see `identify`), the call is answered at once: answered().
// Handles are copied freely into callbacks; the call lives until Reply.
template <typename Req, typename Resp>
class Unary {
 public:
  // `identify` checks the caller's credentials before the request is read
  // (an unknown caller costs nothing more), setting `caller`.
  template <typename Identify>
  Unary(const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out,
        MethodMetrics& metrics, std::size_t limit, std::string_view limit_from,
        Identify identify)
      : call_(new UnaryCall(ctx, out, metrics)),
        ctx_(ctx.get()),
        in_(in),
        reactor_(call_->reactor()),
        req_(call_->New<Req>()),
        resp_(call_->New<Resp>()) {
    Status s = identify(&caller_);
    if (s.ok()) s = ReadRequest(*in, limit, metrics.name(), limit_from, req_);
    if (!s.ok()) {
      answered_ = true;
      call_->Reply(s);
    }
  }

  // Forwarding it names the owner in its trailers (forward.h).
  static constexpr bool kNamesOwner = true;

  bool answered() const { return answered_; }
  const Req& req() const { return *req_; }
  Resp* resp() const { return resp_; }
  const Caller& caller() const { return caller_; }
  // What the handler returns to gRPC.
  grpc::ServerUnaryReactor* reactor() const { return reactor_; }
  // Answers with `status`, and resp() if it is OK. Once per call.
  grpc::ServerUnaryReactor* Reply(const Status& status) const {
    call_->Reply(status, resp_);
    return reactor_;
  }
  // The call as gRPC gave it, to forward it (forward.h); Relay answers it
  // with what came back. Once per call, instead of Reply.
  grpc::ServerContextBase* ctx() const { return ctx_; }
  const grpc::ByteBuffer* in() const { return in_; }
  grpc::ByteBuffer* out() const { return call_->out(); }
  void Relay(grpc::Status status) const { call_->Relay(std::move(status)); }

 private:
  UnaryCall* call_;
  grpc::ServerContextBase* ctx_;
  const grpc::ByteBuffer* in_;
  grpc::ServerUnaryReactor* reactor_;
  Req* req_;
  Resp* resp_;
  Caller caller_;
  bool answered_ = false;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_UNARY_CALL_H_
