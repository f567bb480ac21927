// Scheduler: acting on changes of the clock (clock.h).
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "server/core/scheduler.h"
#include "spdlog/spdlog.h"

namespace delayd {
namespace {

constexpr std::chrono::milliseconds kPollWithoutStepWatch{1000};

}  // namespace

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
  PurgeDedup();
  bool moved;
  {
    MutexLock lock(&clock_mu_);
    moved = std::chrono::abs(clock_.Offset() - derived_offset_) >= kClockSlack;
  }
  if (!moved) return ArmClockPoll();
  ClockChanged([this] {
    asio::post(clock_timer_->get_executor(), [this] { ArmClockPoll(); });
  });
}

void Scheduler::PurgeDedup() {
  // A purge takes a few thousand entries while it holds a partition's
  // mutex; while more wait, the next round is posted behind what queued
  // on the clock thread meanwhile, so the partitions serve between rounds.
  bool more = false;
  for (auto& p : partitions_) more = p->PurgeDedup() || more;
  if (more) {
    asio::post(clock_timer_->get_executor(), [this] {
      if (!shutting_down_) PurgeDedup();
    });
  }
}

void Scheduler::ArmClockPoll() {
  // Where the kernel cannot report steps (no step watch) the poll is how
  // they are found, so it runs at least once a second; with the watch it
  // is a net (scheduler.h, Options::clock_poll).
  const std::chrono::milliseconds poll =
      step_watch_ ? options_.clock_poll
                  : std::min(options_.clock_poll, kPollWithoutStepWatch);
  clock_timer_->expires_at(NextTick(poll));
  clock_timer_->async_wait([this](const asio::error_code& ec) {
    if (!ec) PollClock();
  });
}

namespace {

// Arms `fd` to report the next step of the system's wall clock: an absolute
// CLOCK_REALTIME timer ten years ahead with TFD_TIMER_CANCEL_ON_SET, whose
// read fails with ECANCELED once the clock is set (timerfd_create(2));
// arming it again clears that.
bool ArmForSteps(int fd) {
  itimerspec far{};
  far.it_value.tv_sec = std::time(nullptr) + 10LL * 365 * 24 * 3600;
  return timerfd_settime(fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &far,
                         nullptr) == 0;
}

}  // namespace

void Scheduler::WatchClockSteps() {
  // Polling alone finds a step only at the next poll, and each poll wakes
  // an idle daemon: the kernel's report costs nothing until a step.
  const int fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0 || !ArmForSteps(fd)) {
    spdlog::warn("steps of the system clock are found by polling only ({})",
                 std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return;
  }
  step_watch_.emplace(clock_timer_->get_executor(), fd);
}

void Scheduler::AwaitClockStep() {
  step_watch_->async_wait(
      asio::posix::descriptor_base::wait_read,
      [this](const asio::error_code& ec) {
        if (ec || shutting_down_) return;
        std::uint64_t expirations;
        const int fd = step_watch_->native_handle();
        const ssize_t n = ::read(fd, &expirations, sizeof expirations);
        const bool stepped = n < 0 && errno == ECANCELED;
        if ((stepped || n >= 0) && !ArmForSteps(fd)) {
          spdlog::warn(
              "steps of the system clock are found by polling only "
              "from now on ({})",
              std::strerror(errno));
          // (After this handler: the poll's next period is then at most
          // a second.)
          asio::post(clock_timer_->get_executor(),
                     [this] { step_watch_.reset(); });
          return;
        }
        if (!stepped) return AwaitClockStep();
        counters_.clock_steps.fetch_add(1, std::memory_order_relaxed);
        spdlog::info("the system clock was set: deadlines checked");
        ClockChanged([this] {
          asio::post(clock_timer_->get_executor(),
                     [this] { AwaitClockStep(); });
        });
      });
}

}  // namespace delayd
