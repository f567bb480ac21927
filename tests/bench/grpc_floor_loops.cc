// The timer shape on two event loops (grpc_floor_loops.h).
#include "tests/bench/grpc_floor_loops.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tests/bench/grpc_floor.h"
#include "tests/bench/grpc_floor_tags.h"

namespace delayd::bench::floor {
namespace {

namespace health = grpc::health::v1;
using Clock = std::chrono::system_clock;

// One thread polling one queue, with the timers it owns and a mailbox for
// work other threads hand it. Locking: mu_ guards the mailbox; the rest is
// the loop's thread's alone.
class Loop {
 public:
  explicit Loop(grpc::ServerCompletionQueue* cq) : cq_(cq) {}

  grpc::ServerCompletionQueue* cq() const { return cq_; }

  // From any thread: `f` runs on this loop. Only the first post into an
  // empty mailbox sets an alarm (a wake-up); later ones ride on it.
  void Post(std::function<void()> f) {
    bool wake;
    {
      std::lock_guard lock(mu_);
      mailbox_.push_back(std::move(f));
      wake = !wake_pending_;
      wake_pending_ = true;
    }
    if (!wake) return;
    RunSoon(cq_, [this] { RunMailbox(); });
  }

  // On this loop: a timer due at `at`.
  void Arm(Clock::time_point at) { timers_.insert(at); }

  // Runs completions, and `fired` for each timer as it comes due (the
  // queue's wait ends at the earliest), until the process is killed.
  [[noreturn]] void Run(const std::function<void()>& fired) {
    for (;;) {
      RunNext(cq_, timers_.empty() ? Clock::now() + std::chrono::seconds(1)
                                   : *timers_.begin());
      const auto now = Clock::now();
      while (!timers_.empty() && *timers_.begin() <= now) {
        timers_.erase(timers_.begin());
        fired();
      }
    }
  }

 private:
  void RunMailbox() {
    std::vector<std::function<void()>> run;
    {
      std::lock_guard lock(mu_);
      run.swap(mailbox_);
      wake_pending_ = false;
    }
    for (auto& f : run) f();
  }

  grpc::ServerCompletionQueue* const cq_;
  std::multiset<Clock::time_point> timers_;
  std::mutex mu_;
  std::vector<std::function<void()>> mailbox_;  // Under mu_.
  bool wake_pending_ = false;                   // Under mu_.
};

}  // namespace

[[noreturn]] void ServeLoops(health::Health::AsyncService& svc,
                             grpc::ServerCompletionQueue* cq0,
                             grpc::ServerCompletionQueue* cq1, bool hop_sets) {
  Loop loop0(cq0), loop1(cq1);
  Loop* loops[2] = {&loop0, &loop1};
  WatchStream watch(svc, cq0);  // Loop 0's.
  std::atomic<unsigned> sets{0};
  std::function<void(int)> request = [&](int i) {
    auto* c = new AsyncCall;
    Loop& here = *loops[i];
    svc.RequestCheck(&c->ctx, &c->req, &c->writer, here.cq(), here.cq(),
                     NewTag([&, c, i](bool ok) {
                       if (!ok) {
                         delete c;
                         return;
                       }
                       request(i);
                       if (c->req.service() == "set") {
                         const auto at = Clock::now() + kAhead;
                         const int owner =
                             hop_sets ? static_cast<int>(sets++ % 2) : i;
                         if (owner == i) {
                           loops[i]->Arm(at);
                         } else {
                           Loop& there = *loops[owner];
                           there.Post([&there, at] { there.Arm(at); });
                         }
                       }
                       c->resp.set_status(health::HealthCheckResponse::SERVING);
                       c->writer.Finish(c->resp, grpc::Status::OK,
                                        NewTag([c](bool) { delete c; }));
                     }));
  };
  request(0);
  request(1);
  auto write_event = [&watch] { watch.Fired(); };
  std::thread second([&] { loop1.Run([&] { loop0.Post(write_event); }); });
  loop0.Run(write_event);
}

}  // namespace delayd::bench::floor
