// The server side of Subscribe streams: the sink a dispatcher delivers to,
// the reactor that owns it, and a stream refused before it started.
#ifndef DELAYD_SERVER_API_STREAM_H_
#define DELAYD_SERVER_API_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/api/proto_time.h"
#include "server/api/rpc_metrics.h"
#include "server/common/limit_log.h"
#include "server/common/status.h"
#include "server/core/dispatcher.h"
#include "server/core/scheduler.h"

namespace delayd {

grpc::Status ToGrpc(const Status& status);  // unary_call.h

// An event as the API shows it (its blob holding the real payload).
inline void ToProto(std::string_view ns, const Event& e, v1::Event* out) {
  out->set_id(e.id);
  out->set_namespace_(std::string(ns));
  out->set_key(std::string(e.blob.key()));
  out->set_payload(std::string(e.blob.payload()));
  out->set_version(e.version);
  SetTimestamp(e.fire_time, out->mutable_fire_time());
  SetTimestamp(e.fired_at, out->mutable_fired_at());
  out->set_attempt(e.attempt);
  out->set_reason(e.reason == Reason::kDrained        ? v1::REASON_DRAINED
                  : e.reason == Reason::kDeadLettered ? v1::REASON_DEAD_LETTERED
                                                      : v1::REASON_EXPIRED);
}

// The write side of one Subscribe stream, shared between the reactor (gRPC
// threads) and a dispatcher (its strand). One write in flight at a time;
// events that arrive meanwhile are gathered into the next messages. A write
// that has not completed within the stream-write timeout cancels the call
// (the client stopped reading): the reactor then ends, and the dispatcher
// gives a worker's events to others. Messages are serialized here (the
// method writes bytes, as every method of the service reads them). A
// recursive mutex because gRPC may run a reaction inline from Finish().
class StreamSink : public Subscriber {
 public:
  StreamSink(grpc::ServerWriteReactor<grpc::ByteBuffer>* r,
             grpc::CallbackServerContext* ctx, asio::io_context& io,
             std::chrono::nanoseconds write_timeout)
      : reactor_(r),
        ctx_(ctx),
        write_timer_(io),
        write_timeout_(write_timeout) {}

  Backlog Deliver(std::string_view ns,
                  std::span<const Event* const> events) override {
    std::lock_guard lock(mu_);
    if (reactor_ == nullptr || ending_) return {};
    std::size_t bytes = 0;
    for (const Event* e : events) {
      const std::size_t b = EventBytes(ns, *e);
      if (queue_.empty() || (queue_.back().bytes + b > kMaxMessageBytes &&
                             queue_.back().msg.events_size() > 0)) {
        queue_.emplace_back();
      }
      Message& m = queue_.back();
      ToProto(ns, *e, m.msg.add_events());
      m.bytes += b;
      bytes += b;
    }
    unwritten_events_.fetch_add(events.size());
    unwritten_bytes_.fetch_add(bytes);
    Pump();
    return Unwritten();
  }

  Backlog Unwritten() const override {
    return {unwritten_events_.load(), unwritten_bytes_.load()};
  }

  void End(const Status& status) override {
    std::lock_guard lock(mu_);
    if (reactor_ == nullptr || ending_) return;
    ending_ = true;
    end_status_ = status;
    Pump();
  }

  // Tells the subscriber it is registered: an empty first message.
  void SendRegistered() {
    std::lock_guard lock(mu_);
    if (reactor_ == nullptr || ending_) return;
    force_write_ = true;
    Pump();
  }

  void OnWriteDone(bool ok) {
    std::function<void()> drained;
    {
      std::lock_guard lock(mu_);
      write_timer_.cancel();
      writing_ = false;
      unwritten_events_.fetch_sub(in_write_);
      unwritten_bytes_.fetch_sub(in_write_bytes_);
      in_write_ = in_write_bytes_ = 0;
      if (!ok && !ending_) {
        ending_ = true;
        end_status_ = Status::Unavailable("stream broken");
      }
      Pump();
      if (ok && !writing_ && !ending_) drained = on_drained;
    }
    if (drained) drained();
  }

  // Detaches from the reactor (in its OnDone) and returns the code the
  // stream was finished with (CANCELLED if it was not: the client left).
  grpc::StatusCode Detach() {
    std::lock_guard lock(mu_);
    write_timer_.cancel();
    reactor_ = nullptr;
    return finish_code_;
  }

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
  };

  // About what an event costs on the wire and in the queued message.
  static std::size_t EventBytes(std::string_view ns, const Event& e) {
    return ns.size() + e.blob.key().size() + e.blob.payload().size() + 64;
  }

