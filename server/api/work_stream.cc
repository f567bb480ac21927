#include "server/api/work_stream.h"

#include "server/api/unary_call.h"
#include "server/common/limit_log.h"

namespace delayd {

v1::WorkAnswer FailedAnswer(std::uint64_t ref, const Status& status) {
  v1::WorkAnswer answer;
  answer.set_ref(ref);
  const grpc::Status g = ToGrpc(status);
  answer.set_code(g.error_code());
  answer.set_message(g.error_message());
  return answer;
}

template <typename Base>
StreamSink* BasicWorkReactor<Base>::Sink() {
  MutexLock lock(&mu_);
  return sub_ == nullptr ? nullptr : &sub_->sink();
}

// (Under mu_, as StartRead is: a read is never started after Finish. gRPC
// runs no reaction of a stream inline from Finish or StartRead.)
template <typename Base>
void BasicWorkReactor<Base>::FinishStream(const grpc::Status& status) {
  MutexLock lock(&mu_);
  finishing_ = true;
  this->Finish(status);
}

template <typename Base>
void BasicWorkReactor<Base>::OnReadDone(bool ok) {
  StreamSink* sink = Sink();
  if (!ok) {
    // The client closed its side (or went away): the stream is over.
    if (sink != nullptr) {
      sink->End(Status::Ok());
    } else {
      Refuse(Status::InvalidArgument(
          "a Work stream starts with a worker's subscribe"));
    }
    return;
  }
  if (sink == nullptr) {
    Subscribe();
  } else {
    Request();
  }
}

template <typename Base>
void BasicWorkReactor<Base>::Subscribe() {
  v1::WorkRequest req;
  Status s =
      ReadRequest(in_, read_limit_, "Work", "the limit of an Ack's", &req);
  if (s.ok() && !req.has_subscribe()) {
    s = Status::InvalidArgument(
        "a Work stream starts with a worker's subscribe");
  } else if (s.ok() &&
             req.subscribe().mode() == v1::SubscribeRequest::WATCHER) {
    s = Status::InvalidArgument(
        "subscribe.mode: a Work stream is a worker's (watch with Subscribe)");
  }
  StreamStart start;
  if (s.ok()) s = start_(std::move(*req.mutable_subscribe()), &start);
  if (!s.ok()) return Refuse(s);
  StreamSubscription* sub;
  {
    MutexLock lock(&mu_);
    sub_ = std::make_unique<StreamSubscription>(
        scheduler_, this, ctx_, std::move(start.ns), start.options, metrics_);
    sub = sub_.get();
  }
  sub->sink().OnAnswersWritten([this](std::size_t n) { Written(n); });
  sub->Begin(start.options, start.attach);
  MutexLock lock(&mu_);
  ReadOn();
}

template <typename Base>
void BasicWorkReactor<Base>::Request() {
  v1::WorkRequest req;
  Status s =
      ReadRequest(in_, read_limit_, "Work", "the limit of an Ack's", &req);
  if (s.ok() && req.has_subscribe()) {
    s = Status::InvalidArgument("subscribe: the stream has subscribed");
  } else if (s.ok() && req.request_case() == v1::WorkRequest::REQUEST_NOT_SET) {
    s = Status::InvalidArgument("request: none set");
  }
  std::string ns;
  {
    MutexLock lock(&mu_);
    ++awaiting_;
    ns = sub_->ns();
  }
  if (!s.ok()) {
    Answered(FailedAnswer(req.ref(), s));
  } else {
    handle_(ns, std::move(req),
            [this](v1::WorkAnswer answer) { Answered(std::move(answer)); });
  }
  MutexLock lock(&mu_);
  ReadOn();
}

template <typename Base>
void BasicWorkReactor<Base>::ReadOn() {
  if (finishing_ || done_) return;
  if (awaiting_ + unwritten_ >= kMaxAwaiting) {
    paused_ = true;
    return;
  }
  paused_ = false;
  this->StartRead(&in_);
}

template <typename Base>
void BasicWorkReactor<Base>::Answered(v1::WorkAnswer answer) {
  StreamSink* sink = Sink();
  const bool queued = sink != nullptr && sink->Answer(std::move(answer));
  bool last;
  {
    MutexLock lock(&mu_);
    --awaiting_;
    // (Counted once queued, so that it is never counted after its write.
    // A stream that ends writes no more: its reads stop anyway.)
    if (queued) ++unwritten_;
    last = done_ && awaiting_ == 0;
  }
  if (last) delete this;  // (OnDone came first.)
}

template <typename Base>
void BasicWorkReactor<Base>::Written(std::size_t n) {
  MutexLock lock(&mu_);
  unwritten_ -= static_cast<int>(n);
  if (paused_) ReadOn();
}

template <typename Base>
void BasicWorkReactor<Base>::Refuse(const Status& status) {
  if (status.code() == Code::kResourceExhausted) {
    LogLimitHit("resource", status.message());
  }
  const grpc::Status answer = ToGrpc(status);
  {
    MutexLock lock(&mu_);
    refused_ = answer.error_code();
  }
  FinishStream(answer);
}

template <typename Base>
void BasicWorkReactor<Base>::OnWriteDone(bool ok) {
  if (StreamSink* sink = Sink()) sink->OnWriteDone(ok);
}

template <typename Base>
void BasicWorkReactor<Base>::OnCancel() {
  if (StreamSink* sink = Sink()) {
    sink->End(Status::Unavailable("subscriber went away"));
  }
}

template <typename Base>
void BasicWorkReactor<Base>::OnDone() {
  std::unique_ptr<StreamSubscription> sub;
  grpc::StatusCode refused;
  {
    MutexLock lock(&mu_);
    sub = std::move(sub_);
    refused = refused_;
  }
  if (sub != nullptr) {
    sub->Done();
  } else {
    metrics_.Observe(refused, std::nullopt);
  }
  bool last;
  {
    MutexLock lock(&mu_);
    done_ = true;
    last = awaiting_ == 0;
  }
  if (last) delete this;  // Else the last answer deletes it.
}

template class BasicWorkReactor<
    grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>>;
template class BasicWorkReactor<QueueReactor>;

}  // namespace delayd
