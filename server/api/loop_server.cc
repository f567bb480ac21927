#include "server/api/loop_server.h"

#include <grpcpp/alarm.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "server/api/loop_health.h"
#include "server/api/loop_reflection.h"
#include "server/api/work_stream.h"
#include "server/common/thread_name.h"
#include "server/core/loop_executor.h"

namespace delayd {
namespace {

constexpr std::string_view kPrefix = "/delayd.v1.Delayd/";

using Handler = grpc::ServerUnaryReactor* (
    DelaydService::*)(const CallIn&, const grpc::ByteBuffer*,
                      grpc::ByteBuffer*);

const std::unordered_map<std::string_view, Handler>& Handlers() {
#define DELAYD_HANDLER(X) {"/delayd.v1.Delayd/" #X, &DelaydService::Do##X},
  static const auto* table = new std::unordered_map<std::string_view, Handler>{
      DELAYD_UNARY_METHODS(DELAYD_HANDLER)};
#undef DELAYD_HANDLER
  return *table;
}

// A unary call: reads its request, runs its handler on the loop, and
// answers as the handler says (from any thread).
class UnaryOnQueue final : public QueueReactor {
 public:
  UnaryOnQueue(QueueCall* call, DelaydService& service, Handler handler)
      : QueueReactor(call), service_(service), handler_(handler) {
    StartRead(&in_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "no request came"));
      return;
    }
    // (The answer never comes before the handler's: OnDone waits for it.)
    (service_.*handler_)(
        CallIn(context(), [this](grpc::Status s) { Answer(std::move(s)); }),
        &in_, &out_);
  }
  void OnDone() override { delete this; }

 private:
  void Answer(grpc::Status s) {
    if (s.ok()) {
      StartWriteAndFinish(&out_, s);
    } else {
      Finish(s);
    }
  }

  DelaydService& service_;
  const Handler handler_;
  grpc::ByteBuffer in_, out_;
};

// A Subscribe: reads its request, then hands the call to its stream.
class SubscribeOnQueue final : public QueueReactor {
 public:
  SubscribeOnQueue(QueueCall* call, DelaydService& service,
                   Scheduler& scheduler)
      : QueueReactor(call), service_(service), scheduler_(scheduler) {
    StartRead(&in_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "no request came"));
      return;
    }
    StreamStart start;
    MethodMetrics& metrics = service_.subscribe_metrics();
    if (Status s = service_.OpenSubscribe(context(), &in_, &start); !s.ok()) {
      new QueueFailedStream(s, metrics, call());
    } else {
      new QueueSubscribeReactor(scheduler_, context(), std::move(start),
                                metrics, call());
    }
    delete this;  // (Handed over.)
  }
  void OnDone() override { delete this; }

 private:
  DelaydService& service_;
  Scheduler& scheduler_;
  grpc::ByteBuffer in_;
};

// A method nobody serves here.
class Unimplemented final : public QueueReactor {
 public:
  explicit Unimplemented(QueueCall* call) : QueueReactor(call) {
    Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "unknown method " + call->context().method()));
  }
  void OnDone() override { delete this; }
};

// A wake-up: an alarm due at once completes on the queue.
class WakeAlarm final : public LoopTag {
 public:
  explicit WakeAlarm(std::atomic<bool>* pending) : pending_(pending) {}
  void Set(grpc::CompletionQueue* cq) {
    QueueEdge::HandOver();
    alarm_.Set(cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), this);
  }
  void Done(bool) override {
    pending_->store(false, std::memory_order_release);
    delete this;
  }

 private:
  std::atomic<bool>* const pending_;
  grpc::Alarm alarm_;
};

}  // namespace

LoopServer::LoopServer(std::chrono::milliseconds max_wait, int queues)
    : max_wait_(max_wait) {
  for (int i = 0; i < std::max(queues, 1); ++i) {
    queues_.push_back(std::make_unique<Queue>());
  }
}

void LoopServer::Register(grpc::ServerBuilder& builder, DelaydService* service,
                          Scheduler* scheduler) {
  service_ = service;
  scheduler_ = scheduler;
  builder.RegisterAsyncGenericService(&generic_);
  for (auto& q : queues_) q->cq = builder.AddCompletionQueue();
}

