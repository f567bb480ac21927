#include "server/api/relay.h"

#include <atomic>

#include "server/common/limit_log.h"

namespace delayd {

// One node's Subscribe stream, read one message at a time. The call's hold
// is let go once no read is to follow (a failed read, or Stop while held
// back); it then ends (OnDone), telling the relay, and drops itself.
//
// Locking: mu_ guards the read state; gRPC calls are made without it.
class Relay::PeerStream
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
      public std::enable_shared_from_this<PeerStream> {
 public:
  // `awaited`: the relay waits for its first message (or end) to tell the
  // worker it is registered.
  PeerStream(std::shared_ptr<Relay> relay, std::string peer, bool awaited)
      : relay_(std::move(relay)), peer_(std::move(peer)), awaited_(awaited) {}

  const std::string& peer() const { return peer_; }

  void Begin(Forwarder& forwarder, const v1::SubscribeRequest& req) {
    forwarder.PrepareContext(&ctx_);
    stub_ = forwarder.StubTo(peer_);
    bool own;
    grpc::SerializationTraits<v1::SubscribeRequest>::Serialize(req, &request_,
                                                               &own);
    self_ = shared_from_this();
    stub_->PrepareBidiStreamingCall(&ctx_, "/delayd.v1.Delayd/Subscribe",
                                    grpc::StubOptions(), this);
    {
      MutexLock lock(&mu_);
      held_ = true;
    }
    AddHold();
    StartWriteLast(&request_, grpc::WriteOptions());
    StartRead(&in_);
    StartCall();
  }

  // Reads on if held back.
  void Resume() EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      if (!paused_ || !held_ || stopping_) return;
      paused_ = false;
    }
    StartRead(&in_);
  }

  // Ends the call.
  void Stop() EXCLUDES(mu_) {
    bool let_go = false;
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      if (paused_ && held_) let_go = true, held_ = false;
    }
    ctx_.TryCancel();
    if (let_go) RemoveHold();
  }

  void OnWriteDone(bool) override {}

  void OnReadDone(bool ok) override {
    Registered();
    v1::SubscribeResponse msg;
    if (ok && !grpc::SerializationTraits<v1::SubscribeResponse>::Deserialize(
                   &in_, &msg)
                   .ok()) {
      ctx_.TryCancel();
      ok = false;
    }
    if (!ok) {
      LetGo();
      return;
    }
    {
      // Held back unless the relay reads on (a ResumeAll that comes first
      // starts the next read itself).
      MutexLock lock(&mu_);
      paused_ = true;
    }
    const bool on = relay_->Take(this, std::move(msg));
    bool read = false, let_go = false;
    {
      MutexLock lock(&mu_);
      if (stopping_ && paused_ && held_) {
        let_go = true, held_ = false;
      } else if (on && paused_) {
        paused_ = false, read = true;
      }
    }
    if (read) StartRead(&in_);
    if (let_go) RemoveHold();
  }

  void OnDone(const grpc::Status& status) override {
    Registered();
    relay_->Ended(this, status);
    relay_.reset();
    self_.reset();  // (May delete this.)
  }

 private:
  // Tells the relay, once, if it waits for this stream's first message.
  void Registered() EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      if (!awaited_) return;
      awaited_ = false;
    }
    relay_->PeerRegistered(false);
  }

  void LetGo() EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      if (!held_) return;
      held_ = false;
    }
    RemoveHold();
  }

  std::shared_ptr<Relay> relay_;  // Until OnDone.
  const std::string peer_;
  std::shared_ptr<PeerStream> self_;  // Until OnDone.
  grpc::ClientContext ctx_;
  std::shared_ptr<grpc::GenericStub> stub_;
  grpc::ByteBuffer request_, in_;
  Mutex mu_;
  bool held_ GUARDED_BY(mu_) = false;
  bool paused_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool awaited_ GUARDED_BY(mu_);
};

Relay::Relay(Forwarder& forwarder, asio::any_io_executor timers,
             std::shared_ptr<StreamSink> sink,
             v1::SubscribeRequest peer_request)
    : forwarder_(forwarder),
      sink_(std::move(sink)),
      peer_request_(std::move(peer_request)),
      retry_(timers),
      register_wait_(std::move(timers)) {}

void Relay::Start() {
  std::weak_ptr<Relay> weak = weak_from_this();
  sink_->SetRelayDrained([weak] {
    if (auto relay = weak.lock()) relay->ResumeAll();
  });
  watch_ = forwarder_.WatchPeers([weak] {
    if (auto relay = weak.lock()) relay->Reconcile();
  });
  sink_->AwaitRegistration();
  {
    MutexLock lock(&mu_);
    awaited_ = 1;  // Held until the streams are opened.
    register_wait_.expires_after(kRegisterWait);
    register_wait_.async_wait([weak](const asio::error_code& ec) {
      auto relay = weak.lock();
      if (!ec && relay != nullptr) relay->PeerRegistered(true);
    });
  }
  Reconcile(true);
  PeerRegistered(false);
}

void Relay::Reconcile(bool first) {
  const std::vector<std::string> peers = forwarder_.AllPeers();
  std::vector<std::shared_ptr<PeerStream>> opened;
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    for (const std::string& peer : peers) {
      if (streams_.contains(peer)) continue;
      auto stream =
          std::make_shared<PeerStream>(shared_from_this(), peer, first);
      streams_.emplace(peer, stream);
      opened.push_back(std::move(stream));
      if (first) ++awaited_;
    }
  }
  for (const auto& stream : opened) stream->Begin(forwarder_, peer_request_);
}

