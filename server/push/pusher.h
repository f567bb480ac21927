// Push delivery: for each namespace whose policy has a push target, a
// subscriber of its dispatcher (a worker, to the dispatcher) whose events
// become HTTP requests to the target, and whose answers become Ack, Nack
// (with Retry-After) or Reject (a dead letter at once), as a gRPC worker's
// would. See the proto's PushTarget for what is sent and how answers are
// read.
//
// The HTTP client is libcurl's multi interface, on one thread of its own
// for every target: connections are kept and reused per host, TLS uses the
// system's CAs (or the target's), and every connection is vetted by the
// address rules on the address it is about to connect to (its
// CURLOPT_OPENSOCKETFUNCTION), so resolution and connection cannot be told
// apart by a name that changes between them. A target's requests at once
// are bounded by its max_in_flight (the dispatcher gives it no more); a
// body read is bounded (kBodyKept kept, kBodyRead read at most), so a
// target that never answers or answers without end holds its in-flight
// requests until their timeout, and nothing more; other targets and gRPC
// workers go on (nothing here waits on a target).
//
// Threads: Deliver runs on dispatcher strands and only queues (inbox_,
// under mu_); Test and HealthOf run on callers' threads (the inbox under
// mu_, the failure counts under health_mu_); everything else (curl, the
// sinks' subscriptions, the answers to the dispatchers) runs on the
// pusher's thread. Policy changes reach it
// as names, and the pusher reads the policy in force when it acts on one,
// so the last change wins whatever the order of the notices.
#ifndef DELAYD_SERVER_PUSH_PUSHER_H_
#define DELAYD_SERVER_PUSH_PUSHER_H_

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/common/mutex.h"
#include "server/core/scheduler.h"
#include "server/push/address_rules.h"
#include "server/push/push_job.h"
#include "server/push/push_metrics.h"
#include "server/push/push_options.h"

namespace delayd::push {

class Pusher {
 public:
  // Kept of a response's body, as the attempt's error.
  static constexpr std::size_t kBodyKept = 512;
  // Read of a body at most; past it the transfer is cut off and the
  // answer judged by its status.
  static constexpr std::size_t kBodyRead = 64 << 10;
  // The longest the thread waits for curl or Wake() (an hour).
  static constexpr int kIdleWaitMs = 3'600'000;

  Pusher(Scheduler& scheduler, PushOptions options);
  ~Pusher();
  Pusher(const Pusher&) = delete;
  Pusher& operator=(const Pusher&) = delete;

  // Starts the thread and a sink for each namespace with a target, and
  // follows policy changes from then on.
  void Start();
  // Stops delivering: requests in flight are cut off and every sink leaves
  // its dispatcher (its events are ready again, for the next start or a
  // worker). Before the scheduler stops. Idempotent.
  void Stop();

  // Sends one test request to `target`, or to namespace `ns`'s target if
  // it is empty: an event of key `key` with `payload`, webhook-id
  // "test-<n>", attempt 1 and reason "test". `done` gets the verdict and
  // the time it took, on the pusher's thread; FAILED_PRECONDITION if there
  // is no target, UNAVAILABLE if the pusher is stopping.
  using TestDone =
      std::function<void(Status, const Verdict&, std::chrono::nanoseconds)>;
  void Test(std::string ns, PushTarget target, std::string key,
            std::string payload, TestDone done);

  const PushOptions& options() const { return options_; }

  // A namespace's target's failures in a row (0 after a 2xx) and the last
  // error (any thread).
  struct Health {
    std::uint64_t failures_in_a_row = 0;
    std::string last_error;
  };
  Health HealthOf(const std::string& ns) const EXCLUDES(health_mu_);

 private:
  class Sink;
  // A job and the sink it is for (null: a test).
  struct Queued {
    std::shared_ptr<Sink> sink;
    std::unique_ptr<PushJob> job;
  };

  // On the pusher's thread.
  void Run();
  void Reconfigure(const std::string& name);
  void StartJob(Queued queued);
  void Finish(PushJob* job, int curl_code);
  void Answer(const std::shared_ptr<Sink>& sink, const PushJob& job,
              const Verdict& v);
  // Counts a request's outcome; pauses the namespace when its target asks
  // it to after so many failures in a row.
  void Count(const std::string& ns, const PushTarget& target, const Verdict& v);
  // Cuts off a sink's requests and takes it off its dispatcher.
  void Leave(const std::shared_ptr<Sink>& sink);
  void LeaveAll();
  void Wake();

  Scheduler& scheduler_;
  const PushOptions options_;
  PushMetrics metrics_;
  void* multi_ = nullptr;  // CURLM*, used on the pusher's thread only.
  std::thread thread_;
  std::atomic<std::uint64_t> next_test_{1};

  Mutex mu_;
  std::deque<Queued> inbox_ GUARDED_BY(mu_);
  std::vector<std::string> changed_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  bool started_ GUARDED_BY(mu_) = false;

  // Written on the pusher's thread (answers), read by Stats.
  mutable Mutex health_mu_;
  std::map<std::string, Health> health_ GUARDED_BY(health_mu_);

  // By namespace name; on the pusher's thread only.
  std::map<std::string, std::shared_ptr<Sink>> sinks_;
  // In the multi handle, with their sinks.
  std::map<PushJob*, std::shared_ptr<Sink>> jobs_;
};

}  // namespace delayd::push

#endif  // DELAYD_SERVER_PUSH_PUSHER_H_
