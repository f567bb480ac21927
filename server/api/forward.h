// Calls on a key whose partition another node of the cluster owns are
// forwarded to that node, one hop, as their bytes: the entry node has
// identified the caller and checked its permission; the owner takes the call
// from the entry node's cluster token (auth.h: a peer may do anything) and
// does not forward it again (kForwardedBy). The answer goes back as the
// owner gave it, with the owner's address in a trailer (kOwnerTrailer) so
// that a client may call it directly. (The service splits a Batch between
// the owners of its keys, and the calls on events between the owners of
// theirs; it sends a Drain, a Stats or a listing to every node that owns
// partitions: Peers. A relayed Subscribe opens its own streams: relay.h.)
//
// Who owns what comes from the partition leases (SetOwners, each lease
// round): an answer of the former owner during a hand-over is UNAVAILABLE,
// which a client retries as it would any.
//
// A node that stops drains its forwarder first (Drain): the calls it
// forwarded get their owners' answers, relayed as usual; cut off, they would
// end CANCELLED after the owner may have applied them, which tells their
// callers nothing.
//
// Thread safety: every method may be called from any thread; mu_ guards the
// owners, the channels and the count of calls awaiting their owners.
#ifndef DELAYD_SERVER_API_FORWARD_H_
#define DELAYD_SERVER_API_FORWARD_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/gauge.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "server/api/rpc_metrics.h"
#include "server/common/mutex.h"

namespace delayd {

class Forwarder {
 public:
  // Metadata of a forwarded call: the entry node's name.
  static constexpr const char* kForwardedBy = "delayd-forwarded-by";
  // Trailer of a forwarded call's answer: the owner's address.
  static constexpr const char* kOwnerTrailer = "delayd-owner";

  struct Options {
    std::string node;   // this node's name
    std::string token;  // the cluster's token, presented to the owners
    // How to reach the other nodes (TLS when the daemon serves TLS).
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    // A forwarded call's longest wait, if its caller set no shorter one.
    std::chrono::milliseconds max_wait{30000};
    // The largest answer taken from an owner.
    int max_message_bytes = 64 << 20;
  };
  explicit Forwarder(Options options);
  ~Forwarder();  // Drain(5 s from now): no call's answer outlives this.

  // Who owns each partition now: the owners' addresses by partition
  // (partitions missing: no live owner). `self` is this node's address; its
  // partitions are not forwarded. Channels to nodes that own nothing are
  // closed.
  void SetOwners(std::string self, std::map<int, std::string> owners)
      EXCLUDES(mu_);
  // The address of the node owning `part` if it is another node, for a call
  // that was not forwarded to this one already; empty otherwise.
  std::string OwnerOf(std::uint32_t part,
                      const grpc::ServerContextBase& ctx) const EXCLUDES(mu_);

  // The partitions from `part` on that one node owns now: that node's
  // address (empty: this node; unset: no node owns `part`) and the first
  // partition after them that it does not own.
  struct Run {
    std::optional<std::string> owner;
    std::uint32_t end = 0;
  };
  Run RunFrom(std::uint32_t part) const EXCLUDES(mu_);

  // The addresses of the other nodes that own partitions now, for a call
  // that was not forwarded to this one already (empty otherwise): a call on
  // a whole namespace (Drain) goes to each.
  std::vector<std::string> Peers(const grpc::ServerContextBase& ctx) const
      EXCLUDES(mu_);

  // Calls method `method` ("SetTimer") of the node at `owner` with the
  // request bytes `in`, its answer's bytes into `out`; `done` gets the
  // owner's status (or the channel's, if it could not be reached). The
  // call's deadline and cancellation carry over; `in` and `out` must live
  // until `done`. Counted in `metrics`. Once draining, `done` gets
  // UNAVAILABLE at once: the call was not sent. With `name_owner`, `ctx`'s
  // trailers name the owner (a unary call's; not a stream's, which may
  // forward many requests).
  void Forward(grpc::ServerContextBase* ctx, const std::string& method,
               const grpc::ByteBuffer* in, grpc::ByteBuffer* out,
               const std::string& owner, MethodMetrics& metrics,
               bool name_owner, std::function<void(grpc::Status)> done)
      EXCLUDES(mu_);

  // For calls this node makes to another on a client's behalf (a relayed
  // Subscribe, relay.h): the other nodes that own partitions now; `ctx`
  // set up as a forwarded call's (the cluster token, one hop); the stub
  // to `owner`.
  std::vector<std::string> AllPeers() const EXCLUDES(mu_);
  void PrepareContext(grpc::ClientContext* ctx) const;
  std::shared_ptr<grpc::GenericStub> StubTo(const std::string& owner)
      EXCLUDES(mu_);
  // Calls `changed` (on the thread that set the owners, without mu_) each
  // time the set of peers changes, until Unwatch(the returned id); it may
  // still be running, or about to run, when Unwatch returns.
  std::uint64_t WatchPeers(std::function<void()> changed) EXCLUDES(mu_);
  void Unwatch(std::uint64_t id) EXCLUDES(mu_);

  // Counts the calls awaiting their owners' answers in `gauge` too (set
  // before any call is forwarded).
  void CountInFlight(prometheus::Gauge* gauge) { in_flight_gauge_ = gauge; }
  // Forwards no more calls, and waits until every call forwarded has its
  // owner's answer (relayed to its caller) or until `deadline`: whether
  // none is left.
  bool Drain(std::chrono::steady_clock::time_point deadline) EXCLUDES(mu_);

 private:
  void Answered() EXCLUDES(mu_);

  std::set<std::string> PeersLocked() const REQUIRES(mu_);

  const Options options_;
  const std::string authorization_;  // "Bearer " and the cluster token.
  mutable Mutex mu_;
  std::string self_ GUARDED_BY(mu_);
  std::vector<std::string> owners_ GUARDED_BY(mu_);  // By partition.
  std::map<std::string, std::shared_ptr<grpc::GenericStub>> stubs_
      GUARDED_BY(mu_);
  std::map<std::uint64_t, std::function<void()>> watchers_ GUARDED_BY(mu_);
  std::uint64_t next_watcher_ GUARDED_BY(mu_) = 1;
  std::size_t in_flight_ GUARDED_BY(mu_) = 0;  // calls awaiting answers
  bool draining_ GUARDED_BY(mu_) = false;
  CondVar answered_;  // in_flight_ fell
  prometheus::Gauge* in_flight_gauge_ = nullptr;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_FORWARD_H_