void Relay::PeerRegistered(bool all) {
  {
    MutexLock lock(&mu_);
    if (registered_) return;
    awaited_ = all ? 0 : awaited_ - 1;
    if (awaited_ > 0) return;
    registered_ = true;
    register_wait_.cancel();
  }
  sink_->SendRegistered();
}

bool Relay::Take(PeerStream* from, v1::SubscribeResponse msg) {
  bool stopped;
  {
    MutexLock lock(&mu_);
    stopped = stopped_;
  }
  if (stopped) {
    // After Stop took the unwritten ones: these go straight back.
    std::vector<std::uint64_t> ids;
    for (const v1::Event& e : msg.events()) ids.push_back(e.id());
    if (!ids.empty()) Release(from->peer(), std::move(ids), [] {});
    return false;
  }
  Subscriber::Backlog backlog;
  std::vector<std::uint64_t> beyond =
      sink_->DeliverRelayed(std::move(msg), from->peer(), &backlog);
  if (!beyond.empty()) Release(from->peer(), std::move(beyond), [] {});
  {
    MutexLock lock(&mu_);
    stopped = stopped_;
  }
  if (stopped) {
    // Stop came in between: what it did not take back goes back now.
    for (auto& [peer, ids] : sink_->TakeUnwrittenRelayed()) {
      Release(peer, std::move(ids), [] {});
    }
    return false;
  }
  return backlog.bytes < kMaxBacklogBytes;
}

void Relay::ResumeAll() {
  std::vector<std::shared_ptr<PeerStream>> streams;
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    for (const auto& [peer, stream] : streams_) streams.push_back(stream);
  }
  for (const auto& stream : streams) stream->Resume();
}

void Relay::Ended(PeerStream* from, const grpc::Status& status) {
  const grpc::StatusCode code = status.error_code();
  {
    MutexLock lock(&mu_);
    auto it = streams_.find(from->peer());
    if (it != streams_.end() && it->second.get() == from) streams_.erase(it);
    if (stopped_) return;
    const bool refused = code == grpc::StatusCode::RESOURCE_EXHAUSTED ||
                         code == grpc::StatusCode::INVALID_ARGUMENT ||
                         code == grpc::StatusCode::UNAUTHENTICATED ||
                         code == grpc::StatusCode::PERMISSION_DENIED ||
                         code == grpc::StatusCode::FAILED_PRECONDITION;
    if (!refused) {
      // (Opened again if its node still owns partitions then.)
      if (!retry_armed_) {
        retry_armed_ = true;
        retry_.expires_after(kRetry);
        retry_.async_wait(
            [weak = weak_from_this()](const asio::error_code& ec) {
              auto relay = weak.lock();
              if (ec || relay == nullptr) return;
              {
                MutexLock lock(&relay->mu_);
                relay->retry_armed_ = false;
              }
              relay->Reconcile();
            });
      }
      return;
    }
  }
  const std::string why = "node " + from->peer() +
                          " refused this node's subscription on your behalf: " +
                          status.error_message();
  LogLimitHit("relay", why);
  sink_->End(code == grpc::StatusCode::RESOURCE_EXHAUSTED
                 ? Status::ResourceExhausted(why)
                 : Status::Internal(why));
}

void Relay::Stop() {
  std::vector<std::shared_ptr<PeerStream>> streams;
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    retry_.cancel();
    register_wait_.cancel();
    for (const auto& [peer, stream] : streams_) streams.push_back(stream);
  }
  forwarder_.Unwatch(watch_);
  auto unwritten = sink_->TakeUnwrittenRelayed();
  // The peer streams end once every owner has its events back (an owner
  // that saw its stream end first would count them as attempts).
  auto pending = std::make_shared<std::atomic<int>>(
      static_cast<int>(unwritten.size()) + 1);
  auto end_streams = [pending, streams] {
    if (pending->fetch_sub(1) != 1) return;
    for (const auto& stream : streams) stream->Stop();
  };
  for (auto& [peer, ids] : unwritten) {
    Release(peer, std::move(ids), end_streams);
  }
  end_streams();
}

void Relay::Release(const std::string& peer, std::vector<std::uint64_t> ids,
                    std::function<void()> done) {
  struct Call {
    grpc::ClientContext ctx;
    grpc::ByteBuffer request, response;
    std::shared_ptr<grpc::GenericStub> stub;
  };
  auto call = std::make_shared<Call>();
  forwarder_.PrepareContext(&call->ctx);
  call->ctx.AddMetadata(kRelease, "1");
  call->ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
  v1::NackRequest req;
  req.set_namespace_(peer_request_.namespace_());
  for (std::uint64_t id : ids) req.add_event_ids(id);
  bool own;
  grpc::SerializationTraits<v1::NackRequest>::Serialize(req, &call->request,
                                                        &own);
  call->stub = forwarder_.StubTo(peer);
  call->stub->UnaryCall(&call->ctx, "/delayd.v1.Delayd/Nack",
                        grpc::StubOptions(), &call->request, &call->response,
                        [call, done = std::move(done)](grpc::Status) {
                          // (Not given back: they return to the queue when
                          // the stream ends, or at their ack deadline.)
                          done();
                        });
}

}  // namespace delayd
