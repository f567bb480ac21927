#include "server/api/loop_health.h"

#include "grpc/health/v1/health.pb.h"
#include "server/api/loop_server.h"

namespace delayd {

bool ParseHealthRequest(const grpc::ByteBuffer& in, std::string* service) {
  grpc::health::v1::HealthCheckRequest req;
  grpc::ByteBuffer copy(in);
  if (!grpc::SerializationTraits<
           grpc::health::v1::HealthCheckRequest>::Deserialize(&copy, &req)
           .ok()) {
    return false;
  }
  *service = req.service();
  return true;
}

grpc::ByteBuffer HealthResponse(int status) {
  grpc::health::v1::HealthCheckResponse resp;
  resp.set_status(
      static_cast<grpc::health::v1::HealthCheckResponse::ServingStatus>(
          status));
  grpc::ByteBuffer out;
  bool own;
  (void)grpc::SerializationTraits<
      grpc::health::v1::HealthCheckResponse>::Serialize(resp, &out, &own);
  return out;
}

HealthCheckOnQueue::HealthCheckOnQueue(QueueCall* call, LoopServer& loop)
    : QueueReactor(call), loop_(loop) {
  StartRead(&in_);
}

void HealthCheckOnQueue::OnReadDone(bool ok) {
  std::string service;
  if (!ok) {
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "no request came"));
  } else if (!ParseHealthRequest(in_, &service)) {
    Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "not a HealthCheckRequest"));
  } else if (const int status = loop_.ServingStatus(service); status == 3) {
    Finish(grpc::Status(grpc::StatusCode::NOT_FOUND, "service name unknown"));
  } else {
    out_ = HealthResponse(status);
    StartWriteAndFinish(&out_, grpc::Status::OK);
  }
}

HealthWatchOnQueue::HealthWatchOnQueue(QueueCall* call, LoopServer& loop)
    : QueueReactor(call), loop_(loop) {
  StartRead(&in_);
}

void HealthWatchOnQueue::OnReadDone(bool ok) {
  if (!ok) {
    FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "no request came"));
    return;
  }
  if (!ParseHealthRequest(in_, &service_)) {
    FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "not a HealthCheckRequest"));
    return;
  }
  loop_.AddWatch(this);  // (Tells the status at once.)
}

void HealthWatchOnQueue::Changed(int status) {
  MutexLock lock(&mu_);
  want_ = status;
  WriteLatest();
}

void HealthWatchOnQueue::WriteLatest() {
  if (over_ || writing_ || want_ == written_) return;
  writing_ = true;
  written_ = want_;
  out_ = HealthResponse(want_);
  StartWrite(&out_);
}

void HealthWatchOnQueue::OnWriteDone(bool ok) {
  MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) {
    over_ = true;  // (The call is over: its done tag finishes it.)
    return;
  }
  WriteLatest();
}

void HealthWatchOnQueue::OnCancel() {
  loop_.RemoveWatch(this);  // (Whether or not added yet: see OnDone.)
  FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
}

void HealthWatchOnQueue::FinishOnce(const grpc::Status& status) {
  {
    MutexLock lock(&mu_);
    over_ = true;
    if (std::exchange(finished_, true)) return;
  }
  Finish(status);
}

void HealthWatchOnQueue::OnDone() {
  // (After every other reaction: OnReadDone may have added it after
  // OnCancel, on another thread.)
  loop_.RemoveWatch(this);
  delete this;
}

}  // namespace delayd
