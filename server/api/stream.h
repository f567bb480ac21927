// The server side of Subscribe streams: the sink a dispatcher delivers to,
// the reactor that owns it, and a stream refused before it started.
#ifndef DELAYD_SERVER_API_STREAM_H_
#define DELAYD_SERVER_API_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/api/proto_time.h"
#include "server/api/queue_call.h"
#include "server/api/rpc_metrics.h"
#include "server/api/unary_call.h"
#include "server/common/limit_log.h"
#include "server/common/mutex.h"
#include "server/common/status.h"
#include "server/core/dispatcher.h"
#include "server/core/scheduler.h"
#include "server/core/turn.h"

namespace delayd {

// An event as the API shows it (its blob holding the real payload).
inline void ToProto(std::string_view ns, const Event& e, v1::Event* out) {
  out->set_id(e.id);
  out->set_namespace_(std::string(ns));
  std::string_view key = e.blob.key();
  std::uint64_t run = 0;
  if (std::string_view schedule; SplitRunKey(key, &schedule, &run)) {
    key = schedule;  // A schedule's run (schedule_record.h).
  }
  out->set_key(std::string(key));
  out->set_schedule_run(run);
  out->set_payload(std::string(e.blob.payload()));
  out->set_version(e.version);
  SetTimestamp(e.fire_time, out->mutable_fire_time());
  SetTimestamp(e.fired_at, out->mutable_fired_at());
  out->set_attempt(e.attempt);
  out->set_reason(e.reason == Reason::kDrained        ? v1::REASON_DRAINED
                  : e.reason == Reason::kDeadLettered ? v1::REASON_DEAD_LETTERED
                                                      : v1::REASON_EXPIRED);
}

// What a sink writes through: the reactor of its stream (Subscribe's or
// Work's). Called without the sink's lock held; either may run a reaction
// of the stream inline.
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  virtual void WriteMessage(const grpc::ByteBuffer* msg) = 0;
  virtual void FinishStream(const grpc::Status& status) = 0;
};

// The write side of one Subscribe or Work stream, shared between the reactor
// (gRPC threads), a dispatcher (its strand) and, on a cluster node, a relay
// (gRPC threads of its streams to other nodes). One write in flight at a time;
// events that arrive meanwhile are gathered into the next messages. A write
// that has not completed within the stream-write timeout cancels the call
// (the client stopped reading): the reactor then ends, and the dispatcher
// gives a worker's events to others. Messages are serialized here (the
// method writes bytes, as every method of the service reads them).
//
// The write timer is armed lazily: a write notes when it started, and the
// timer, armed by the first write that finds it idle, looks when it goes
// off at the write then under way, if any, and waits out the rest of that
// one's timeout. A write's completion leaves it alone. (Armed and
// cancelled for every write, it woke the timer's thread for each: under
// one loop at a steady 2 k timers/s, 1.4 of the daemon's 4.6 context
// switches a timer; tests/bench/README.md, "The stream's write timer".)
//
// Locking: mu_ guards the sink's state. It is never held while calling into
// gRPC (StartWrite, Finish, TryCancel), which may run a reaction of this
// stream (OnWriteDone, OnCancel, OnDone) inline: each method decides under
// mu_ what the reactor is to do (an Action) and does it after letting go.
class StreamSink : public Subscriber {
 public:
  StreamSink(StreamWriter* r, grpc::ServerContextBase* ctx,
             asio::any_io_executor timers,
             std::chrono::nanoseconds write_timeout)
      : reactor_(r),
        ctx_(ctx),
        write_timer_(std::move(timers)),
        write_timeout_(write_timeout) {}

  Backlog Deliver(std::string_view ns,
                  std::span<const Event* const> events) override EXCLUDES(mu_);
  Backlog Unwritten() const override {
    return {unwritten_events_.load(), unwritten_bytes_.load()};
  }
  void End(const Status& status) override EXCLUDES(mu_);
  // The events of this node's dispatcher only (not relayed ones).
  std::vector<std::uint64_t> TakeUnwritten() override EXCLUDES(mu_);
  std::uint64_t EventsLeft() const override { return events_left_.load(); }
  void Acked(std::span<const std::uint64_t> ids) override EXCLUDES(mu_);

