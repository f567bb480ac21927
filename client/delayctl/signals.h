// Ending a stream cleanly on SIGINT or SIGTERM (watch, work, stats --watch).
#ifndef DELAYD_CLIENT_DELAYCTL_SIGNALS_H_
#define DELAYD_CLIENT_DELAYCTL_SIGNALS_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace delayctl {

// Blocks the stop signals in this thread and every thread started after it;
// call before any thread exists (gRPC starts some with the first channel).
void BlockStopSignals();

// Takes SIGINT and SIGTERM (by sigwait, after BlockStopSignals) and then
// cancels `ctx`, if given, and wakes WaitFor.
class SignalCanceller {
 public:
  explicit SignalCanceller(grpc::ClientContext* ctx = nullptr);
  ~SignalCanceller();
  bool interrupted() const { return interrupted_; }
  // Waits up to `d`; returns false at once, or as soon as, a stop signal
  // arrived.
  bool WaitFor(std::chrono::nanoseconds d);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> interrupted_{false};
  std::thread thread_;
};

}  // namespace delayctl

#endif  // DELAYD_CLIENT_DELAYCTL_SIGNALS_H_
