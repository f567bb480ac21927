// What a dispatcher (dispatcher.h) delivers to and answers with: the
// receiving end of a subscription, its options, and the results of acks,
// nacks and dead-letter listings.
#ifndef DELAYD_SERVER_CORE_SUBSCRIBER_H_
#define DELAYD_SERVER_CORE_SUBSCRIBER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"
#include "server/common/types.h"

namespace delayd {

// The receiving end of a subscription, implemented by the gRPC stream.
class Subscriber : public std::enable_shared_from_this<Subscriber> {
 public:
  // What a subscriber holds that its client has not yet taken: events
  // queued or being written.
  struct Backlog {
    std::size_t events = 0;
    std::size_t bytes = 0;
  };
  virtual ~Subscriber() = default;
  // Called on a dispatcher strand. Queues `events` for writing, without
  // blocking or calling back into the dispatcher, and returns the backlog
  // after queueing them.
  virtual Backlog Deliver(std::string_view ns,
                          std::span<const Event* const> events) = 0;
  // The backlog now (any thread).
  virtual Backlog Unwritten() const = 0;
  // Ends the stream with `status` once queued writes are done.
  virtual void End(const Status& status) = 0;
  // Once the stream is over (the dispatcher's Unsubscribe): the ids of the
  // events delivered to it that its client was never written, because the
  // stream ended first (queued, in a write that failed, or delivered after
  // its end). Their leases are taken back (a worker that keeps its leases).
  virtual std::vector<std::uint64_t> TakeUnwritten() { return {}; }
  // Called on a dispatcher strand: `ids`, events this dispatcher delivered
  // to it, were acked or nacked (by its client, which so has them, or by
  // another for it). Those of them in a write whose completion is yet to
  // come stop counting among Unwritten()'s events (their bytes count until
  // it completes): the room an ack or nack frees is used in the same turn
  // (turn.h).
  virtual void Acked(std::span<const std::uint64_t> /*ids*/) {}
  // How many more events it takes over its life, counting those it gets
  // from elsewhere (a cluster node's relayed events, relay.h): a worker's
  // room is bounded by it as by its own max_events.
  virtual std::uint64_t EventsLeft() const {
    return std::numeric_limits<std::uint64_t>::max();
  }

  // Another cluster node's stream, relaying to its worker or watcher
  // (relay.h): not counted among the namespace's workers and watchers (the
  // node it is connected to counts it). Set before subscribing.
  bool relayed = false;

  // Set by the dispatcher before anything is delivered; the subscriber
  // calls it (from any thread) each time its backlog has been written out,
  // so that a worker held back by its backlog gets more. The subscriber
  // lowers what Unwritten() reports (a seq_cst atomic, or under a lock
  // that Unwritten() takes too) before the call: the dispatcher takes a
  // turn only if events are ready by then, and relies on a turn that ran
  // earlier having seen the backlog it lowered.
  std::function<void()> on_drained;
};

struct SubscribeOptions {
  bool watcher = false;
  std::uint32_t max_in_flight = 100;
  // Events over the subscription's life; 0: no limit.
  std::uint64_t max_events = 0;
  // 0: the namespace policy's.
  std::chrono::nanoseconds ack_timeout{0};
  // Its events in flight when it leaves keep their leases (see the proto's
  // SubscribeRequest.keep_leases).
  bool keep_leases = false;
};

// An event whose last attempt failed, kept until requeued or purged.
struct DeadLetter {
  Event event;        // With its payload when listed.
  std::string error;  // The last error a worker gave (Nack), if any.
};

struct DeadLetterPage {
  std::vector<DeadLetter> letters;
  std::optional<std::uint64_t> next;  // The id to list from, if more.
  Status error;                       // Not OK if payloads could not be read.
};

// Of Nack and ExtendLease.
struct LeaseResult {
  std::uint32_t done = 0;  // Ids that were in flight, now acted on.
  std::vector<std::uint64_t> unknown;
};

// An event whose failed delivery waits for its retry time, as recovery
// found it (the retry time is kept with its fate: StoredFate).
struct RetryingEvent {
  Event event;
  WallNanos retry_at;
  std::string error;
};

struct AckResult {
  std::uint32_t acked = 0;
  std::vector<std::uint64_t> unknown;
  Status error;  // Not OK if the store could not record the acks.
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_SUBSCRIBER_H_
