// The floor under delayd's lateness figures on this machine: how late a
// thread wakes for a deadline, and how long a hand-over to another thread
// takes, with nothing else running.
//
//   timer_floor [--n N]
//
// 1. A timerfd in epoll, as Asio arms a partition's steady_timer on Linux.
// 2. An Asio steady_timer on an io_context, as a partition's.
// 2b. The same on a strand of an io_context two threads run, as delayd's.
// 3. A hand-over: one thread posts to an io_context another thread runs
//    (each hop between threads in the firing path costs this much).
// Timer slack is set to 1 µs first, as delayd does.
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kAhead = std::chrono::microseconds(500);

// The median and tail, and how many were over 1 ms late: this machine's
// own stalls, which bound any daemon's p99.9 and maximum lateness here.
void Print(const char* what, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  const auto over_1ms = us.end() - std::upper_bound(us.begin(), us.end(), 1e3);
  std::printf(
      "%-34s p50 %6.1f us  p99 %6.1f us  p99.9 %7.1f us  max %7.1f us  "
      "over 1 ms %td  (n=%zu)\n",
      what, us[us.size() / 2], us[us.size() * 99 / 100],
      us[us.size() * 999 / 1000], us.back(), over_1ms, us.size());
}

double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

std::vector<double> TimerfdInEpoll(int n) {
  const int fd = timerfd_create(CLOCK_MONOTONIC, 0);
  const int ep = epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  std::vector<double> late;
  for (int i = 0; i < n; ++i) {
    // steady_clock is CLOCK_MONOTONIC on Linux.
    const auto due = Clock::now() + kAhead;
    const auto ns = due.time_since_epoch().count();
    itimerspec its{};
    its.it_value.tv_sec = ns / 1'000'000'000;
    its.it_value.tv_nsec = ns % 1'000'000'000;
    timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, nullptr);
    epoll_event out;
    epoll_wait(ep, &out, 1, -1);
    late.push_back(Micros(Clock::now() - due));
    std::uint64_t expirations;
    if (read(fd, &expirations, sizeof expirations) < 0) std::abort();
  }
  close(ep);
  close(fd);
  return late;
}

// An Asio steady_timer, armed `n` times, on an io_context that `threads`
// threads run; on a strand of it if `on_strand` (as a partition's).
std::vector<double> AsioTimer(int n, int threads, bool on_strand) {
  asio::io_context io(threads);
  const asio::any_io_executor executor =
      on_strand ? asio::any_io_executor(asio::make_strand(io))
                : asio::any_io_executor(io.get_executor());
  asio::steady_timer timer(executor);
  std::vector<double> late;
  std::function<void()> arm = [&] {
    const auto due = Clock::now() + kAhead;
    timer.expires_at(due);
    timer.async_wait([&, due](const asio::error_code&) {
      late.push_back(Micros(Clock::now() - due));
      if (static_cast<int>(late.size()) < n) arm();
    });
  };
  asio::post(executor, arm);
  std::vector<std::thread> runners;
  for (int i = 1; i < threads; ++i) runners.emplace_back([&] { io.run(); });
  io.run();
  for (auto& t : runners) t.join();
  return late;
}

std::vector<double> HandOver(int n) {
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  std::thread runner([&] { io.run(); });
  std::vector<double> took;
  std::atomic<int> done{0};
  for (int i = 0; i < n; ++i) {
    // Spaced out, so that the runner is asleep each time, as between timers.
    std::this_thread::sleep_until(Clock::now() + kAhead);
    const auto sent = Clock::now();
    asio::post(io, [&, sent] {
      took.push_back(Micros(Clock::now() - sent));
      done.fetch_add(1, std::memory_order_release);
    });
    while (done.load(std::memory_order_acquire) <= i) {
    }
  }
  work.reset();
  runner.join();
  return took;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 4000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--n") == 0) n = std::atoi(argv[i + 1]);
  }
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  auto a = TimerfdInEpoll(n);
  Print("timerfd in epoll, woken late by", a);
  auto b = AsioTimer(n, 1, false);
  Print("asio steady_timer, woken late by", b);
  auto s2 = AsioTimer(n, 2, true);
  Print("... on a strand, 2 threads", s2);
  auto c = HandOver(n);
  Print("post to a sleeping thread, runs", c);
  return 0;
}
