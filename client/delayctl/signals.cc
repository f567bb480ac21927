#include "client/delayctl/signals.h"

#include <pthread.h>
#include <signal.h>

namespace delayctl {
namespace {

// SIGUSR1 is delayctl's own: the destructor sends it to end the waiting
// thread.
sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

}  // namespace

void BlockStopSignals() {
  sigset_t set = StopSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

SignalCanceller::SignalCanceller(grpc::ClientContext* ctx) {
  const sigset_t set = StopSignals();
  thread_ = std::thread([ctx, set, this] {
    int sig = 0;
    sigwait(&set, &sig);
    if (sig != SIGUSR1) {
      {
        std::lock_guard lock(mu_);
        interrupted_ = true;
      }
      cv_.notify_all();
      if (ctx != nullptr) ctx->TryCancel();
    }
  });
}

SignalCanceller::~SignalCanceller() {
  pthread_kill(thread_.native_handle(), SIGUSR1);
  thread_.join();
}

bool SignalCanceller::WaitFor(std::chrono::nanoseconds d) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, d, [this] { return interrupted_.load(); });
}

}  // namespace delayctl
