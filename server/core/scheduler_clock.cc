// Scheduler: acting on changes of the clock (clock.h).
#include <cstdlib>

#include "server/core/scheduler.h"
#include "spdlog/spdlog.h"

namespace delayd {

void Scheduler::ClockChanged(std::function<void()> done) {
  bool rederive = false;
  {
    MutexLock lock(&clock_mu_);
    const std::chrono::nanoseconds offset = clock_.Offset();
    const std::chrono::nanoseconds moved = offset - derived_offset_;
    if (std::chrono::abs(moved) >= kClockSlack) {
      rederive = true;
      derived_offset_ = offset;
      spdlog::debug("clock offset moved by {} us: deadlines re-derived",
                    moved.count() / 1000);
    }
  }
  std::vector<Dispatcher*> dispatchers;
  {
    ReaderLock lock(&ns_mutex_);
    for (auto& d : owned_dispatchers_) dispatchers.push_back(d.get());
  }
  // Partitions first, then dispatchers: events a partition fires here are
  // posted to their dispatcher before its Wake() is (in memory; with a store
  // they are published once written).
  for (auto& p : partitions_) p->ClockChanged(rederive);
  auto left =
      std::make_shared<std::atomic<std::size_t>>(dispatchers.size() + 1);
  auto arrive = [left, done = std::move(done)] {
    if (left->fetch_sub(1) == 1 && done) done();
  };
  for (Dispatcher* d : dispatchers) d->Wake(arrive);
  arrive();
}

void Scheduler::PollClock() {
  if (shutting_down_) return;
  // (Also the dedup windows' purge: each poll deletes what has ended.)
  for (auto& p : partitions_) p->PurgeDedup();
  bool moved;
  {
    MutexLock lock(&clock_mu_);
    moved = std::chrono::abs(clock_.Offset() - derived_offset_) >= kClockSlack;
  }
  auto again = [this] {
    asio::post(clock_timer_->get_executor(), [this] {
      clock_timer_->expires_after(options_.clock_poll);
      clock_timer_->async_wait([this](const asio::error_code& ec) {
        if (!ec) PollClock();
      });
    });
  };
  if (moved) {
    ClockChanged(std::move(again));
  } else {
    again();
  }
}

}  // namespace delayd
