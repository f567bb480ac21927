#include "server/http/subscribe_call.h"

namespace delayd::http {

template <bool kWork>
std::shared_ptr<StreamCall<kWork>> StreamCall<kWork>::Make(
    const std::string& authorization, const v1::SubscribeRequest& req,
    std::chrono::system_clock::time_point deadline, OnMessage on_message,
    OnEnd on_end) {
  std::shared_ptr<StreamCall> call(
      new StreamCall(std::move(on_message), std::move(on_end)));
  call->req_ = req;
  if (!authorization.empty()) {
    call->ctx_.AddMetadata("authorization", authorization);
  }
  if (deadline != std::chrono::system_clock::time_point()) {
    call->ctx_.set_deadline(deadline);
  }
  return call;
}

template <bool kWork>
void StreamCall<kWork>::Begin(v1::Delayd::Stub* stub) {
  self_ = this->shared_from_this();
  if constexpr (kWork) {
    *work_req_.mutable_subscribe() = req_;
    stub->async()->Work(&ctx_, this);
  } else {
    stub->async()->Subscribe(&ctx_, &req_, this);
  }
  // The hold keeps the call from completing between a message and the read
  // Next starts; a WorkCall's second, until its half-close is started.
  this->AddMultipleHolds(kWork ? 2 : 1);
  {
    MutexLock lock(&mu_);
    reading_ = true;
  }
  if constexpr (kWork) this->StartWrite(&work_req_);
  this->StartRead(&msg_);
  this->StartCall();
}

template <bool kWork>
void StreamCall<kWork>::Next() {
  {
    MutexLock lock(&mu_);
    if (let_go_ || reading_) return;
    reading_ = true;
  }
  this->StartRead(&msg_);
}

template <bool kWork>
void StreamCall<kWork>::Cancel() {
  ctx_.TryCancel();
  bool release, release_writes;
  {
    MutexLock lock(&mu_);
    ending_ = true;
    release = LetGo();
    release_writes = LetGoOfWrites();
  }
  if (release_writes) this->RemoveHold();
  if (release) this->RemoveHold();
}

template <bool kWork>
void StreamCall<kWork>::Close() {
  if constexpr (!kWork) {
    Cancel();
  } else {
    {
      MutexLock lock(&mu_);
      if (ending_) return;
      if (writes_ == Writes::kSubscribing) {
        writes_ = Writes::kSubscribingThenClose;  // (OnWriteDone closes.)
        return;
      }
      if (writes_ != Writes::kOpen) return;
      writes_ = Writes::kDone;
    }
    HalfClose();
  }
}

template <bool kWork>
void StreamCall<kWork>::HalfClose() {
  if constexpr (kWork) this->StartWritesDone();
  this->RemoveHold();
}

template <bool kWork>
void StreamCall<kWork>::OnWriteDone(bool ok) {
  bool close, release;
  {
    MutexLock lock(&mu_);
    close = ok && writes_ == Writes::kSubscribingThenClose;
    // (A failed write: the call is over, its reads end too.)
    release = !close && (!ok || ending_);
    writes_ = close || release ? Writes::kDone : Writes::kOpen;
  }
  if (close) {
    HalfClose();
  } else if (release) {
    this->RemoveHold();
  }
}

template <bool kWork>
bool StreamCall<kWork>::LetGo() {
  if (reading_ || let_go_) return false;
  let_go_ = true;
  return true;
}

template <bool kWork>
bool StreamCall<kWork>::LetGoOfWrites() {
  if (writes_ != Writes::kOpen) return false;
  writes_ = Writes::kDone;
  return true;
}

template <bool kWork>
void StreamCall<kWork>::OnReadDone(bool ok) {
  bool release = false, release_writes = false;
  {
    MutexLock lock(&mu_);
    reading_ = false;
    if (!ok) {
      ending_ = true;
      release = LetGo();
      release_writes = LetGoOfWrites();
    }
  }
  if (release_writes) this->RemoveHold();
  if (release) {
    this->RemoveHold();
    return;
  }
  if (!ok) return;
  // Handed over by value: the next read may fill msg_ while the consumer
  // still works on this one.
  v1::SubscribeResponse got;
  got.Swap(&msg_);
  on_message_(got);
  // A Cancel while the consumer had the message: no read follows.
  bool ended;
  {
    MutexLock lock(&mu_);
    ended = ending_ && LetGo();
  }
  if (ended) this->RemoveHold();
}

template <bool kWork>
void StreamCall<kWork>::OnDone(const grpc::Status& s) {
  on_end_(s);
  self_.reset();  // (Last: may destroy this.)
}

template class StreamCall<false>;
template class StreamCall<true>;

}  // namespace delayd::http
