// The server side of Work streams: a worker's Subscribe whose Ack, Nack
// and ExtendLease requests come on the stream itself (see the proto).
#ifndef DELAYD_SERVER_API_WORK_STREAM_H_
#define DELAYD_SERVER_API_WORK_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/api/queue_call.h"
#include "server/api/rpc_metrics.h"
#include "server/api/stream.h"
#include "server/common/mutex.h"
#include "server/common/status.h"
#include "server/core/scheduler.h"

namespace delayd {

// The answer to request `ref` of a Work stream that failed with `status`.
v1::WorkAnswer FailedAnswer(std::uint64_t ref, const Status& status);

// A request made on a Work stream, as DelaydService::ByEventOwner takes a
// call: its request and response, answered once through `done`. Handles
// are copied freely into callbacks.
template <typename Req, typename Resp>
class StreamCall {
 public:
  using Done = std::function<void(const Status&, const Resp&)>;
  // Forwarding a part adds no trailer to the stream's context.
  static constexpr bool kNamesOwner = false;

  StreamCall(grpc::ServerContextBase* ctx, Req req, Done done)
      : state_(std::make_shared<State>(ctx, std::move(req), std::move(done))) {}
  const Req& req() const { return state_->req; }
  Resp* resp() const { return &state_->resp; }
  grpc::ServerContextBase* ctx() const { return state_->ctx; }
  void Reply(const Status& status) const { state_->done(status, state_->resp); }
  void reactor() const {}  // (Nothing to give gRPC.)

 private:
  struct State {
    State(grpc::ServerContextBase* c, Req r, Done d)
        : ctx(c), req(std::move(r)), done(std::move(d)) {}
    grpc::ServerContextBase* ctx;
    Req req;
    Resp resp;
    Done done;
  };
  std::shared_ptr<State> state_;
};

// Reads the stream's first message (a worker's subscribe) and subscribes;
// then reads requests, each handed to `handle` and answered on the stream
// through the sink. At most kMaxAwaiting requests await their answers or
// the write of their answers: past that the stream reads nothing more
// (HTTP/2 flow control then holds the client back), so a client cannot
// queue work, or answers it does not read, without bound. The reactor
// outlives OnDone until every request has its answer (gRPC's server
// reactors have no holds), so an answer never finds it gone.
//
// Locking: mu_ guards the reads' state and the subscription's pointer. It
// is held while starting a read or finishing (so that no read starts after
// Finish or OnDone; gRPC runs no reaction inline from either), never while
// calling the sink.
//
// `Base` is the callback API's reactor (WorkReactor) or a call on the
// loop's queue (QueueWorkReactor, queue_call.h: the same contract).
template <typename Base>
class BasicWorkReactor : public Base, public StreamWriter {
 public:
  static constexpr int kMaxAwaiting = 16;
  // Subscribes the stream from its first message's request (see
  // DelaydService::StartStream).
  using Start = std::function<Status(v1::SubscribeRequest, StreamStart*)>;
  // Applies a later request of namespace `ns`, giving `done` its answer.
  using Handle = std::function<void(const std::string& ns, v1::WorkRequest,
                                    std::function<void(v1::WorkAnswer)>)>;

  // Each message is read within `read_limit` bytes. `base` constructs
  // Base.
  template <typename... BaseArgs>
  BasicWorkReactor(Scheduler& scheduler, grpc::ServerContextBase* ctx,
                   MethodMetrics& metrics, std::size_t read_limit, Start start,
                   Handle handle, BaseArgs&&... base)
      : Base(std::forward<BaseArgs>(base)...),
        scheduler_(scheduler),
        ctx_(ctx),
        metrics_(metrics),
        read_limit_(read_limit),
        start_(std::move(start)),
        handle_(std::move(handle)) {
    this->StartRead(&in_);
  }

  void WriteMessage(const grpc::ByteBuffer* msg) override {
    this->StartWrite(msg);
  }
  void FinishStream(const grpc::Status& status) override EXCLUDES(mu_);
  void OnReadDone(bool ok) override EXCLUDES(mu_);
  void OnWriteDone(bool ok) override EXCLUDES(mu_);
  void OnCancel() override EXCLUDES(mu_);
  void OnDone() override EXCLUDES(mu_);

 private:
  // The stream's sink (null before it subscribed).
  StreamSink* Sink() EXCLUDES(mu_);
  // The first message: subscribes, or ends the stream.
  void Subscribe() EXCLUDES(mu_);
  // A later message: hands it to handle_, or answers it at once.
  void Request() EXCLUDES(mu_);
  // Ends a stream that never subscribed.
  void Refuse(const Status& status) EXCLUDES(mu_);
  void Answered(v1::WorkAnswer answer) EXCLUDES(mu_);
  // The sink wrote `n` answers (in a reaction of this stream).
  void Written(std::size_t n) EXCLUDES(mu_);
  // Starts the next read unless too many requests are unanswered or
  // unwritten (then the answers resume it), or the stream is over.
  void ReadOn() REQUIRES(mu_);

  Scheduler& scheduler_;
  grpc::ServerContextBase* const ctx_;
  MethodMetrics& metrics_;
  const std::size_t read_limit_;
  const Start start_;
  const Handle handle_;
  grpc::ByteBuffer in_;  // The message read (one read at a time).
  Mutex mu_;
  std::unique_ptr<StreamSubscription> sub_ GUARDED_BY(mu_);
  int awaiting_ GUARDED_BY(mu_) = 0;        // Requests not yet answered.
  int unwritten_ GUARDED_BY(mu_) = 0;       // Answers queued, not yet written.
  bool paused_ GUARDED_BY(mu_) = false;     // A read is due once answered.
  bool finishing_ GUARDED_BY(mu_) = false;  // Finish was called.
  bool done_ GUARDED_BY(mu_) = false;       // OnDone ran.
  grpc::StatusCode refused_ GUARDED_BY(mu_) = grpc::StatusCode::OK;
};

using WorkReactor = BasicWorkReactor<
    grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>>;
using QueueWorkReactor = BasicWorkReactor<QueueReactor>;
extern template class BasicWorkReactor<
    grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>>;
extern template class BasicWorkReactor<QueueReactor>;

}  // namespace delayd

#endif  // DELAYD_SERVER_API_WORK_STREAM_H_
