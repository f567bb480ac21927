#include "server/api/forward.h"

#include <set>
#include <utility>

namespace delayd {

Forwarder::Forwarder(Options options)
    : options_(std::move(options)),
      authorization_("Bearer " + options_.token) {}

Forwarder::~Forwarder() {
  Drain(std::chrono::steady_clock::now() + std::chrono::seconds(5));
}

bool Forwarder::Drain(std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(&mu_);
  draining_ = true;
  while (in_flight_ > 0) {
    if (!answered_.WaitUntil(&mu_, deadline)) break;
  }
  return in_flight_ == 0;
}

void Forwarder::Answered() {
  MutexLock lock(&mu_);
  --in_flight_;
  if (in_flight_gauge_ != nullptr) in_flight_gauge_->Set(in_flight_);
  answered_.SignalAll();
}

void Forwarder::SetOwners(std::string self, std::map<int, std::string> owners) {
  std::vector<std::string> by_part;
  std::set<std::string> live;
  for (auto& [part, address] : owners) {
    if (part < 0) continue;
    if (by_part.size() <= static_cast<std::size_t>(part)) {
      by_part.resize(part + 1);
    }
    live.insert(address);
    by_part[part] = std::move(address);
  }
  std::vector<std::function<void()>> tell;
  {
    MutexLock lock(&mu_);
    const std::set<std::string> before = PeersLocked();
    self_ = std::move(self);
    owners_ = std::move(by_part);
    // (A call in flight keeps its stub, and so its channel, until answered.)
    std::erase_if(stubs_,
                  [&](const auto& s) { return !live.contains(s.first); });
    if (PeersLocked() != before) {
      for (const auto& [id, changed] : watchers_) tell.push_back(changed);
    }
  }
  for (const auto& changed : tell) changed();
}

std::set<std::string> Forwarder::PeersLocked() const {
  std::set<std::string> peers;
  for (const std::string& owner : owners_) {
    if (!owner.empty() && owner != self_) peers.insert(owner);
  }
  return peers;
}

std::vector<std::string> Forwarder::AllPeers() const {
  MutexLock lock(&mu_);
  const std::set<std::string> peers = PeersLocked();
  return {peers.begin(), peers.end()};
}

void Forwarder::PrepareContext(grpc::ClientContext* ctx) const {
  ctx->AddMetadata("authorization", authorization_);
  ctx->AddMetadata(kForwardedBy, options_.node);
}

std::uint64_t Forwarder::WatchPeers(std::function<void()> changed) {
  MutexLock lock(&mu_);
  watchers_.emplace(next_watcher_, std::move(changed));
  return next_watcher_++;
}

void Forwarder::Unwatch(std::uint64_t id) {
  MutexLock lock(&mu_);
  watchers_.erase(id);
}

std::string Forwarder::OwnerOf(std::uint32_t part,
                               const grpc::ServerContextBase& ctx) const {
  // One hop: a call forwarded here is answered here, whoever owns it now.
  if (ctx.client_metadata().count(kForwardedBy) != 0) return {};
  MutexLock lock(&mu_);
  if (part >= owners_.size() || owners_[part] == self_) return {};
  return owners_[part];
}

Forwarder::Run Forwarder::RunFrom(std::uint32_t part) const {
  MutexLock lock(&mu_);
  if (part >= owners_.size() || owners_[part].empty()) return {};
  const std::string& owner = owners_[part];
  std::uint32_t end = part + 1;
  while (end < owners_.size() && owners_[end] == owner) ++end;
  return {owner == self_ ? std::string() : owner, end};
}

std::vector<std::string> Forwarder::Peers(
    const grpc::ServerContextBase& ctx) const {
  if (ctx.client_metadata().count(kForwardedBy) != 0) return {};
  return AllPeers();
}

std::shared_ptr<grpc::GenericStub> Forwarder::StubTo(const std::string& owner) {
  MutexLock lock(&mu_);
  auto& stub = stubs_[owner];
  if (stub == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(options_.max_message_bytes);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    // (A channel of its own per owner: calls to one do not queue behind
    // another's connection.)
    stub = std::make_shared<grpc::GenericStub>(
        grpc::CreateCustomChannel(owner, options_.credentials, args));
  }
  return stub;
}

void Forwarder::Forward(grpc::ServerContextBase* ctx, const std::string& method,
                        const grpc::ByteBuffer* in, grpc::ByteBuffer* out,
                        const std::string& owner, MethodMetrics& metrics,
                        bool name_owner,
                        std::function<void(grpc::Status)> done) {
  struct Call {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::shared_ptr<grpc::GenericStub> stub;
    std::chrono::steady_clock::time_point started;
  };
  bool refused;
  {
    MutexLock lock(&mu_);
    refused = draining_;
    if (!refused) ++in_flight_;
    if (in_flight_gauge_ != nullptr) in_flight_gauge_->Set(in_flight_);
  }
  if (refused) {
    return done(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                             "this node is stopping: the call was not "
                             "forwarded to its partition's owner"));
  }
  auto call = std::make_shared<Call>();
  // The caller's deadline and cancellation carry over (a cancelled call
  // cancels its forwarded one); the wait is bounded even without them.
  call->ctx = grpc::ClientContext::FromServerContext(*ctx);
  call->ctx->set_deadline(std::chrono::system_clock::now() + options_.max_wait);
  PrepareContext(call->ctx.get());
  call->stub = StubTo(owner);
  call->started = std::chrono::steady_clock::now();
  if (name_owner) ctx->AddTrailingMetadata(kOwnerTrailer, owner);
  call->stub->UnaryCall(
      call->ctx.get(), "/delayd.v1.Delayd/" + method, grpc::StubOptions(), in,
      out, [this, call, &metrics, done = std::move(done)](grpc::Status s) {
        metrics.Observe(s.error_code(),
                        std::chrono::steady_clock::now() - call->started);
        done(std::move(s));
        Answered();
      });
}

}  // namespace delayd
