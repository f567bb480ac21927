#include "server/http/http_events.h"

#include <civetweb.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "server/http/respond.h"
#include "server/http/transcode.h"

namespace delayd::http {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

grpc::Status Invalid(std::string message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message));
}

// A Subscribe call read one message at a time by a thread that waits for
// each with a deadline. The reactor's callbacks (gRPC's threads) only hand
// over under mu_. A hold keeps the call from completing (OnDone) between
// a read's end and the next StartRead; it is let go once no read is to
// follow.
class Stream : public grpc::ClientReadReactor<v1::SubscribeResponse> {
 public:
  enum Got { kMessage, kEnded, kTimedOut };

  Stream(const EventCall& call, const v1::SubscribeRequest& req) {
    if (call.authorization != nullptr) {
      ctx_.AddMetadata("authorization", call.authorization);
    }
    call.stub->async()->Subscribe(&ctx_, &req, this);
    AddHold();
    StartRead(&msg_);
    StartCall();
  }
  // Cancels the call if it is still on, and waits for its end.
  ~Stream() override {
    ctx_.TryCancel();
    LetGo();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }

  // The next message into *out (and the next read started), or the end,
  // or nothing by `deadline`.
  Got Next(Clock::time_point deadline, v1::SubscribeResponse* out) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return has_ || ended_; })) {
      return kTimedOut;
    }
    if (!has_) return kEnded;
    out->Swap(&msg_);
    has_ = false;
    lock.unlock();
    StartRead(&msg_);
    return kMessage;
  }
  // Cancels the call and adds the events of every message that still
  // arrives, until it ends, to *out: events handed to the stream are this
  // client's, and what its server never wrote goes back to the others (the
  // dispatcher takes back a keep-leases stream's unwritten events).
  void CancelAndDrain(v1::PullResponse* out) {
    ctx_.TryCancel();
    v1::SubscribeResponse msg;
    while (Next(Clock::now() + seconds(60), &msg) == kMessage) {
      for (v1::Event& e : *msg.mutable_events()) {
        *out->add_events() = std::move(e);
      }
    }
  }
  // After kEnded: why (waits for it).
  grpc::Status status() {
    LetGo();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }

 private:
  void LetGo() {
    if (!let_go_.exchange(true)) RemoveHold();
  }
  void OnReadDone(bool ok) override {
    std::lock_guard lock(mu_);
    (ok ? has_ : ended_) = true;
    cv_.notify_all();
  }
  void OnDone(const grpc::Status& s) override {
    std::lock_guard lock(mu_);
    status_ = s;
    ended_ = done_ = true;
    cv_.notify_all();
  }

  grpc::ClientContext ctx_;
  v1::SubscribeResponse msg_;  // read into while !has_
  std::mutex mu_;
  std::condition_variable cv_;
  bool has_ = false;
  bool ended_ = false;
  bool done_ = false;
  std::atomic<bool> let_go_{false};
  grpc::Status status_;
};

// Reads the registration message; false (the error sent) if the call ended
// instead.
bool Registered(mg_connection* conn, Stream& stream) {
  v1::SubscribeResponse msg;
  if (stream.Next(Clock::now() + seconds(30), &msg) == Stream::kMessage) {
    return true;
  }
  grpc::Status s = stream.status();
  if (s.ok()) s = grpc::Status(grpc::StatusCode::UNAVAILABLE, "no stream");
  SendError(conn, s);
  return false;
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

bool Write(mg_connection* conn, const std::string& text) {
  return mg_write(conn, text.data(), text.size()) ==
         static_cast<int>(text.size());
}

}  // namespace

bool IsWatch(std::string_view query) {
  return query == "watch=1" || query == "watch=true";
}

void ServePull(mg_connection* conn, const Match& m, std::string_view body,
               const EventCall& call) {
  v1::PullRequest pull;
  if (grpc::Status s = BuildRequest(m, "", body, &pull); !s.ok()) {
    SendError(conn, s);
    return;
  }
  if (pull.max_events() > 1000) {
    SendError(conn, Invalid("max_events: at most 1000"));
    return;
  }
  const auto wait = pull.has_wait()
                        ? seconds(pull.wait().seconds()) +
                              milliseconds(pull.wait().nanos() / 1'000'000)
                        : milliseconds(0);
  if (wait < milliseconds(0) || wait > seconds(60)) {
    SendError(conn, Invalid("wait: from 0s to 60s"));
    return;
  }
  v1::SubscribeRequest req;
  req.set_namespace_(pull.namespace_());
  req.set_mode(v1::SubscribeRequest::WORKER);
  const std::uint32_t n = pull.max_events() == 0 ? 10 : pull.max_events();
  req.set_max_in_flight(n);
  req.set_max_events(n);
  req.set_keep_leases(true);
  if (pull.has_ack_timeout()) *req.mutable_ack_timeout() = pull.ack_timeout();
  const auto deadline =
      Clock::now() + (wait.count() == 0 ? milliseconds(seconds(10)) : wait);
  Stream stream(call, req);
  if (!Registered(conn, stream)) return;
  v1::SubscribeResponse msg;
  v1::PullResponse out;
  // The first message with events answers; an empty one (none) does not.
  while (out.events_size() == 0) {
    const Stream::Got got = stream.Next(deadline, &msg);
    if (got == Stream::kTimedOut) break;
    if (got == Stream::kEnded) {
      SendError(conn, stream.status());
      return;
    }
    out.mutable_events()->Swap(msg.mutable_events());
  }
  stream.CancelAndDrain(&out);
  Send(conn, 200, ToJson(out));
}

void ServeWatch(mg_connection* conn, const Match& m, std::string_view query,
                const EventCall& call) {
  if (!IsWatch(query)) {
    SendError(conn, Invalid("GET .../events takes watch=1 (a watcher); a "
                            "worker pulls with POST .../events:pull"));
    return;
  }
  v1::SubscribeRequest req;
  for (const auto& [field, value] : m.bindings) {
    if (field == "namespace") req.set_namespace_(value);
  }
  req.set_mode(v1::SubscribeRequest::WATCHER);
  Stream stream(call, req);
  if (!Registered(conn, stream)) return;
  mg_response_header_start(conn, 200);
  AddCorsHeaders(conn);
  mg_response_header_add(conn, "Content-Type", "text/event-stream", -1);
  mg_response_header_add(conn, "Cache-Control", "no-store", -1);
  mg_response_header_add(conn, "Connection", "close", -1);
  mg_response_header_send(conn);
  if (!Write(conn, ": watching " + req.namespace_() + "\n\n")) return;
  v1::SubscribeResponse msg;
  for (;;) {
    const Stream::Got got = stream.Next(Clock::now() + seconds(5), &msg);
    if (got == Stream::kTimedOut) {
      if (!Write(conn, ": keep-alive\n\n")) return;
      continue;
    }
    if (got == Stream::kEnded) {
      Write(conn, "event: end\ndata: " + ErrorBody(stream.status()) + "\n\n");
      return;
    }
    std::string text;
    for (const v1::Event& e : msg.events()) {
      text += "id: " + std::to_string(e.id()) +
              "\nevent: " + ReasonName(e.reason()) + "\ndata: " + ToJson(e) +
              "\n\n";
    }
    if (!Write(conn, text)) return;
  }
}

}  // namespace delayd::http