  // Starts the next write, or finishes once writes are done. Under mu_.
  void Pump() {
    if (reactor_ == nullptr || writing_ || finished_) return;
    if (ending_) {
      finished_ = true;
      const grpc::Status end = ToGrpc(end_status_);
      finish_code_ = end.error_code();
      reactor_->Finish(end);
      return;
    }
    if (queue_.empty() && !force_write_) return;
    force_write_ = false;
    writing_ = true;
    in_write_ = in_write_bytes_ = 0;
    const v1::SubscribeResponse* msg =
        &v1::SubscribeResponse::default_instance();
    if (!queue_.empty()) {
      msg = &queue_.front().msg;
      in_write_ = static_cast<std::size_t>(msg->events_size());
      in_write_bytes_ = queue_.front().bytes;
    }
    bool own_buffer;
    in_flight_.Clear();
    const grpc::Status serialized =
        grpc::SerializationTraits<v1::SubscribeResponse>::Serialize(
            *msg, &in_flight_, &own_buffer);
    if (!queue_.empty()) queue_.pop_front();
    if (!serialized.ok()) {
      finished_ = true;
      finish_code_ = serialized.error_code();
      reactor_->Finish(serialized);
      return;
    }
    write_timer_.expires_after(write_timeout_);
    write_timer_.async_wait(
        [this, self = weak_from_this()](const asio::error_code& ec) {
          if (ec) return;
          auto alive = self.lock();
          if (!alive) return;
          std::lock_guard lock(mu_);
          if (!writing_ || reactor_ == nullptr) return;
          LogLimitHit("stream-write-timeout",
                      "subscriber " + ctx_->peer() +
                          ": a write did not complete in time; the stream is "
                          "ended (" +
                          std::to_string(unwritten_events_.load()) +
                          " events unwritten)");
          ctx_->TryCancel();
        });
    reactor_->StartWrite(&in_flight_);
  }

  mutable std::recursive_mutex mu_;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* reactor_;
  grpc::CallbackServerContext* const ctx_;
  asio::steady_timer write_timer_;
  const std::chrono::nanoseconds write_timeout_;
  std::deque<Message> queue_;
  grpc::ByteBuffer in_flight_;  // The message being written.
  std::size_t in_write_ = 0;
  std::size_t in_write_bytes_ = 0;
  std::atomic<std::size_t> unwritten_events_{0};
  std::atomic<std::size_t> unwritten_bytes_{0};
  bool writing_ = false;
  bool force_write_ = false;
  bool ending_ = false;
  bool finished_ = false;
  grpc::StatusCode finish_code_ = grpc::StatusCode::CANCELLED;
  Status end_status_;
};

class SubscribeReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // Its end is counted in `metrics`; its start and end are logged.
  SubscribeReactor(Scheduler& scheduler, grpc::CallbackServerContext* ctx,
                   std::string ns, SubscribeOptions options,
                   MethodMetrics& metrics)
      : scheduler_(scheduler),
        ns_(std::move(ns)),
        id_(scheduler.NewSubscriberId()),
        metrics_(metrics),
        who_("subscriber " + std::to_string(id_) + " (" + ctx->peer() +
             ", namespace '" + ns_ + "', " +
             (options.watcher ? "watcher" : "worker")),
        sink_(std::make_shared<StreamSink>(
            this, ctx, scheduler.io(),
            scheduler.limits().stream_write_timeout)) {
    LogSampled(
        "subscriber",
        who_ + (options.watcher ? ") connected"
                                : ", max in flight " +
                                      std::to_string(options.max_in_flight) +
                                      ") connected"));
    scheduler_.Subscribe(ns_, id_, sink_, options,
                         [sink = sink_] { sink->SendRegistered(); });
  }

  void OnWriteDone(bool ok) override { sink_->OnWriteDone(ok); }
  void OnCancel() override {
    sink_->End(Status::Unavailable("subscriber went away"));
  }
  void OnDone() override {
    const grpc::StatusCode code = sink_->Detach();
    metrics_.Observe(code, std::nullopt);
    LogSampled("subscriber", who_ + ") disconnected: " + CodeName(code));
    scheduler_.Unsubscribe(ns_, id_);
    scheduler_.counters().subscribers.fetch_sub(1);
    delete this;
  }

 private:
  Scheduler& scheduler_;
  const std::string ns_;
  const std::uint64_t id_;
  MethodMetrics& metrics_;
  const std::string who_;
  std::shared_ptr<StreamSink> sink_;
};

class FailedStream : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  FailedStream(const Status& status, MethodMetrics& metrics) {
    if (status.code() == Code::kResourceExhausted) {
      LogLimitHit("resource", status.message());
    }
    const grpc::Status answer = ToGrpc(status);
    metrics.Observe(answer.error_code(), std::nullopt);
    Finish(answer);
  }
  void OnDone() override { delete this; }
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_STREAM_H_