  // A cluster node's worker also gets the events other nodes deliver to
  // this node on its behalf (relay.h). The stream takes at most
  // `max_events` over its life, relayed or not (before anything is
  // delivered; 0: no limit).
  void LimitEvents(std::uint64_t max_events);
  // Queues the events of `msg`, delivered by the node at `source`, up to
  // the stream's limit; returns the ids of those beyond it (not queued)
  // and sets *backlog to the backlog after queueing.
  std::vector<std::uint64_t> DeliverRelayed(v1::SubscribeResponse msg,
                                            const std::string& source,
                                            Backlog* backlog) EXCLUDES(mu_);
  // Once the stream is over: the relayed events its client was never
  // written, by the node that delivered them.
  std::map<std::string, std::vector<std::uint64_t>> TakeUnwrittenRelayed()
      EXCLUDES(mu_);
  // Called (any thread, without mu_) each time the backlog has been written
  // out, as on_drained is: a relay held back by the backlog reads on.
  void SetRelayDrained(std::function<void()> drained) EXCLUDES(mu_);
  // Makes the registration wait for one more SendRegistered (a cluster
  // node's relay: until the other owners have registered the worker).
  // Called before the first SendRegistered.
  void AwaitRegistration() EXCLUDES(mu_);
  // Tells the subscriber it is registered (an empty first message) once
  // every party awaited has called this: the dispatcher, and a relay if
  // AwaitRegistration was called.
  void SendRegistered() EXCLUDES(mu_);
  // Work streams: queues the answer to a request made on the stream (with
  // the events queued, if any); false (dropped) once the stream is ending.
  bool Answer(v1::WorkAnswer answer) EXCLUDES(mu_);
  // Work streams: told (from the reactor's OnWriteDone, without mu_) how
  // many answers each completed write carried. Set before the stream
  // subscribes.
  void OnAnswersWritten(std::function<void(std::size_t)> written) {
    answers_written_ = std::move(written);
  }
  // The reactor's OnWriteDone.
  void OnWriteDone(bool ok) EXCLUDES(mu_);
  // Detaches from the reactor (in its OnDone) and returns the code the
  // stream was finished with (CANCELLED if it was not: the client left).
  grpc::StatusCode Detach() EXCLUDES(mu_);

 private:
  // Events queued while a write is in flight, gathered into messages of at
  // most kMaxMessageBytes (or one event, if larger). The bound keeps messages
  // well under the 4 MiB that gRPC clients accept by default
  // (GRPC_DEFAULT_MAX_RECV_MESSAGE_LENGTH) and makes the write timeout
  // measure a client's progress per MiB, not per backlog.
  static constexpr std::size_t kMaxMessageBytes = 1 << 20;
  struct Message {
    v1::SubscribeResponse msg;
    std::size_t bytes = 0;
    std::string source;  // The node that delivered it; empty: this one.
  };
  // Takes up to `want` of the events left (events_left_).
  std::uint64_t TakeEvents(std::uint64_t want);
  // What the reactor is to do once mu_ is let go.
  struct Action {
    enum Kind { kNone, kWrite, kFinish } kind = kNone;
    StreamWriter* reactor = nullptr;
    grpc::Status end;  // kFinish's.
  };

  // About what an event costs on the wire and in the queued message.
  static std::size_t EventBytes(std::string_view ns, const Event& e) {
    return ns.size() + e.blob.key().size() + e.blob.payload().size() + 64;
  }
  // Decides the next step: a write of the next message (serialized into
  // in_flight_, its timer armed), or the stream's end once writes are done;
  // nothing while a turn's Flush is due.
  Action Next() REQUIRES(mu_);
  // Next(), or within a turn (turn.h) nothing yet: the turn's end then
  // takes the next step (Flush), so that what the turn queued for this
  // stream (an ack's answer and the events it let go) leaves in one message.
  Action NextOrGather() REQUIRES(mu_);
  void Flush() EXCLUDES(mu_);
  // Does it (without mu_).
  void Run(const Action& action);
  // Arms the write timer, unless it is armed, for `at`.
  void ArmWriteTimer(std::chrono::steady_clock::time_point at) REQUIRES(mu_);
  // The write timer went off: cancels the call if the write under way
  // started a timeout ago; waits out the rest of it if it started later.
  void OnWriteTimeout() EXCLUDES(mu_);

  mutable Mutex mu_;
  CondVar cancelled_;
  StreamWriter* reactor_ GUARDED_BY(mu_);
  grpc::ServerContextBase* const ctx_;
  asio::steady_timer write_timer_ GUARDED_BY(mu_);
  bool write_timer_armed_ GUARDED_BY(mu_) = false;
  const std::chrono::nanoseconds write_timeout_;
  // When the write under way (writing_) started.
  std::chrono::steady_clock::time_point write_started_ GUARDED_BY(mu_);
  std::deque<Message> queue_ GUARDED_BY(mu_);
  // The message being written (read by gRPC while writing_).
  grpc::ByteBuffer in_flight_;
  std::size_t in_write_ GUARDED_BY(mu_) = 0;
  std::size_t in_write_answers_ GUARDED_BY(mu_) = 0;
  std::function<void(std::size_t)> answers_written_;  // Set before use.
  // The ids of the events in the write under way, and the node that
  // delivered them (empty: this one).
  std::vector<std::uint64_t> in_write_ids_ GUARDED_BY(mu_);
  std::string in_write_source_ GUARDED_BY(mu_);
  // Relayed events never written, by the node that delivered them.
  std::map<std::string, std::vector<std::uint64_t>> unwritten_relayed_
      GUARDED_BY(mu_);
  std::function<void()> relay_drained_ GUARDED_BY(mu_);
  std::atomic<std::uint64_t> events_left_{
      std::numeric_limits<std::uint64_t>::max()};
  // Events its client was never written: delivered after the stream's end,
  // or in a write that failed (TakeUnwritten adds those still queued).
  std::vector<std::uint64_t> unwritten_ids_ GUARDED_BY(mu_);
  std::size_t in_write_bytes_ GUARDED_BY(mu_) = 0;
  std::atomic<std::size_t> unwritten_events_{0};
  std::atomic<std::size_t> unwritten_bytes_{0};
  bool writing_ GUARDED_BY(mu_) = false;
  bool force_write_ GUARDED_BY(mu_) = false;
  bool flush_due_ GUARDED_BY(mu_) = false;      // A turn's end calls Flush.
  int registration_waits_ GUARDED_BY(mu_) = 1;  // SendRegistered calls due.
  bool ending_ GUARDED_BY(mu_) = false;
  bool finished_ GUARDED_BY(mu_) = false;
  // A TryCancel is under way on this thread (ctx_ must outlive it: Detach
  // waits for it, unless the cancel runs OnDone inline on that thread).
  std::optional<std::thread::id> cancelling_ GUARDED_BY(mu_);
  grpc::StatusCode finish_code_ GUARDED_BY(mu_) = grpc::StatusCode::CANCELLED;
  Status end_status_ GUARDED_BY(mu_);
};

