#include "server/api/queue_call.h"

namespace delayd {

void QueueCall::Request(grpc::AsyncGenericService& service,
                        grpc::ServerCompletionQueue* cq, QueueOwner* owner) {
  auto* call = new QueueCall(owner, cq);
  call->ctx_.AsyncNotifyWhenDone(&call->done_);
  QueueEdge::HandOver();
  service.RequestCall(&call->ctx_, &call->stream_, cq, cq, &call->requested_);
}

void QueueCall::Requested(bool ok) {
  if (!ok) {
    // The queue shuts down: the call never started (no done tag comes).
    owner_->Taken(nullptr);
    delete this;
    return;
  }
  owner_->Taken(this);
}

void QueueCall::ReadDone(bool ok) {
  reactor_->OnReadDone(ok);
  Release();
}

void QueueCall::WriteDone(bool ok) {
  reactor_->OnWriteDone(ok);
  Release();
}

void QueueCall::FinishDone(bool) { Release(); }

void QueueCall::CallDone(bool) {
  if (ctx_.IsCancelled()) reactor_->OnCancel();
  Release();
}

void QueueCall::Release() {
  if (holds_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  End();
}

void QueueCall::ReleaseStart() {
  if (holds_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // (The queue is open: calls end before the loop stops.)
  over_alarm_.emplace();
  QueueEdge::HandOver();
  over_alarm_->Set(cq_, gpr_inf_past(GPR_CLOCK_MONOTONIC), &over_);
}

void QueueCall::Over(bool) { End(); }

void QueueCall::End() {
  reactor_->OnDone();
  QueueOwner* owner = owner_;
  delete this;
  owner->Ended();
}

void QueueReactor::StartRead(grpc::ByteBuffer* msg) {
  QueueCall* call = call_;
  call->Hold();  // (For the read's completion.)
  call->Hold();  // (Until this returns: the call may complete meanwhile.)
  {
    MutexLock lock(&call->mu_);
    QueueEdge::HandOver();
    call->stream_.Read(msg, &call->read_);
  }
  call->ReleaseStart();
}

void QueueReactor::StartWrite(const grpc::ByteBuffer* msg) {
  QueueCall* call = call_;
  call->Hold();  // (For the write's completion.)
  call->Hold();  // (Until this returns: the call may complete meanwhile.)
  {
    MutexLock lock(&call->mu_);
    QueueEdge::HandOver();
    call->stream_.Write(*msg, &call->write_);
  }
  call->ReleaseStart();
}

void QueueReactor::StartWriteAndFinish(const grpc::ByteBuffer* msg,
                                       const grpc::Status& status) {
  QueueCall* call = call_;
  call->Hold();  // (Until this returns.)
  {
    MutexLock lock(&call->mu_);
    QueueEdge::HandOver();
    call->stream_.WriteAndFinish(*msg, grpc::WriteOptions(), status,
                                 &call->finish_);
  }
  call->ReleaseStart();
}

void QueueReactor::Finish(const grpc::Status& status) {
  QueueCall* call = call_;
  call->Hold();  // (Until this returns.)
  {
    MutexLock lock(&call->mu_);
    QueueEdge::HandOver();
    call->stream_.Finish(status, &call->finish_);
  }
  call->ReleaseStart();
}

}  // namespace delayd
