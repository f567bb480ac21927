// The timer shape with a timer thread that fires on time
// (grpc_floor_precise.h).
#include "tests/bench/grpc_floor_precise.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/bench/grpc_floor.h"
#include "tests/bench/grpc_floor_tags.h"

namespace delayd::bench::floor {
namespace {

namespace health = grpc::health::v1;
using Clock = std::chrono::system_clock;

// Due times kept off the loop. Locking: mu_ guards everything but cq_.
class TimerThread {
 public:
  explicit TimerThread(grpc::ServerCompletionQueue* cq) : cq_(cq) {
    std::thread([this] { Loop(); }).detach();
  }

  // From the loop: a timer due at `at` (due times only grow, so the thread,
  // waiting for the first, needs waking only when there was none).
  void Arm(Clock::time_point at) {
    bool was_empty;
    {
      std::lock_guard lock(mu_);
      was_empty = timers_.empty();
      timers_.push_back(at);
    }
    if (was_empty) cv_.notify_one();
  }

  // From the loop, when woken: how many timers came due since the last call.
  int TakeDue() {
    std::lock_guard lock(mu_);
    const int n = due_;
    due_ = 0;
    wake_pending_ = false;
    return n;
  }

  // Set by the loop: what runs there once timers come due.
  std::function<void()> on_due;

 private:
  [[noreturn]] void Loop() {
    for (;;) {
      bool wake = false;
      {
        std::unique_lock lock(mu_);
        if (timers_.empty()) {
          cv_.wait(lock);
          continue;
        }
        cv_.wait_until(lock, timers_.front());
        const auto now = Clock::now();
        while (!timers_.empty() && timers_.front() <= now) {
          timers_.pop_front();
          ++due_;
        }
        if (due_ > 0 && !wake_pending_) wake = wake_pending_ = true;
      }
      if (!wake) continue;
      RunSoon(cq_, [this] { on_due(); });
    }
  }

  grpc::ServerCompletionQueue* const cq_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Clock::time_point> timers_;  // Under mu_.
  int due_ = 0;                           // Under mu_.
  bool wake_pending_ = false;             // Under mu_.
};

}  // namespace

[[noreturn]] void ServePrecise(health::Health::AsyncService& svc,
                               grpc::ServerCompletionQueue* cq,
                               TimerStore* store, int log) {
  WatchStream watch(svc, cq);
  TimerThread timers(cq);
  // With a log: the records of this turn of the loop, the calls whose
  // answers wait for their sync, and the thread that writes and syncs.
  std::string records;
  std::vector<AsyncCall*> unsynced;
  std::unique_ptr<LogWriter> log_writer;
  if (log >= 0) log_writer = std::make_unique<LogWriter>(log);
  const std::string fired_record(64, 'f');
  timers.on_due = [&] {
    for (int n = timers.TakeDue(); n > 0; --n) {
      if (store != nullptr) store->Fire();
      if (log >= 0) records += fired_record;
      watch.Fired();
    }
  };
  std::function<void()> request_check = [&] {
    auto* c = new AsyncCall;
    svc.RequestCheck(&c->ctx, &c->req, &c->writer, cq, cq,
                     NewTag([&, c](bool ok) {
                       if (!ok) {
                         delete c;
                         return;
                       }
                       request_check();
                       const bool set = c->req.service() == "set";
                       if (set) timers.Arm(Clock::now() + kAhead);
                       if (log >= 0) {
                         records += RecordOf(c->req);
                         unsynced.push_back(c);
                         return;
                       }
                       if (store != nullptr &&
                           (set ? store->Set(c)
                                : c->req.service() == "ack" && store->Ack(c))) {
                         return;
                       }
                       AnswerServing(c);
                     }));
  };
  request_check();
  for (;;) {
    // Waits for the first completion; then takes what is ready without
    // waiting, and once nothing is, hands the records and the calls waiting
    // for them to the log's writer. (Firings' records wait for the next
    // call's turn: written with it, they need no hand-over of their own, as
    // delayd's firings are written by the thread that fires them.)
    const bool turn_open = !unsynced.empty();
    if (RunNext(cq, turn_open ? Clock::time_point()
                              : Clock::now() + std::chrono::hours(1))) {
      continue;
    }
    if (!turn_open) continue;
    log_writer->Add(records, [calls = std::move(unsynced)] {
      for (AsyncCall* c : calls) AnswerServing(c);
    });
    records.clear();
    unsynced.clear();
  }
}

}  // namespace delayd::bench::floor