void LoopServer::Start() {
  {
    MutexLock lock(&mu_);
    open_ = true;
  }
  for (auto& q : queues_) {
    for (int i = 0; i < kRequested; ++i) {
      QueueCall::Request(generic_, q->cq.get(), this);
    }
  }
  PrepareReflection();
  for (auto& q : queues_) {
    q->thread = std::thread([this, q = q.get()] { Run(*q); });
    NameThread(q->thread, "delayd-loop");
  }
  relief_ = std::thread([this] { Relieve(); });
  NameThread(relief_, "delayd-relief");
}

void LoopServer::Taken(QueueCall* call) {
  if (call == nullptr) return;  // (The server shuts down.)
  {
    MutexLock lock(&mu_);
    ++calls_;
  }
  for (auto& q : queues_) {
    if (q->cq.get() == call->queue()) {
      q->taken.fetch_add(1, std::memory_order_relaxed);
    }
  }
  QueueCall::Request(generic_, call->queue(), this);
  Serve(call);
}

std::vector<std::uint64_t> LoopServer::CallsTaken() const {
  std::vector<std::uint64_t> taken;
  for (const auto& q : queues_) {
    taken.push_back(q->taken.load(std::memory_order_relaxed));
  }
  return taken;
}

void LoopServer::Ended() {
  MutexLock lock(&mu_);
  if (--calls_ == 0) calls_ended_.SignalAll();
}

void LoopServer::Serve(QueueCall* call) {
  const std::string& method = call->context().method();
  if (auto it = Handlers().find(method); it != Handlers().end()) {
    new UnaryOnQueue(call, *service_, it->second);
  } else if (method == "/delayd.v1.Delayd/Subscribe") {
    new SubscribeOnQueue(call, *service_, *scheduler_);
  } else if (method == "/delayd.v1.Delayd/Work") {
    service_->WorkOnQueue(call);
  } else if (method == "/grpc.health.v1.Health/Check") {
    new HealthCheckOnQueue(call, *this);
  } else if (method == "/grpc.health.v1.Health/Watch") {
    new HealthWatchOnQueue(call, *this);
  } else if (method == kReflectionMethod) {
    new ReflectionOnQueue(call, ReflectedServices());
  } else {
    new Unimplemented(call);
  }
}

void LoopServer::Wake() {
  // (Any loop will do: each polls the io_context after a completion.)
  Queue& q = *queues_[queues_.size() == 1
                          ? 0
                          : next_wake_.fetch_add(1, std::memory_order_relaxed) %
                                queues_.size()];
  if (q.wake_pending.exchange(true, std::memory_order_acq_rel)) return;
  MutexLock lock(&mu_);
  if (!open_) {
    // (Before Start the loop's first poll runs it; after Stop nothing.)
    q.wake_pending.store(false, std::memory_order_release);
    return;
  }
  (new WakeAlarm(&q.wake_pending))->Set(q.cq.get());
}

void LoopServer::Run(Queue& q) {
  LoopWake::EnterLoop();
  asio::io_context& io = scheduler_->io();
  q.busy_since.store(
      std::chrono::steady_clock::now().time_since_epoch().count(),
      std::memory_order_relaxed);
  do {
    io.poll();
  } while (Turn(q, max_wait_, /*busy=*/true));
  // (What the queue's last completions posted.)
  io.poll();
}

bool LoopServer::Turn(Queue& q, std::chrono::milliseconds wait, bool busy) {
  if (busy) q.busy_since.store(0, std::memory_order_relaxed);
  void* tag;
  bool ok;
  const auto got =
      q.cq->AsyncNext(&tag, &ok, std::chrono::system_clock::now() + wait);
  if (busy) {
    q.busy_since.store(
        std::chrono::steady_clock::now().time_since_epoch().count(),
        std::memory_order_relaxed);
    // (A wait that timed out is no turn: the relief dozes through them.)
    if (got != grpc::CompletionQueue::TIMEOUT) {
      turns_.fetch_add(1);
      if (relief_dozing_.load() && relief_dozing_.exchange(false)) {
        MutexLock lock(&relief_mu_);
        relief_wake_.SignalAll();
      }
    }
  }
  if (got == grpc::CompletionQueue::SHUTDOWN) return false;
  if (got == grpc::CompletionQueue::GOT_EVENT) {
    QueueEdge::Completed();
    static_cast<LoopTag*>(tag)->Done(ok);
  }
  return true;
}

