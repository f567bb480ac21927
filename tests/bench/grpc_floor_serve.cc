// The servers of grpc_floor.h, one per shape.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "delayd/v1/delayd.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/bench/grpc_floor.h"
#include "tests/bench/grpc_floor_loops.h"
#include "tests/bench/grpc_floor_precise.h"
#include "tests/bench/grpc_floor_store.h"
#include "tests/bench/grpc_floor_tags.h"

namespace delayd::bench::floor {
namespace {

namespace health = grpc::health::v1;

class CallbackHealth : public health::Health::CallbackService {
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const health::HealthCheckRequest*,
                                  health::HealthCheckResponse* resp) override {
    resp->set_status(health::HealthCheckResponse::SERVING);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
};

class SyncHealth : public health::Health::Service {
  grpc::Status Check(grpc::ServerContext*, const health::HealthCheckRequest*,
                     health::HealthCheckResponse* resp) override {
    resp->set_status(health::HealthCheckResponse::SERVING);
    return grpc::Status::OK;
  }
};

// The timer shape on one completion-queue thread, the least a gRPC server
// can do for delayd's traffic: a Check for service "set" (a SetTimer) is
// answered and comes due kAhead later, when the thread's wait on the queue
// ends and it writes one message on the open Watch stream (the event); a
// Check for "ack" is answered. Three wake-ups per timer, all on one thread;
// no store, no wheel. With a `log` (timer-1+log; -1: none), each set's
// record is appended and synced (fdatasync) on the same thread before it is
// answered: the floor under `--fsync always`, calls coming one at a time.
// With `answer_set` (timer-1+writer), a set is armed on this thread and
// handed to it to be answered later from another thread (a writer that
// syncs its record first): the owning thread with its store's group commit
// handed off and back, the shape the redesign of delayd's threads aims at.
// With a `store` (timer-1+rocks, timer-1+rocks-writer), each set, firing and
// ack is written to it, and a set or ack it answers is left to it.
[[noreturn]] void ServeTimers(
    health::Health::AsyncService& svc, grpc::ServerCompletionQueue* cq, int log,
    const std::function<void(AsyncCall*)>& answer_set = nullptr,
    TimerStore* store = nullptr) {
  WatchStream watch(svc, cq);
  // Due times, in order (all are kAhead after their set). The queue's own
  // deadline wakes this thread for them: no timer thread, no hand-over.
  std::deque<std::chrono::system_clock::time_point> timers;
  std::function<void()> request_check = [&] {
    auto* c = new AsyncCall;
    svc.RequestCheck(
        &c->ctx, &c->req, &c->writer, cq, cq, NewTag([&, c](bool ok) {
          if (!ok) {
            delete c;
            return;
          }
          request_check();
          if (c->req.service() == "set") {
            if (log >= 0) AppendDurably(log, RecordOf(c->req));
            timers.push_back(std::chrono::system_clock::now() + kAhead);
            if (answer_set) return answer_set(c);
            if (store != nullptr && store->Set(c)) return;
          } else if (store != nullptr && c->req.service() == "ack" &&
                     store->Ack(c)) {
            return;
          }
          AnswerServing(c);
        }));
  };
  request_check();
  for (;;) {
    RunNext(cq, timers.empty()
                    ? std::chrono::system_clock::now() + std::chrono::seconds(1)
                    : timers.front());
    const auto now = std::chrono::system_clock::now();
    while (!timers.empty() && timers.front() <= now) {
      timers.pop_front();
      if (store != nullptr) store->Fire();
      watch.Fired();
    }
  }
}

// callback+log: the callback API's handler hands each call to the writer,
// which finishes it once synced (delayd's shape without its store: one
// hand-over each way).
class LoggedCallbackHealth : public health::Health::CallbackService {
 public:
  explicit LoggedCallbackHealth(LogWriter* log) : log_(log) {}
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const health::HealthCheckRequest* req,
                                  health::HealthCheckResponse* resp) override {
    resp->set_status(health::HealthCheckResponse::SERVING);
    auto* r = ctx->DefaultReactor();
    log_->Add(RecordOf(*req), [r] { r->Finish(grpc::Status::OK); });
    return r;
  }

 private:
  LogWriter* const log_;
};

// timer-cb: the timer shape on the callback API, the way delayd's service
// is built but with none of its work: a "set" Check arms a timer and is
// answered from gRPC's callback thread; a timer thread of its own sleeps
// until the next due time and starts the event's write on the Watch
// stream's reactor, whose completion (and the next write) runs on gRPC's
// threads; an "ack" Check is answered inline. With a LogWriter
// (timer-cb+log), a set's record is appended and synced by the writer
// thread, which then arms the timer and answers it (delayd's hand-over to
// its store under --fsync always). Against timer-1 (the same traffic on
// one completion-queue thread), what the callback API and these
// hand-overs cost per timer.
class CallbackTimers : public health::Health::CallbackService {
 public:
  explicit CallbackTimers(LogWriter* log) : log_(log) {
    event_.set_status(health::HealthCheckResponse::SERVING);
    std::thread([this] { Loop(); }).detach();
  }

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const health::HealthCheckRequest* req,
                                  health::HealthCheckResponse* resp) override {
    resp->set_status(health::HealthCheckResponse::SERVING);
    auto* r = ctx->DefaultReactor();
    if (req->service() != "set") {
      r->Finish(grpc::Status::OK);
    } else if (log_ == nullptr) {
      Arm();
      r->Finish(grpc::Status::OK);
    } else {
      log_->Add(RecordOf(*req), [this, r] {
        Arm();
        r->Finish(grpc::Status::OK);
      });
    }
    return r;
  }

