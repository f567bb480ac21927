#include "server/http/subscribe_call.h"

namespace delayd::http {

std::shared_ptr<SubscribeCall> SubscribeCall::Make(
    const std::string& authorization, const v1::SubscribeRequest& req,
    std::chrono::system_clock::time_point deadline, OnMessage on_message,
    OnEnd on_end) {
  std::shared_ptr<SubscribeCall> call(
      new SubscribeCall(std::move(on_message), std::move(on_end)));
  call->req_ = req;
  if (!authorization.empty()) {
    call->ctx_.AddMetadata("authorization", authorization);
  }
  if (deadline != std::chrono::system_clock::time_point()) {
    call->ctx_.set_deadline(deadline);
  }
  return call;
}

void SubscribeCall::Begin(v1::Delayd::Stub* stub) {
  self_ = std::static_pointer_cast<SubscribeCall>(shared_from_this());
  stub->async()->Subscribe(&ctx_, &req_, this);
  // The hold keeps the call from completing between a message and the read
  // Next starts.
  AddHold();
  {
    MutexLock lock(&mu_);
    reading_ = true;
  }
  StartRead(&msg_);
  StartCall();
}

void SubscribeCall::Next() {
  {
    MutexLock lock(&mu_);
    if (let_go_ || reading_) return;
    reading_ = true;
  }
  StartRead(&msg_);
}

void SubscribeCall::Cancel() {
  ctx_.TryCancel();
  bool release;
  {
    MutexLock lock(&mu_);
    ending_ = true;
    release = LetGo();
  }
  if (release) RemoveHold();
}

bool SubscribeCall::LetGo() {
  if (reading_ || let_go_) return false;
  let_go_ = true;
  return true;
}

void SubscribeCall::OnReadDone(bool ok) {
  bool release = false;
  {
    MutexLock lock(&mu_);
    reading_ = false;
    if (!ok) {
      ending_ = true;
      release = LetGo();
    }
  }
  if (release) {
    RemoveHold();
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
  if (ended) RemoveHold();
}

void SubscribeCall::OnDone(const grpc::Status& s) {
  on_end_(s);
  self_.reset();  // (Last: may destroy this.)
}

}  // namespace delayd::http