bool LoopServer::HeldUp(const Queue& q) {
  const std::int64_t since = q.busy_since.load(std::memory_order_relaxed);
  if (since == 0) return false;
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  return now - std::chrono::steady_clock::duration(since) > kHeldUp;
}

LoopServer::Queue* LoopServer::Held() const {
  for (const auto& q : queues_) {
    if (HeldUp(*q)) return q.get();
  }
  return nullptr;
}

bool LoopServer::AllWaiting() const {
  return std::all_of(queues_.begin(), queues_.end(),
                     [](const auto& q) { return q->busy_since.load() == 0; });
}

void LoopServer::Relieve() {
  asio::io_context& io = scheduler_->io();
  std::uint64_t seen = turns_.load();
  MutexLock lock(&relief_mu_);
  while (!relief_stopped_) {
    if (relief_dozing_.load()) {
      relief_wake_.Wait(&relief_mu_);
    } else {
      relief_wake_.WaitUntil(&relief_mu_,
                             std::chrono::steady_clock::now() + kReliefTick);
    }
    if (relief_stopped_) break;
    Queue* held = Held();
    if (held == nullptr) {
      // Idle since the last look: doze, unless a turn came meanwhile (the
      // loop, seeing the flag, wakes this thread; relief_mu_ is held until
      // the wait, so that wake-up is not lost).
      const std::uint64_t turns = turns_.load();
      if (turns == seen && AllWaiting()) {
        relief_dozing_.store(true);
        if (turns_.load() != turns) relief_dozing_.store(false);
      }
      seen = turns;
      continue;
    }
    MutexUnlock unlocked(&relief_mu_);
    // Short waits: the loop, once back, takes over again.
    bool open = true;
    while (open && HeldUp(*held)) {
      io.poll();
      open = Turn(*held, std::chrono::milliseconds(10), /*busy=*/false);
    }
    // (A wake-up taken here may have been for work posted since the last
    // poll: the loop, back on the queue, would not see that work.)
    io.poll();
  }
}

void LoopServer::Stop() {
  const bool started = queues_.front()->thread.joinable();
  {
    MutexLock lock(&mu_);
    if (stopped_ || queues_.front()->cq == nullptr) return;
    stopped_ = true;
    if (started) {
      while (calls_ > 0) calls_ended_.Wait(&mu_);
    }
    open_ = false;
    for (auto& q : queues_) q->cq->Shutdown();
  }
  if (started) {
    for (auto& q : queues_) q->thread.join();
    {
      MutexLock lock(&relief_mu_);
      relief_stopped_ = true;
      relief_wake_.SignalAll();
    }
    relief_.join();
    return;
  }
  // Never started: the queues are drained here.
  for (auto& q : queues_) {
    void* tag;
    bool ok;
    while (q->cq->Next(&tag, &ok)) {
      QueueEdge::Completed();
      static_cast<LoopTag*>(tag)->Done(ok);
    }
  }
}

void LoopServer::SetServingStatus(const std::string& service, bool serving) {
  MutexLock lock(&health_mu_);
  serving_[service] = serving;
  for (HealthWatch* watch : watches_) {
    if (watch->service() == service) watch->Changed(serving ? 1 : 2);
  }
}

int LoopServer::ServingStatus(const std::string& service) const {
  MutexLock lock(&health_mu_);
  const auto it = serving_.find(service);
  if (it == serving_.end()) return 3;
  return it->second ? 1 : 2;
}

void LoopServer::AddWatch(HealthWatch* watch) {
  MutexLock lock(&health_mu_);
  watches_.push_back(watch);
  const auto it = serving_.find(watch->service());
  watch->Changed(it == serving_.end() ? 3 : it->second ? 1 : 2);
}

void LoopServer::RemoveWatch(HealthWatch* watch) {
  MutexLock lock(&health_mu_);
  std::erase(watches_, watch);
}

std::vector<std::string> LoopServer::Unserved() {
  std::vector<std::string> unserved;
  const auto* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          "delayd.v1.Delayd");
  for (int i = 0; i < service->method_count(); ++i) {
    const std::string& name = service->method(i)->name();
    const std::string path = std::string(kPrefix) + name;
    if (Handlers().count(path) == 0 && name != "Subscribe" && name != "Work") {
      unserved.push_back(name);
    }
  }
  return unserved;
}

}  // namespace delayd