// A stream's registration with the scheduler, as its reactor holds it:
// made when the stream subscribes (logged), ended by Done in the reactor's
// OnDone (counted in the stream's metrics, logged, unsubscribed).
class StreamSubscription {
 public:
  // Runs when the stream is over (a cluster node's Relay::Stop).
  using AtEnd = std::function<void()>;
  // Told the stream's sink before the dispatcher is (a cluster node relays
  // other nodes' events into it); returns what to run at the end.
  using Attach = std::function<AtEnd(const std::shared_ptr<StreamSink>&)>;
  StreamSubscription(Scheduler& scheduler, StreamWriter* writer,
                     grpc::ServerContextBase* ctx, std::string ns,
                     const SubscribeOptions& options, MethodMetrics& metrics);
  // Registers the stream (its sink may be written to from then on: the
  // reactor must find this by then).
  void Begin(const SubscribeOptions& options, const Attach& attach);
  StreamSubscription(const StreamSubscription&) = delete;
  StreamSubscription& operator=(const StreamSubscription&) = delete;

  StreamSink& sink() const { return *sink_; }
  const std::string& ns() const { return ns_; }
  void Done();

 private:
  Scheduler& scheduler_;
  const std::string ns_;
  const std::uint64_t id_;
  MethodMetrics& metrics_;
  const std::string who_;
  std::shared_ptr<StreamSink> sink_;
  AtEnd at_end_;
};

// How a stream subscribes (Subscribe's, or a Work stream's first message):
// its namespace, options, and what a cluster node attaches.
struct StreamStart {
  std::string ns;
  SubscribeOptions options;
  StreamSubscription::Attach attach;
};

// A Subscribe stream. `Base` is the callback API's reactor
// (SubscribeReactor) or a call on the loop's queue (QueueSubscribeReactor,
// queue_call.h: the same contract).
template <typename Base>
class BasicSubscribeReactor : public Base, public StreamWriter {
 public:
  using AtEnd = StreamSubscription::AtEnd;
  // `base` constructs Base.
  template <typename... BaseArgs>
  BasicSubscribeReactor(Scheduler& scheduler, grpc::ServerContextBase* ctx,
                        StreamStart start, MethodMetrics& metrics,
                        BaseArgs&&... base)
      : Base(std::forward<BaseArgs>(base)...),
        sub_(scheduler, this, ctx, std::move(start.ns), start.options,
             metrics) {
    sub_.Begin(start.options, start.attach);
  }

  void WriteMessage(const grpc::ByteBuffer* msg) override {
    this->StartWrite(msg);
  }
  void FinishStream(const grpc::Status& status) override {
    this->Finish(status);
  }
  void OnWriteDone(bool ok) override { sub_.sink().OnWriteDone(ok); }
  void OnCancel() override {
    sub_.sink().End(Status::Unavailable("subscriber went away"));
  }
  void OnDone() override {
    sub_.Done();
    delete this;
  }

 private:
  StreamSubscription sub_;
};

using SubscribeReactor =
    BasicSubscribeReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>>;
using QueueSubscribeReactor = BasicSubscribeReactor<QueueReactor>;

// A stream refused at its start (counted in `metrics`). `Base` as above.
template <typename Base>
class BasicFailedStream : public Base {
 public:
  template <typename... BaseArgs>
  BasicFailedStream(const Status& status, MethodMetrics& metrics,
                    BaseArgs&&... base)
      : Base(std::forward<BaseArgs>(base)...) {
    if (status.code() == Code::kResourceExhausted) {
      LogLimitHit("resource", status.message());
    }
    const grpc::Status answer = ToGrpc(status);
    metrics.Observe(answer.error_code(), std::nullopt);
    this->Finish(answer);
  }
  void OnDone() override { delete this; }
};
using FailedStream =
    BasicFailedStream<grpc::ServerWriteReactor<grpc::ByteBuffer>>;
using QueueFailedStream = BasicFailedStream<QueueReactor>;

}  // namespace delayd

#endif  // DELAYD_SERVER_API_STREAM_H_
