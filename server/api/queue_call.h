// A call taken on the loop's completion queue (loop_server.h), served with
// the contract of gRPC's callback reactors, so that one reactor class
// serves a call of either API (work_stream.h, stream.h):
// - StartRead, StartWrite, StartWriteAndFinish and Finish may be called
//   from any thread, at most one read and one write at a time, nothing
//   after Finish;
// - OnReadDone, OnWriteDone and OnCancel run on a thread that polls the
//   queue (the loop, or its relief while the loop is held), never inline
//   from a Start call; two reactions of one call may run at once;
// - OnDone runs once, on such a thread, when the call is over (its done
//   tag), Finish has completed, no read or write is under way and every
//   other reaction has returned. The reactor may delete itself there; the
//   call's context is gone once OnDone returns.
#ifndef DELAYD_SERVER_API_QUEUE_CALL_H_
#define DELAYD_SERVER_API_QUEUE_CALL_H_

#include <grpcpp/alarm.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <optional>

#include "server/common/mutex.h"

namespace delayd {

// A completion on the loop's queue: the loop calls Done with its `ok`.
class LoopTag {
 public:
  virtual void Done(bool ok) = 0;

 protected:
  ~LoopTag() = default;
};

// Makes the queue's hand-over visible to ThreadSanitizer. gRPC's
// completion queue orders what a thread did before it started an operation
// (or set an alarm) before the loop's handling of its completion, but
// Debian's gRPC is not instrumented, so TSan cannot see that edge. Each
// hand-over does a release RMW on one atomic before it gives the operation
// to gRPC; the loop does an acquire load after each completion. RMWs extend
// a release sequence, so the load synchronizes with every earlier
// hand-over. (One atomic per operation; a suppression would hide every real
// race on the loop instead.)
class QueueEdge {
 public:
  static void HandOver() { count_.fetch_add(1, std::memory_order_release); }
  static void Completed() { (void)count_.load(std::memory_order_acquire); }

 private:
  static inline std::atomic<unsigned> count_{0};
};

class QueueCall;
class QueueReactor;

// What requests calls, and hears of them, on a thread polling the queue.
class QueueOwner {
 public:
  // A call came: give it its reactor. Null: the request failed (the server
  // shuts down), and no call came.
  virtual void Taken(QueueCall* call) = 0;
  // A call that came is over: its reactor's OnDone has returned and the
  // call is gone.
  virtual void Ended() = 0;

 protected:
  ~QueueOwner() = default;
};

// One call of the generic service: its context and stream, and the reactor
// serving it once its method is known.
class QueueCall {
 public:
  // Requests the next call of `service` on `cq` for `owner`.
  static void Request(grpc::AsyncGenericService& service,
                      grpc::ServerCompletionQueue* cq, QueueOwner* owner);

  grpc::GenericServerContext& context() { return ctx_; }
  // The queue the call came on (its operations complete there).
  grpc::ServerCompletionQueue* queue() const { return cq_; }

 private:
  friend class QueueReactor;
  QueueCall(QueueOwner* owner, grpc::ServerCompletionQueue* cq)
      : owner_(owner), cq_(cq) {}

  // A completion of one kind of operation.
  struct Op : LoopTag {
    QueueCall* call;
    void (QueueCall::*on)(bool);
    Op(QueueCall* c, void (QueueCall::*f)(bool)) : call(c), on(f) {}
    void Done(bool ok) override { (call->*on)(ok); }
  };
  void Requested(bool ok);
  void ReadDone(bool ok);
  void WriteDone(bool ok);
  void FinishDone(bool ok);
  void CallDone(bool ok);
  void Over(bool ok);
  // The call is over: OnDone, then it goes.
  void End();
  // Holds the call over a Start (from any thread). Release, on the loop:
  // the last runs OnDone and frees the call. ReleaseStart, at the end of a
  // Start call: the last has the loop do that (a Start never runs a
  // reaction inline: its caller may hold a lock that OnDone takes).
  void Hold() { holds_.fetch_add(1, std::memory_order_relaxed); }
  void Release();
  void ReleaseStart();

  QueueOwner* const owner_;
  grpc::ServerCompletionQueue* const cq_;
  grpc::GenericServerContext ctx_;
  grpc::GenericServerAsyncReaderWriter stream_{&ctx_};
  QueueReactor* reactor_ = nullptr;
  // Serializes the Start calls on stream_ (a write and a finish from two
  // threads both send the initial metadata if it has not gone).
  Mutex mu_;
  // What the call waits for: its done tag, Finish's completion, and each
  // read and write under way (and Start calls under way).
  std::atomic<int> holds_{2};
  Op requested_{this, &QueueCall::Requested};
  Op read_{this, &QueueCall::ReadDone};
  Op write_{this, &QueueCall::WriteDone};
  Op finish_{this, &QueueCall::FinishDone};
  Op done_{this, &QueueCall::CallDone};
  Op over_{this, &QueueCall::Over};
  // Brings `over_` to the loop (ReleaseStart; made then, rarely).
  std::optional<grpc::Alarm> over_alarm_;
};

// The serving side of a QueueCall; see the top for the contract. A reactor
// constructed on a call serves it from then on: one whose reaction makes
// another on its call and deletes itself has handed the call over.
class QueueReactor {
 public:
  QueueReactor(const QueueReactor&) = delete;
  QueueReactor& operator=(const QueueReactor&) = delete;

  void StartRead(grpc::ByteBuffer* msg);
  void StartWrite(const grpc::ByteBuffer* msg);
  void StartWriteAndFinish(const grpc::ByteBuffer* msg,
                           const grpc::Status& status);
  void Finish(const grpc::Status& status);

  virtual void OnReadDone(bool /*ok*/) {}
  virtual void OnWriteDone(bool /*ok*/) {}
  virtual void OnCancel() {}
  virtual void OnDone() = 0;

 protected:
  explicit QueueReactor(QueueCall* call) : call_(call) {
    call->reactor_ = this;
  }
  virtual ~QueueReactor() = default;
  QueueCall* call() const { return call_; }
  grpc::GenericServerContext* context() { return &call_->ctx_; }

 private:
  QueueCall* const call_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_QUEUE_CALL_H_
