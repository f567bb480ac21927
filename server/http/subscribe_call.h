// A subscription through the door's channel, read one message at a time
// without a thread waiting on it: each message goes to `on_message`, and
// the next is read only once Next() is called; `on_end` gets the call's
// status once, after the last message. The callbacks run on gRPC's threads,
// one at a time.
//
// Two kinds: a Subscribe call (SubscribeCall: a watch), and a Work stream
// that sends only its subscribe (WorkCall: a pull). Cancel() ends either at
// once: messages already under way still come, then on_end, but what the
// daemon wrote and the channel had not yet handed over is dropped. A
// WorkCall also ends cleanly with Close(), a half-close: the daemon stops
// handing it events, writes nothing more, takes back what it never wrote
// and finishes with OK once its last write is done; every message it wrote
// comes before on_end. A pull must end that way: events dropped by a
// cancel would stay leased to it until their ack timeout.
//
// Lifetime: held by shared_ptr; the call keeps itself alive until on_end
// has run.
//
// Thread safety: Next, Cancel and Close from any thread (Next only after a
// message, once per message). mu_ guards whether a read is under way,
// whether the hold that keeps the call open (until no read is to follow)
// was let go, and the subscribe's write and the half-close; gRPC's calls
// are made outside it.
#ifndef DELAYD_SERVER_HTTP_SUBSCRIBE_CALL_H_
#define DELAYD_SERVER_HTTP_SUBSCRIBE_CALL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/common/mutex.h"

namespace delayd::http {

// A Subscribe call writes nothing: its OnWriteDone is never called.
class ReadOnlyReactor : public grpc::ClientReadReactor<v1::SubscribeResponse> {
 public:
  virtual void OnWriteDone(bool /*ok*/) {}
};
template <bool kWork>
using StreamCallBase = std::conditional_t<
    kWork, grpc::ClientBidiReactor<v1::WorkRequest, v1::SubscribeResponse>,
    ReadOnlyReactor>;

template <bool kWork>
class StreamCall : public StreamCallBase<kWork>,
                   public std::enable_shared_from_this<StreamCall<kWork>> {
 public:
  using OnMessage = std::function<void(v1::SubscribeResponse&)>;
  using OnEnd = std::function<void(const grpc::Status&)>;

  // A call of `req` with `authorization` (empty: none) and, if not zero, a
  // deadline; it starts with Begin (so that its holder may keep it before
  // its callbacks run).
  static std::shared_ptr<StreamCall> Make(
      const std::string& authorization, const v1::SubscribeRequest& req,
      std::chrono::system_clock::time_point deadline, OnMessage on_message,
      OnEnd on_end);
  void Begin(v1::Delayd::Stub* stub) EXCLUDES(mu_);

  void Next() EXCLUDES(mu_);
  void Cancel() EXCLUDES(mu_);
  // A WorkCall's half-close (once; later calls do nothing); a
  // SubscribeCall's Cancel.
  void Close() EXCLUDES(mu_);

 private:
  StreamCall(OnMessage on_message, OnEnd on_end)
      : on_message_(std::move(on_message)), on_end_(std::move(on_end)) {}
  void OnReadDone(bool ok) override EXCLUDES(mu_);
  void OnDone(const grpc::Status& s) override;
  // The subscribe written: a Close that waited for it half-closes now.
  void OnWriteDone(bool ok) override EXCLUDES(mu_);
  // Lets go of the hold if no read is under way; true if the caller must
  // call RemoveHold (outside mu_).
  bool LetGo() REQUIRES(mu_);
  // The reads are over: the write side's hold goes too unless the
  // subscribe's write still needs it (its completion lets it go). True if
  // the caller must call RemoveHold.
  bool LetGoOfWrites() REQUIRES(mu_);
  // Starts the half-close, then lets go of the write side's hold (its
  // caller moved writes_ to kDone).
  void HalfClose();

  grpc::ClientContext ctx_;
  v1::SubscribeRequest req_;
  v1::WorkRequest work_req_;   // A WorkCall's subscribe.
  v1::SubscribeResponse msg_;  // read into while a read is under way
  const OnMessage on_message_;
  const OnEnd on_end_;
  Mutex mu_;
  bool reading_ GUARDED_BY(mu_) = false;
  bool let_go_ GUARDED_BY(mu_) = false;
  bool ending_ GUARDED_BY(mu_) = false;
  // The write side of a WorkCall, which holds the call open (a hold of
  // its own) until the half-close is started or the reads are over: its
  // subscribe being written (and Close called meanwhile, or not), then
  // open, then done (the hold let go, or about to be by whoever moved it
  // here).
  enum class Writes { kSubscribing, kSubscribingThenClose, kOpen, kDone };
  Writes writes_ GUARDED_BY(mu_) = kWork ? Writes::kSubscribing : Writes::kDone;
  std::shared_ptr<StreamCall> self_;  // until OnDone
};

using SubscribeCall = StreamCall<false>;
using WorkCall = StreamCall<true>;

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_SUBSCRIBE_CALL_H_