  grpc::ServerWriteReactor<health::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext*,
      const health::HealthCheckRequest*) override {
    // (Never finished: the bench kills this process.)
    auto* w = new Watcher(this);
    {
      std::lock_guard lock(mu_);
      watcher_ = w;
    }
    WriteNext();
    return w;
  }

 private:
  class Watcher : public grpc::ServerWriteReactor<health::HealthCheckResponse> {
   public:
    explicit Watcher(CallbackTimers* owner) : owner_(owner) {}
    void OnWriteDone(bool ok) override {
      {
        std::lock_guard lock(owner_->mu_);
        owner_->writing_ = false;
      }
      if (ok) owner_->WriteNext();
    }
    void OnDone() override {}

   private:
    CallbackTimers* const owner_;
  };

  void Arm() {
    bool was_empty;
    {
      std::lock_guard lock(mu_);
      was_empty = timers_.empty();
      timers_.push_back(std::chrono::system_clock::now() + kAhead);
    }
    // (Due times only grow: the timer thread, waiting for the first, needs
    // waking only when there was none.)
    if (was_empty) cv_.notify_one();
  }

  // Starts the next event's write if one is due and none is under way.
  void WriteNext() {
    Watcher* w = nullptr;
    {
      std::lock_guard lock(mu_);
      if (watcher_ == nullptr || writing_ || due_ == 0) return;
      --due_;
      writing_ = true;
      w = watcher_;
    }
    w->StartWrite(&event_);
  }

  [[noreturn]] void Loop() {
    for (;;) {
      {
        std::unique_lock lock(mu_);
        if (timers_.empty()) {
          cv_.wait(lock);
          continue;
        }
        cv_.wait_until(lock, timers_.front());
        const auto now = std::chrono::system_clock::now();
        while (!timers_.empty() && timers_.front() <= now) {
          timers_.pop_front();
          ++due_;
        }
      }
      WriteNext();
    }
  }

  LogWriter* const log_;
  health::HealthCheckResponse event_;  // Every event's message.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::chrono::system_clock::time_point> timers_;  // Under mu_.
  Watcher* watcher_ = nullptr;                                // Under mu_.
  bool writing_ = false;                                      // Under mu_.
  int due_ = 0;  // Events due and not yet written; under mu_.
};

// Asks the queue for the next call; the AsyncCall is its tag.
void RequestCall(health::Health::AsyncService& svc,
                 grpc::ServerCompletionQueue* cq) {
  auto* c = new AsyncCall;
  svc.RequestCheck(&c->ctx, &c->req, &c->writer, cq, cq, c);
}

// Finishes a call taken from the queue; its completion deletes it.
void AnswerNow(AsyncCall* c) {
  c->answered = true;
  c->resp.set_status(health::HealthCheckResponse::SERVING);
  c->writer.Finish(c->resp, grpc::Status::OK, c);
}

// Completion-queue shapes that take each call and `answer` it (at once, or
// later from another thread), with `threads` threads polling the queue.
[[noreturn]] void ServeCalls(health::Health::AsyncService& svc,
                             grpc::ServerCompletionQueue* cq, int threads,
                             const std::function<void(AsyncCall*)>& answer) {
  auto request = [&] { RequestCall(svc, cq); };
  auto poll = [&] {
    void* tag;
    bool ok;
    while (cq->Next(&tag, &ok)) {
      auto* c = static_cast<AsyncCall*>(tag);
      if (c->answered || !ok) {
        delete c;
        continue;
      }
      request();
      answer(c);
    }
  };
  // As many calls requested as threads poll, so none waits for a request.
  std::vector<std::thread> more;
  for (int i = 1; i < threads; ++i) {
    request();
    more.emplace_back(poll);
  }
  request();
  poll();
  std::_Exit(0);
}

