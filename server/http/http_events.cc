#include "server/http/http_events.h"

#include <grpcpp/alarm.h>

#include <memory>

#include "server/common/mutex.h"
#include "server/http/subscribe_call.h"
#include "server/http/transcode.h"

namespace delayd::http {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SystemClock = std::chrono::system_clock;

grpc::Status Invalid(std::string message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message));
}

std::string ReasonName(v1::Reason r) {
  switch (r) {
    case v1::REASON_DRAINED:
      return "drained";
    case v1::REASON_DEAD_LETTERED:
      return "dead_lettered";
    default:
      return "expired";
  }
}

// A pull's Work stream and what it got. The pull ends its stream with a
// half-close (WorkCall::Close), never a cancel: at its first message with
// events, or when its wait is over. Every message the daemon wrote is then
// read, and what it never wrote goes back to the other workers (so no
// event is left leased to a pull that answered). The call's own deadline,
// a margin after the wait, only bounds a daemon that does not finish.
// Locking: mu_ guards the phase and the answer; the stream's callbacks run
// one at a time.
class Pull {
 public:
  Pull(Call call, EventCall events)
      : call_(std::move(call)), events_(std::move(events)) {}

  static void Start(std::shared_ptr<Pull> pull, const v1::SubscribeRequest& req,
                    SystemClock::time_point wait_over) {
    pull->stream_ = WorkCall::Make(
        pull->events_.authorization, req, wait_over + seconds(10),
        [pull](v1::SubscribeResponse& msg) { pull->OnMessage(msg); },
        [pull](const grpc::Status& s) { pull->OnEnd(s); });
    // (The HTTP client left: what was written to the stream is lost with
    // it, as a worker's that disconnects, until its ack timeout.)
    pull->events_.set_cancel([weak = std::weak_ptr<WorkCall>(pull->stream_)] {
      if (auto stream = weak.lock()) stream->Cancel();
    });
    pull->wait_.Set(wait_over,
                    [weak = std::weak_ptr<WorkCall>(pull->stream_)](bool over) {
                      if (!over) return;  // Cancelled: the pull ended.
                      if (auto stream = weak.lock()) stream->Close();
                    });
    pull->stream_->Begin(pull->events_.stub);
  }

 private:
  void OnMessage(v1::SubscribeResponse& msg) EXCLUDES(mu_) {
    bool close = false;
    {
      MutexLock lock(&mu_);
      if (!registered_) {
        registered_ = true;  // The registration message.
      } else {
        for (v1::Event& e : *msg.mutable_events()) {
          *out_.add_events() = std::move(e);
        }
        // The first message with events answers; an empty one does not.
        close = out_.events_size() > 0 && !closed_;
        closed_ = closed_ || close;
      }
    }
    if (close) stream_->Close();
    stream_->Next();
  }

  void OnEnd(const grpc::Status& s) EXCLUDES(mu_) {
    v1::PullResponse out;
    bool registered;
    {
      MutexLock lock(&mu_);
      out.Swap(&out_);
      registered = registered_;
    }
    const bool answered = s.ok() ||
                          s.error_code() == grpc::StatusCode::CANCELLED ||
                          s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!registered) {
      SendError(call_, answered ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                               "no stream")
                                : s);
    } else if (!answered) {
      SendError(call_, s);
    } else {
      Send(call_, 200, ToJson(out));
    }
    wait_.Cancel();
    stream_.reset();
    if (events_.done) events_.done();
  }

  const Call call_;
  const EventCall events_;
  std::shared_ptr<WorkCall> stream_;
  grpc::Alarm wait_;  // Closes the stream when the wait is over.
  Mutex mu_;
  bool registered_ GUARDED_BY(mu_) = false;
  bool closed_ GUARDED_BY(mu_) = false;
  v1::PullResponse out_ GUARDED_BY(mu_);
};

// A watch's stream relayed to its client. The next message is read once
// the last one is written; a comment line goes out every 5 s that nothing
// else does. Locking: mu_ guards what is being written and what waits.
class Watch : public std::enable_shared_from_this<Watch> {
 public:
  Watch(Call call, EventCall events)
      : call_(std::move(call)), events_(std::move(events)) {}

  void Start(const v1::SubscribeRequest& req) {
    ns_ = req.namespace_();
    auto self = shared_from_this();
    stream_ = SubscribeCall::Make(
        events_.authorization, req, {},
        [self](v1::SubscribeResponse& msg) { self->OnMessage(msg); },
        [self](const grpc::Status& s) { self->OnEnd(s); });
    events_.set_cancel([weak = std::weak_ptr<SubscribeCall>(stream_)] {
      if (auto stream = weak.lock()) stream->Cancel();
    });
    stream_->Begin(events_.stub);
  }

 private:
  void OnMessage(v1::SubscribeResponse& msg) EXCLUDES(mu_) {
    bool first;
    {
      MutexLock lock(&mu_);
      first = !registered_;
      registered_ = true;
    }
    if (first) {
      {
        MutexLock lock(&mu_);
        writing_ = true;
        waiting_ = ": watching " + ns_ + "\n\n";
        read_after_ = true;
      }
      auto self = shared_from_this();
      call_.ex->StartStream(
          "Content-Type: text/event-stream\r\nCache-Control: no-store\r\n" +
              CorsLines(call_),
          [self](bool ok) { self->Written(ok); });
      KeepAlive();
      return;
    }
    std::string text;
    for (const v1::Event& e : msg.events()) {
      text += "id: " + std::to_string(e.id()) +
              "\nevent: " + ReasonName(e.reason()) + "\ndata: " + ToJson(e) +
              "\n\n";
    }
    Out(std::move(text), /*read_after=*/true);
  }

