// A Subscribe call through the door's channel, read one message at a time
// without a thread waiting on it: each message goes to `on_message`, and
// the next is read only once Next() is called; `on_end` gets the call's
// status once, after the last message. The callbacks run on gRPC's threads,
// one at a time. Cancel() ends the call early: messages already under way
// still come, then on_end.
//
// Lifetime: held by shared_ptr; the call keeps itself alive until on_end
// has run.
//
// Thread safety: Next and Cancel from any thread (Next only after a
// message, once per message). mu_ guards whether a read is under way and
// whether the hold that keeps the call open (until no read is to follow)
// was let go; gRPC's calls are made outside it.
#ifndef DELAYD_SERVER_HTTP_SUBSCRIBE_CALL_H_
#define DELAYD_SERVER_HTTP_SUBSCRIBE_CALL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/common/mutex.h"

namespace delayd::http {

class SubscribeCall : public grpc::ClientReadReactor<v1::SubscribeResponse>,
                      public std::enable_shared_from_this<SubscribeCall> {
 public:
  using OnMessage = std::function<void(v1::SubscribeResponse&)>;
  using OnEnd = std::function<void(const grpc::Status&)>;

  // A call of `req` with `authorization` (empty: none) and, if not zero, a
  // deadline; it starts with Begin (so that its holder may keep it before
  // its callbacks run).
  static std::shared_ptr<SubscribeCall> Make(
      const std::string& authorization, const v1::SubscribeRequest& req,
      std::chrono::system_clock::time_point deadline, OnMessage on_message,
      OnEnd on_end);
  void Begin(v1::Delayd::Stub* stub) EXCLUDES(mu_);

  void Next() EXCLUDES(mu_);
  void Cancel() EXCLUDES(mu_);

 private:
  SubscribeCall(OnMessage on_message, OnEnd on_end)
      : on_message_(std::move(on_message)), on_end_(std::move(on_end)) {}
  void OnReadDone(bool ok) override EXCLUDES(mu_);
  void OnDone(const grpc::Status& s) override;
  // Lets go of the hold if no read is under way; true if the caller must
  // call RemoveHold (outside mu_).
  bool LetGo() REQUIRES(mu_);

  grpc::ClientContext ctx_;
  v1::SubscribeRequest req_;
  v1::SubscribeResponse msg_;  // read into while a read is under way
  const OnMessage on_message_;
  const OnEnd on_end_;
  Mutex mu_;
  bool reading_ GUARDED_BY(mu_) = false;
  bool let_go_ GUARDED_BY(mu_) = false;
  bool ending_ GUARDED_BY(mu_) = false;
  std::shared_ptr<SubscribeCall> self_;  // until OnDone
};

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_SUBSCRIBE_CALL_H_