// cq1+log: one completion-queue thread takes every call that is ready, then
// appends and syncs them as one group and answers them, all on itself (the
// leader shape with no other thread).
[[noreturn]] void ServeLogged(health::Health::AsyncService& svc,
                              grpc::ServerCompletionQueue* cq, int fd) {
  RequestCall(svc, cq);
  std::vector<AsyncCall*> group;
  std::string bytes;
  for (;;) {
    void* tag;
    bool ok;
    // Waits for the first event; then takes what is ready without waiting.
    const auto got =
        group.empty()
            ? (cq->Next(&tag, &ok) ? grpc::CompletionQueue::GOT_EVENT
                                   : grpc::CompletionQueue::SHUTDOWN)
            : cq->AsyncNext(&tag, &ok, std::chrono::system_clock::now());
    if (got == grpc::CompletionQueue::SHUTDOWN) std::_Exit(0);
    if (got == grpc::CompletionQueue::GOT_EVENT) {
      auto* c = static_cast<AsyncCall*>(tag);
      if (c->answered || !ok) {
        delete c;
      } else {
        RequestCall(svc, cq);
        bytes += RecordOf(c->req);
        group.push_back(c);
      }
      continue;
    }
    AppendDurably(fd, bytes);
    for (auto* c : group) AnswerNow(c);
    group.clear();
    bytes.clear();
  }
}

}  // namespace

[[noreturn]] void Serve(const std::string& shape, int port_fd,
                        const char* log) {
  const int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  CallbackHealth callback;
  SyncHealth sync;
  health::Health::AsyncService async;
  std::unique_ptr<grpc::ServerCompletionQueue> cq;
  if (shape == "callback") b.RegisterService(&callback);
  if (shape == "sync") b.RegisterService(&sync);
  std::unique_ptr<LogWriter> writer;
  if (shape == "callback+log" || shape == "cq1+writer" ||
      shape == "timer-1+writer") {
    writer = std::make_unique<LogWriter>(fd);
  }
  LoggedCallbackHealth logged(writer.get());
  if (shape == "callback+log") b.RegisterService(&logged);
  std::unique_ptr<LogWriter> timer_log;
  if (shape == "timer-cb+log") timer_log = std::make_unique<LogWriter>(fd);
  std::unique_ptr<CallbackTimers> timers;
  if (shape.rfind("timer-cb", 0) == 0) {
    timers = std::make_unique<CallbackTimers>(timer_log.get());
    b.RegisterService(timers.get());
  }
  if (shape.rfind("async", 0) == 0 || shape.rfind("timer-1", 0) == 0 ||
      shape.rfind("cq1", 0) == 0 || shape.rfind("timer-2loop", 0) == 0) {
    b.RegisterService(&async);
    cq = b.AddCompletionQueue();
  }
  std::unique_ptr<grpc::ServerCompletionQueue> cq_second;
  if (shape.rfind("timer-2loop", 0) == 0) cq_second = b.AddCompletionQueue();
  // timer-1+cb-idle: timer-1 beside a service on the callback API that no
  // call reaches (as delayd's other methods would be, were only its timer
  // calls on the completion-queue API).
  delayd::v1::Delayd::CallbackService idle_callback;
  if (shape == "timer-1+cb-idle") b.RegisterService(&idle_callback);
  auto server = b.BuildAndStart();
  if (write(port_fd, &port, sizeof port) != sizeof port) std::_Exit(1);
  if (!cq) {
    server->Wait();
    std::_Exit(0);
  }
  if (shape == "timer-1" || shape == "timer-1+cb-idle") {
    ServeTimers(async, cq.get(), -1);
  }
  if (shape == "timer-2loop") {
    ServeLoops(async, cq.get(), cq_second.get(), /*hop_sets=*/false);
  }
  if (shape == "timer-2loop-hop") {
    ServeLoops(async, cq.get(), cq_second.get(), /*hop_sets=*/true);
  }
  if (shape == "timer-1+log") ServeTimers(async, cq.get(), fd);
  if (shape == "timer-1+writer") {
    // The writer finishes each set once synced; the finish's completion
    // comes back to the queue's thread.
    ServeTimers(async, cq.get(), -1, [&](AsyncCall* c) {
      writer->Add(RecordOf(c->req), [c] { AnswerServing(c); });
    });
  }
  if (shape == "timer-1+rocks" || shape == "timer-1+rocks-writer") {
    auto store = MakeRocksTimerStore(std::string(log) + ".rocks",
                                     shape == "timer-1+rocks-writer");
    ServeTimers(async, cq.get(), -1, nullptr, store.get());
  }
  if (shape == "timer-1+tt") ServePrecise(async, cq.get(), nullptr, -1);
  if (shape == "timer-1+tt+log") ServePrecise(async, cq.get(), nullptr, fd);
  if (shape == "timer-1+tt+rocks") {
    auto store = MakeRocksTimerStore(std::string(log) + ".rocks", false);
    ServePrecise(async, cq.get(), store.get(), -1);
  }
  if (shape == "cq1+log") ServeLogged(async, cq.get(), fd);
  if (shape == "cq1+writer") {
    // The writer answers each call once synced; the answer's completion
    // comes back to the queue's thread.
    ServeCalls(async, cq.get(), 1, [&](AsyncCall* c) {
      writer->Add(RecordOf(c->req), [c] { AnswerNow(c); });
    });
  }
  ServeCalls(async, cq.get(), shape == "async-2" ? 2 : 1, AnswerNow);
}

}  // namespace delayd::bench::floor