  // Writes `text` now, or after what is being written.
  void Out(std::string text, bool read_after) EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      if (ended_) return;
      read_after_ = read_after_ || read_after;
      if (writing_) {
        waiting_ += text;
        return;
      }
      writing_ = true;
    }
    auto self = shared_from_this();
    call_.ex->Write(std::move(text), [self](bool ok) { self->Written(ok); });
  }

  // What was written left (or the client is gone): what waits goes next,
  // then the stream's next message is read.
  void Written(bool ok) EXCLUDES(mu_) {
    std::string next;
    bool read = false;
    {
      MutexLock lock(&mu_);
      if (!ok) {
        ended_ = true;
      } else if (!waiting_.empty()) {
        next.swap(waiting_);
      } else {
        writing_ = false;
        read = std::exchange(read_after_, false);
      }
    }
    if (!ok) {
      stream_->Cancel();
      return;
    }
    if (!next.empty()) {
      auto self = shared_from_this();
      call_.ex->Write(std::move(next), [self](bool ok) { self->Written(ok); });
      return;
    }
    if (read) stream_->Next();
  }

  void KeepAlive() {
    auto self = shared_from_this();
    alarm_.Set(SystemClock::now() + seconds(5), [self](bool fired) {
      if (!fired) return;  // Cancelled: the watch ended.
      bool quiet;
      {
        MutexLock lock(&self->mu_);
        quiet = !self->writing_ && !self->ended_;
      }
      if (quiet) self->Out(": keep-alive\n\n", /*read_after=*/false);
      self->KeepAlive();
    });
  }

  void OnEnd(const grpc::Status& s) EXCLUDES(mu_) {
    bool registered, ended;
    {
      MutexLock lock(&mu_);
      registered = registered_;
      ended = std::exchange(ended_, true);
    }
    alarm_.Cancel();
    if (!registered) {
      SendError(call_, s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                             "no stream")
                              : s);
    } else if (!ended) {
      // The daemon ended it: said, then the connection closes.
      auto self = shared_from_this();
      const std::string end = "event: end\ndata: " + ErrorBody(s) + "\n\n";
      call_.ex->Write(end, [self](bool) { self->call_.ex->Finish(); });
    } else {
      call_.ex->Finish();
    }
    if (events_.done) events_.done();
    stream_.reset();
  }

  const Call call_;
  const EventCall events_;
  std::string ns_;
  std::shared_ptr<SubscribeCall> stream_;
  grpc::Alarm alarm_;
  Mutex mu_;
  bool registered_ GUARDED_BY(mu_) = false;
  bool writing_ GUARDED_BY(mu_) = false;
  bool read_after_ GUARDED_BY(mu_) = false;
  bool ended_ GUARDED_BY(mu_) = false;
  std::string waiting_ GUARDED_BY(mu_);
};

}  // namespace

bool IsWatch(std::string_view query) {
  return query == "watch=1" || query == "watch=true";
}

void ServePull(const Call& call, const Match& m, std::string_view body,
               EventCall events) {
  auto refuse = [&](const grpc::Status& s) {
    SendError(call, s);
    if (events.done) events.done();
  };
  v1::PullRequest pull;
  if (grpc::Status s = BuildRequest(m, "", body, &pull); !s.ok()) {
    return refuse(s);
  }
  if (pull.max_events() > 1000) {
    return refuse(Invalid("max_events: at most 1000"));
  }
  const auto wait = pull.has_wait()
                        ? seconds(pull.wait().seconds()) +
                              milliseconds(pull.wait().nanos() / 1'000'000)
                        : milliseconds(0);
  if (wait < milliseconds(0) || wait > seconds(60)) {
    return refuse(Invalid("wait: from 0s to 60s"));
  }
  v1::SubscribeRequest req;
  req.set_namespace_(pull.namespace_());
  req.set_mode(v1::SubscribeRequest::WORKER);
  const std::uint32_t n = pull.max_events() == 0 ? 10 : pull.max_events();
  req.set_max_in_flight(n);
  req.set_max_events(n);
  req.set_keep_leases(true);
  if (pull.has_ack_timeout()) *req.mutable_ack_timeout() = pull.ack_timeout();
  const auto wait_over = SystemClock::now() +
                         (wait.count() == 0 ? milliseconds(seconds(10)) : wait);
  Pull::Start(std::make_shared<Pull>(call, std::move(events)), req, wait_over);
}

void ServeWatch(const Call& call, const Match& m, std::string_view query,
                EventCall events) {
  if (!IsWatch(query)) {
    SendError(call, Invalid("GET .../events takes watch=1 (a watcher); a "
                            "worker pulls with POST .../events:pull"));
    if (events.done) events.done();
    return;
  }
  v1::SubscribeRequest req;
  for (const auto& [field, value] : m.bindings) {
    if (field == "namespace") req.set_namespace_(value);
  }
  req.set_mode(v1::SubscribeRequest::WATCHER);
  std::make_shared<Watch>(call, std::move(events))->Start(req);
}

}  // namespace delayd::http
