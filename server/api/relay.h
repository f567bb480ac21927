// A worker or watcher subscribed to a cluster node gets the events of every
// partition of its namespace: this node's from its dispatcher, the other
// owners' through a Subscribe stream this node opens to each of them on its
// behalf (one hop, the cluster token: forward.h) and relays into the
// worker's stream, in the order each node delivers them.
//
// Flow control holds end to end: each owner delivers at most its share of
// the worker's max_in_flight (split evenly among the nodes owning
// partitions when the stream starts, at least 1 each); a peer stream is
// read only while the worker's unwritten backlog is under a bound, so a
// slow worker holds back gRPC's flow control to the owners and never grows
// this node's memory. A stream's max_events holds across all owners (the
// events an owner delivers beyond it are given back to that owner, their
// attempt not counted), as do its keep_leases and ack_timeout.
//
// When the worker's stream ends, the relayed events its client was never
// written are given back to their owners (Nack as a peer with kRelease:
// ready again at once, the attempt not counted) before the peer streams are
// ended, which the owners then treat as the end of a worker's stream. A
// peer stream that fails is opened again (after kRetry) while its node
// still owns partitions; streams are opened to nodes that come to own
// partitions. An owner that refuses the stream (permissions, its
// subscriber limit) ends the worker's stream with the reason.
//
// The worker is told it is registered (its stream's empty first message)
// once this node and every node owning partitions at the start have
// registered it, or their streams failed, or kRegisterWait passed: an
// event that comes due after the registration reaches it.
//
// Thread safety: mu_ guards the streams and the registration's count;
// callbacks come from gRPC's, the forwarder's and the pool's threads (the
// timers) and never run with mu_ held.
#ifndef DELAYD_SERVER_API_RELAY_H_
#define DELAYD_SERVER_API_RELAY_H_

#include <grpcpp/grpcpp.h>

#include <asio.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "delayd/v1/delayd.pb.h"
#include "server/api/forward.h"
#include "server/api/stream.h"
#include "server/common/mutex.h"

namespace delayd {

class Relay : public std::enable_shared_from_this<Relay> {
 public:
  // Metadata of a peer's Nack: the events were never written to a client.
  static constexpr const char* kRelease = "delayd-release";
  // A failed peer stream is opened again after this.
  static constexpr std::chrono::milliseconds kRetry{500};
  // A peer stream is read only while the worker's backlog is under this.
  static constexpr std::size_t kMaxBacklogBytes = 1 << 20;
  // The worker is told it is registered after this at the latest.
  static constexpr std::chrono::seconds kRegisterWait{2};

  // `peer_request`: the Subscribe each owner gets (the worker's, with its
  // share of max_in_flight). `sink` is the worker's stream.
  // Its timers wait on `timers` (Scheduler::timers()).
  Relay(Forwarder& forwarder, asio::any_io_executor timers,
        std::shared_ptr<StreamSink> sink, v1::SubscribeRequest peer_request);

  // Opens a stream to each node owning partitions now, and later to each
  // that comes to.
  void Start() EXCLUDES(mu_);
  // The worker's stream is over: gives back what its client never got,
  // then ends the peer streams.
  void Stop() EXCLUDES(mu_);

 private:
  class PeerStream;

  // Opens streams to the peers that have none; `first`: the ones opened
  // at Start, whose registration the worker's waits for.
  void Reconcile(bool first = false) EXCLUDES(mu_);
  // A stream opened at Start registered the worker or failed; `all`: stop
  // waiting for the others.
  void PeerRegistered(bool all) EXCLUDES(mu_);
  // A message from `from`'s node; false: hold its stream back (or it is
  // over) until ResumeAll.
  bool Take(PeerStream* from, v1::SubscribeResponse msg) EXCLUDES(mu_);
  // `from` is over with `status`.
  void Ended(PeerStream* from, const grpc::Status& status) EXCLUDES(mu_);
  // The worker's backlog was written out: held-back streams read on.
  void ResumeAll() EXCLUDES(mu_);
  // Gives `ids` back to the node at `peer`, then runs `done`.
  void Release(const std::string& peer, std::vector<std::uint64_t> ids,
               std::function<void()> done);

  Forwarder& forwarder_;
  const std::shared_ptr<StreamSink> sink_;
  const v1::SubscribeRequest peer_request_;
  std::uint64_t watch_ = 0;  // Set by Start.
  Mutex mu_;
  bool stopped_ GUARDED_BY(mu_) = false;
  bool retry_armed_ GUARDED_BY(mu_) = false;
  asio::steady_timer retry_ GUARDED_BY(mu_);
  int awaited_ GUARDED_BY(mu_) = 0;  // Streams the registration waits for.
  bool registered_ GUARDED_BY(mu_) = false;  // The worker was told.
  asio::steady_timer register_wait_ GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<PeerStream>> streams_ GUARDED_BY(mu_);
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_RELAY_H_
