// The daemon's calls on delayd's own threads (`--threading loop`): every
// method of delayd.v1.Delayd and grpc.health.v1.Health goes through one
// generic service, and each loop (a thread; `queues` of them, one by
// default) polls a completion queue of its own and runs the scheduler's
// io_context between its completions (Scheduler::Options::loop). gRPC gives
// each connection's calls to one queue while it has calls requested. With
// one loop, a call's handler, its timer's firing, its dispatcher's turns and
// its event's write to a worker's stream run on that thread (with several,
// on any of them), where gRPC's callback API hands each call from a gRPC
// thread to delayd's pool (tests/bench/README.md, "One loop on delayd's own
// core"). A loop also writes its calls, firings and acks to the store, as a
// pool thread does (Scheduler::WritesHere).
//
// A further thread, the relief ("delayd-relief"), looks every kReliefTick
// whether a loop has been held (one handler, or one poll of the io_context,
// running) for over kHeldUp: a write the disk holds up, say. While one is,
// the relief polls that loop's queue and runs the io_context in its place,
// so that what is in memory still goes out. Reactions of one call may then
// run on two threads at once, as the callback API allows (queue_call.h);
// the core is built for a pool, and the store lets one thread at a time
// write here and leaves the rest to its writer. Once a look finds every
// loop waiting with no turn since the last, the relief dozes until a
// loop's next turn wakes it (an idle daemon wakes nothing for it).
//
// Other threads reach the loops by posting to the io_context through the
// scheduler's LoopExecutors, which wake one loop, each in turn (Wake: a
// grpc::Alarm due at once completes on its queue); the wait's bound
// (kMaxWait) is a net that tests raise to a minute, and each of its
// wake-ups costs an idle daemon CPU.
//
// gRPC's reflection service is served by the loops too (loop_reflection.h:
// gRPC's own is a synchronous service, whose threads would poll beside
// them).
#ifndef DELAYD_SERVER_API_LOOP_SERVER_H_
#define DELAYD_SERVER_API_LOOP_SERVER_H_

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/api/queue_call.h"
#include "server/api/service.h"
#include "server/common/mutex.h"
#include "server/core/scheduler.h"

namespace delayd {

class HealthWatch;

class LoopServer final : private QueueOwner {
 public:
  // The longest the loop waits on the queue without polling the io_context
  // (a net: above).
  static constexpr std::chrono::milliseconds kMaxWait{1000};
  // Calls requested ahead of their arrival.
  static constexpr int kRequested = 16;
  // How often the relief looks, and how long a hold it relieves.
  static constexpr std::chrono::milliseconds kReliefTick{50};
  static constexpr std::chrono::milliseconds kHeldUp{50};

  explicit LoopServer(std::chrono::milliseconds max_wait = kMaxWait,
                      int queues = 1);
  LoopServer(const LoopServer&) = delete;
  LoopServer& operator=(const LoopServer&) = delete;
  ~LoopServer() { Stop(); }

  // Before the server is built: the generic service and the queue. Both
  // outlive the loop.
  void Register(grpc::ServerBuilder& builder, DelaydService* service,
                Scheduler* scheduler);
  // After the server started: takes calls on the loop's thread.
  void Start();
  // After the server's Shutdown: waits for every call to end (the server's
  // Shutdown has cancelled them; the loop runs their last completions), as
  // the callback API's Shutdown does, then shuts the queue down and ends the
  // loop and its relief (joins their threads). An operation started on a
  // call after its queue shut down would fail a gRPC assertion.
  void Stop() EXCLUDES(mu_);

  // From any thread: the loop polls the io_context soon. Does nothing
  // before Start or after Stop.
  void Wake() EXCLUDES(mu_);

  // The health service's status of `service` ("" is the server as a
  // whole), as grpc::HealthCheckServiceInterface::SetServingStatus.
  void SetServingStatus(const std::string& service, bool serving)
      EXCLUDES(health_mu_);
  // 1 (SERVING), 2 (NOT_SERVING) or 3 (SERVICE_UNKNOWN: never set).
  int ServingStatus(const std::string& service) const EXCLUDES(health_mu_);
  // A Watch stream: told each change of its service's status (on any
  // thread) until it leaves.
  void AddWatch(HealthWatch* watch) EXCLUDES(health_mu_);
  void RemoveWatch(HealthWatch* watch) EXCLUDES(health_mu_);

  // The calls each queue has taken so far, in the queues' order (for tests
  // and debugging: which loops serve).
  std::vector<std::uint64_t> CallsTaken() const;

  // The methods of delayd.v1.Delayd that the loop would answer as
  // unimplemented (none: checked by a test against the proto).
  static std::vector<std::string> Unserved();

 private:
  // QueueOwner (on the loop).
  void Taken(QueueCall* call) override EXCLUDES(mu_);
  void Ended() override EXCLUDES(mu_);
  // A completion queue and the loop that polls it. Made with the server;
  // `cq` set by Register, `thread` by Start.
  struct Queue {
    std::unique_ptr<grpc::ServerCompletionQueue> cq;
    std::thread thread;
    // When the loop last stopped waiting on the queue (steady_clock's
    // ticks), or 0 while it waits.
    std::atomic<std::int64_t> busy_since{0};
    // A wake-up is on the queue, not yet taken by a thread polling it.
    std::atomic<bool> wake_pending{false};
    // Calls taken from the queue.
    std::atomic<std::uint64_t> taken{0};
  };

  // Serves `call`, by its method.
  void Serve(QueueCall* call);
  // A loop's thread, and the relief's.
  void Run(Queue& q);
  void Relieve() EXCLUDES(relief_mu_);
  // One wait on `q` (at most `wait`) and its completion. `busy`: the
  // loop's own turn, which marks when it stops waiting. False once the
  // queue has shut down.
  bool Turn(Queue& q, std::chrono::milliseconds wait, bool busy);
  // Whether q's loop has been off the queue for over kHeldUp.
  static bool HeldUp(const Queue& q);
  // The first queue whose loop is held up, or null.
  Queue* Held() const;
  // Whether every loop waits on its queue.
  bool AllWaiting() const;

  const std::chrono::milliseconds max_wait_;
  DelaydService* service_ = nullptr;
  Scheduler* scheduler_ = nullptr;
  grpc::AsyncGenericService generic_;
  // Fixed in number from the constructor on.
  std::vector<std::unique_ptr<Queue>> queues_;
  // Which queue the next wake-up goes to (in turn).
  std::atomic<unsigned> next_wake_{0};
  std::thread relief_;
  // The loops' turns that took a completion, and whether the relief dozes
  // until the next: a Dekker pair, both sides seq_cst.
  std::atomic<std::uint64_t> turns_{0};
  std::atomic<bool> relief_dozing_{false};
  Mutex relief_mu_;
  bool relief_stopped_ GUARDED_BY(relief_mu_) = false;
  CondVar relief_wake_;
  // Whether the queue takes alarms (from Start to Stop), and the calls that
  // came and are not over.
  Mutex mu_;
  bool open_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  int calls_ GUARDED_BY(mu_) = 0;
  CondVar calls_ended_;

  mutable Mutex health_mu_;
  std::map<std::string, bool> serving_ GUARDED_BY(health_mu_);
  std::vector<HealthWatch*> watches_ GUARDED_BY(health_mu_);
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_LOOP_SERVER_H_
