// The floor under delayd's CPU at moderate load: what a gRPC C++ server on
// this machine spends per unary call when calls come one at a time at a
// steady pace, with nothing to do but answer (grpc.health.v1 Check, an
// empty answer). Each server runs in a child process of its own, so its CPU
// (user + system, from /proc) is its alone; the client is this process,
// which runs itself again as `grpc_floor --serve SHAPE FD LOG` for each
// server (grpc_floor_serve.cc).
//
//   grpc_floor [--rate N] [--seconds N] [--rounds N] [--server-cpu N]
//              [--timer-only [--shapes A,B,...] | --durable | --waits]
//
// --server-cpu N: each server process runs on CPU N alone (all its threads
// share one core; run the client elsewhere with taskset), to tell a
// wake-up's cost on an idle core from its cost on the waker's.
//
// Shapes, each the way its API is meant to be used:
//   callback  the callback API (what delayd uses): the handler finishes the
//             call inline;
//   async-1   the completion-queue API with one thread that polls the queue
//             and answers each call on it (no hand-over at all);
//   async-2   the same with two threads on the queue;
//   sync      the synchronous API (gRPC's own thread pool).
// Each round also measures every shape's ceiling: Checks/s with 64 calls in
// flight over 4 connections (load_gen's health figure). Rounds alternate
// between the shapes; medians are printed, with the range.
//
// --timer-only: the timer shapes alone (timer-1: a "set" call, an event on
// a stream 2 ms later, an "ack" call; one completion-queue thread), server
// CPU per timer at --rate / 2 timers/s; timer-1+log, the same thread also
// appending and syncing each set's record before answering it (the floor
// under delayd's --fsync always); and the same two on the callback API with
// a timer thread, and a writer thread for the log (timer-cb, timer-cb+log:
// delayd's threads without its work); and timer-1+writer, one
// completion-queue thread whose sets a writer thread syncs and answers (the
// owning thread with its group commit handed off and back), in the same
// rounds; and timer-2loop, the same traffic on two completion-queue
// threads, one per core, each owning the timers it arms, the worker's
// stream on the first (an event the second fires is handed over to be
// written), and timer-2loop-hop, where besides every other set is armed by
// the other loop than the one its call came to (grpc_floor_loops.h); and
// timer-1+cb-idle, timer-1 in a server that also has a service on the
// callback API which no call reaches (gRPC's threads for that API then poll
// the same connections as the completion queue's thread); and
// timer-1+rocks, timer-1 writing each set, firing and ack to RocksDB as
// delayd's store does under --fsync 1s (the WAL unsynced), on the queue's
// thread, and timer-1+rocks-writer, the same writes made by a writer thread
// that answers the sets and acks once written (grpc_floor_store.h): the
// store's cost under one loop, with and without its thread; and
// timer-1+tt, timer-1 whose timers a timer thread keeps and hands to the
// loop as they come due (gRPC's own waits end up to a millisecond late:
// grpc_floor_precise.h), and timer-1+tt+rocks, the same writing to RocksDB
// as timer-1+rocks does, and timer-1+tt+log, the same appending a record
// for each set, ack and firing, handed over each turn of its loop to a
// thread that writes and syncs them and answers the calls, as delayd does
// under --fsync always (the floor under --fsync always that fires on
// time; its worker acks as load_gen's does, below). Each timer shape's
// lateness is printed too: an event's arrival at the worker minus its due
// time (not for the +log shapes, whose sets are answered after a sync).
// --shapes A,B,...: only these timer shapes (and timer-1, the ratios' base).
// --waits: how late gRPC's own waits (a grpc::Alarm, AsyncNext's deadline)
// end, 2,000 of each.
// --durable: the ceilings of shapes whose answers wait for an fdatasync'd
// log (callback+log, cq1+writer, cq1+log: grpc_floor_serve.cc) against the
// best of those that answer at once, in the same round.
#include "tests/bench/grpc_floor.h"

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/bench/bench_client.h"

namespace {

using delayd::bench::Bench;
using delayd::bench::CheckOnce;
using delayd::bench::Clock;
using delayd::bench::CpuSeconds;
using delayd::bench::floor::kAhead;
namespace health = grpc::health::v1;

// The file the servers' logged shapes append to.
std::string LogPath() {
  return std::filesystem::temp_directory_path() /
         ("grpc-floor-" + std::to_string(getpid()) + ".log");
}

// The CPU each server is pinned to (--server-cpu), or -1: where the
// scheduler puts it.
int g_server_cpu = -1;

// Starts `grpc_floor --serve SHAPE FD LOG` (a fresh process image: gRPC's
// threads in this one do not survive fork); returns its pid and port.
std::pair<pid_t, int> Spawn(const std::string& shape) {
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  const std::string log = LogPath();
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    if (g_server_cpu >= 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(g_server_cpu, &one);
      if (sched_setaffinity(0, sizeof one, &one) != 0) std::_Exit(126);
    }
    const std::string fd = std::to_string(fds[1]);
    execl("/proc/self/exe", "grpc_floor", "--serve", shape.c_str(), fd.c_str(),
          log.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  close(fds[1]);
  int port = 0;
  if (read(fds[0], &port, sizeof port) != sizeof port) {
    std::fprintf(stderr, "the %s server did not start\n", shape.c_str());
    std::exit(1);
  }
  close(fds[0]);
  return {child, port};
}

// Ends a child of Spawn and removes its log.
void Reap(pid_t child) {
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  std::filesystem::remove(LogPath());
}

std::unique_ptr<health::Health::Stub> StubAt(int port) {
  return health::Health::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
}

struct Figures {
  double us_per_call = -1;  // Server CPU at the steady pace.
  double peak = -1;         // Checks/s, 64 in flight.
};

// Server CPU in µs per call at `rate` calls/s (none if 0), one at a time,
// `seconds`; then the shape's ceiling for `seconds`.
Figures Round(const std::string& shape, int rate, int seconds) {
  const auto [child, port] = Spawn(shape);
  Figures f;
  {
    auto stub = StubAt(port);
    for (int i = 0; i < 200; ++i) CheckOnce(*stub);  // Warm-up.
    const long n = static_cast<long>(rate) * seconds;
    const double cpu = CpuSeconds(child);
    const auto start = Clock::now();
    long ok = 0;
    for (long i = 0; i < n; ++i) {
      std::this_thread::sleep_until(
          start + std::chrono::nanoseconds(1'000'000'000L / rate * i));
      ok += CheckOnce(*stub);
    }
    if (n > 0 && ok == n) f.us_per_call = 1e6 * (CpuSeconds(child) - cpu) / n;
    Bench bench("127.0.0.1:" + std::to_string(port), 4);
    f.peak = bench.HealthRate(64, std::chrono::seconds(seconds));
  }
  Reap(child);
  return f;
}

// A timer shape's figures in one round.
struct TimerFigures {
  double us_per_timer = -1;  // Server CPU.
  // Lateness, ms: an event's arrival at the worker minus its due time,
  // estimated as kAhead after the middle of its set's call (when the server
  // took it, give or take the call's asymmetry: tens of µs here). Events
  // come in the order of their sets, all kAhead after them.
  double late_p50 = -1, late_p99 = -1;
};

// Server CPU in µs per timer at `rate` timers/s for `seconds` on a timer
// shape (timer-1, timer-1+log, ...), and the events' lateness: this process
// sets ("set" Checks, one at a time, paced) and a worker thread
// acknowledges each event with an "ack" Check as it arrives (or, where an
// ack waits for a sync, an acker thread beside it, below).
TimerFigures TimerRound(const std::string& shape, int rate, int seconds) {
  const auto [child, port] = Spawn(shape);
  constexpr long kWarm = 10;
  const long n = static_cast<long>(rate) * seconds;
  TimerFigures f;
  {
    auto stub = StubAt(port);
    grpc::ClientContext watch_ctx;
    watch_ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(seconds + 20));
    health::HealthCheckRequest watch_req;
    auto reader = stub->Watch(&watch_ctx, watch_req);
    std::atomic<long> acked{0};
    // Each event's arrival (the worker's), each set's estimated due time
    // (the setter's); read once the worker has joined.
    std::vector<Clock::time_point> arrived(n + kWarm), due(n + kWarm);
    // Where an ack waits for a sync (timer-1+tt+log), the worker reads on
    // while an acker thread acknowledges, one "ack" call for the events
    // read while the last one was answered, as load_gen's worker does
    // against delayd; elsewhere it acknowledges each event before the next.
    const bool batched_acks = shape == "timer-1+tt+log";
    std::mutex ack_mu;
    std::condition_variable ack_cv;
    long to_ack = 0;      // Under ack_mu.
    bool reading = true;  // Under ack_mu.
    std::thread acker([&] {
      for (;;) {
        long count;
        {
          std::unique_lock lock(ack_mu);
          ack_cv.wait(lock, [&] { return to_ack > 0 || !reading; });
          if (to_ack == 0) return;
          count = std::exchange(to_ack, 0);
        }
        if (CheckOnce(*stub, "ack")) acked.fetch_add(count);
      }
    });
    std::thread worker([&] {
      health::HealthCheckResponse ev;
      long i = 0;
      while (i < n + kWarm && reader->Read(&ev)) {
        arrived[i++] = Clock::now();
        if (!batched_acks) {
          if (CheckOnce(*stub, "ack")) acked.fetch_add(1);
          continue;
        }
        {
          std::lock_guard lock(ack_mu);
          ++to_ack;
        }
        ack_cv.notify_one();
      }
      {
        std::lock_guard lock(ack_mu);
        reading = false;
      }
      ack_cv.notify_one();
    });
    // Polls for `count` acks, bounded by `limit`.
    auto await_acks = [&](long count, std::chrono::seconds limit) {
      const auto deadline = Clock::now() + limit;
      while (acked.load() < count && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    };
    auto set = [&](long i) {
      const auto sent = Clock::now();
      CheckOnce(*stub, "set");
      due[i] = sent + (Clock::now() - sent) / 2 + kAhead;
    };
    for (long i = 0; i < kWarm; ++i) set(i);  // Warm-up.
    await_acks(kWarm, std::chrono::seconds(5));
    const double cpu = CpuSeconds(child);
    const auto start = Clock::now();
    for (long i = 0; i < n; ++i) {
      std::this_thread::sleep_until(
          start + std::chrono::nanoseconds(1'000'000'000L / rate * i));
      set(kWarm + i);
    }
    await_acks(n + kWarm, std::chrono::seconds(10));
    const bool all = acked.load() == n + kWarm;
    if (all) {
      f.us_per_timer = 1e6 * (CpuSeconds(child) - cpu) / n;
    } else {
      std::fprintf(stderr, "timer round: %ld of %ld events acknowledged\n",
                   acked.load(), n + kWarm);
    }
    watch_ctx.TryCancel();
    worker.join();
    acker.join();
    reader->Finish();
    if (all) {
      std::vector<double> late;
      for (long i = kWarm; i < n + kWarm; ++i) {
        late.push_back(
            std::chrono::duration<double, std::milli>(arrived[i] - due[i])
                .count());
      }
      std::sort(late.begin(), late.end());
      f.late_p50 = late[late.size() / 2];
      f.late_p99 = late[late.size() * 99 / 100];
    }
  }
  Reap(child);
  return f;
}

void Print(const char* shape, std::vector<double> v, const char* unit,
           double scale) {
  std::sort(v.begin(), v.end());
  std::printf("  %-16s median %8.2f %s  (%.2f-%.2f)\n", shape,
              v[v.size() / 2] * scale, unit, v.front() * scale,
              v.back() * scale);
}

// How late gRPC's own waits end: `n` grpc::Alarms on a queue, then `n`
// AsyncNext deadlines, each 0.2-3.2 ms ahead; prints their lateness.
int Waits(int n) {
  grpc::CompletionQueue cq;
  std::mt19937 random(1);
  auto ahead = [&] {
    return std::chrono::system_clock::now() +
           std::chrono::microseconds(200 + random() % 3000);
  };
  auto late = [](std::chrono::system_clock::time_point due) {
    return std::chrono::duration<double, std::milli>(
               std::chrono::system_clock::now() - due)
        .count();
  };
  std::vector<double> alarm, next;
  void* tag;
  bool ok;
  for (int i = 0; i < n; ++i) {
    const auto due = ahead();
    grpc::Alarm a;
    a.Set(&cq, due, &a);
    cq.Next(&tag, &ok);
    alarm.push_back(late(due));
  }
  for (int i = 0; i < n; ++i) {
    const auto due = ahead();
    if (cq.AsyncNext(&tag, &ok, due) != grpc::CompletionQueue::TIMEOUT) {
      return 1;
    }
    next.push_back(late(due));
  }
  std::printf("how late gRPC's waits end, ms (%d each, 0.2-3.2 ms ahead):\n",
              n);
  for (const auto& [name, v] :
       {std::pair{"grpc::Alarm", &alarm}, std::pair{"AsyncNext", &next}}) {
    std::sort(v->begin(), v->end());
    std::printf("  %-12s p50 %.3f p99 %.3f max %.3f\n", name,
                (*v)[v->size() / 2], (*v)[v->size() * 99 / 100], v->back());
  }
  return 0;
}

// Ceilings of the two shapes that answer at once and of the two whose
// answers wait for a synced log, alternating; the ratio of each logged
// shape's ceiling to the best immediate one in the same round.
int Durable(int seconds, int rounds) {
  const std::vector<std::string> shapes = {
      "callback", "async-1", "callback+log", "cq1+writer", "cq1+log"};
  std::vector<std::vector<double>> peak(shapes.size()), ratio(shapes.size());
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t s = 0; s < shapes.size(); ++s) {
      peak[s].push_back(Round(shapes[s], 0, seconds).peak);
    }
    const double best = std::max(peak[0].back(), peak[1].back());
    for (std::size_t s = 2; s < shapes.size(); ++s) {
      ratio[s].push_back(peak[s].back() / best);
    }
  }
  std::printf("ceiling: Checks/s, 64 in flight over 4 connections:\n");
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    Print(shapes[s].c_str(), peak[s], "k/s", 1e-3);
  }
  std::printf("answers after a synced log / the best answering at once:\n");
  for (std::size_t s = 2; s < shapes.size(); ++s) {
    Print(shapes[s].c_str(), ratio[s], "x", 1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--serve") {
    delayd::bench::floor::Serve(argv[2], std::atoi(argv[3]), argv[4]);
  }
  int rate = 4000, seconds = 3, rounds = 3;
  bool timer_only = false, durable = false;
  std::string only;  // --shapes, with commas around: ",a,b,".
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rate" && i + 1 < argc) {
      rate = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--server-cpu" && i + 1 < argc) {
      g_server_cpu = std::max(0, std::atoi(argv[++i]));
    } else if (a == "--timer-only") {
      timer_only = true;
    } else if (a == "--shapes" && i + 1 < argc) {
      only = "," + std::string(argv[++i]) + ",";
    } else if (a == "--durable") {
      durable = true;
    } else if (a == "--waits") {
      return Waits(2000);
    } else {
      std::fprintf(stderr,
                   "usage: grpc_floor [--rate N] [--seconds N] [--rounds N] "
                   "[--server-cpu N] [--timer-only [--shapes A,B,...] | "
                   "--durable | --waits]\n");
      return 2;
    }
  }
  if (durable) return Durable(seconds, rounds);
  const std::vector<std::string> shapes = {"callback", "async-1", "async-2",
                                           "sync"};
  std::vector<std::vector<double>> us(shapes.size()), peak(shapes.size());
  std::vector<std::string> timer_shapes;
  for (const char* shape :
       {"timer-1", "timer-1+log", "timer-1+writer", "timer-cb", "timer-cb+log",
        "timer-2loop", "timer-2loop-hop", "timer-1+cb-idle", "timer-1+rocks",
        "timer-1+rocks-writer", "timer-1+tt", "timer-1+tt+rocks",
        "timer-1+tt+log"}) {
    if (only.empty() || timer_shapes.empty() ||
        only.find("," + std::string(shape) + ",") != std::string::npos) {
      timer_shapes.push_back(shape);
    }
  }
  std::vector<std::vector<double>> timer_us(timer_shapes.size()),
      late50(timer_shapes.size()), late99(timer_shapes.size());
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t s = 0; s < timer_shapes.size(); ++s) {
      const TimerFigures f = TimerRound(timer_shapes[s], rate / 2, seconds);
      timer_us[s].push_back(f.us_per_timer);
      late50[s].push_back(f.late_p50);
      late99[s].push_back(f.late_p99);
    }
    if (timer_only) continue;
    for (std::size_t s = 0; s < shapes.size(); ++s) {
      const Figures f = Round(shapes[s], rate, seconds);
      us[s].push_back(f.us_per_call);
      peak[s].push_back(f.peak);
    }
  }
  std::printf(
      "server CPU per timer at %d timers/s (set, event %lld ms later, ack; "
      "timer-1: one completion-queue thread; timer-cb: the callback API and "
      "a timer thread; +log: each set synced first; +writer: synced and "
      "answered by a writer thread; 2loop: two completion-queue threads, "
      "-hop: half the sets armed by the other; +cb-idle: timer-1 beside an "
      "idle callback service; +tt: timers kept by a timer thread):\n",
      rate / 2, static_cast<long long>(kAhead.count()));
  for (std::size_t s = 0; s < timer_shapes.size(); ++s) {
    Print(timer_shapes[s].c_str(), timer_us[s], "us", 1);
  }
  for (std::size_t s = 0; s < timer_shapes.size(); ++s) {
    std::vector<double> v = timer_us[s];
    std::sort(v.begin(), v.end());
    std::printf("  %-16s median %.3f cores; per round, against timer-1:",
                timer_shapes[s].c_str(), v[v.size() / 2] * (rate / 2) / 1e6);
    for (std::size_t r = 0; r < timer_us[s].size(); ++r) {
      std::printf(" %.2fx", timer_us[s][r] / timer_us[0][r]);
    }
    std::printf("\n");
  }
  std::printf(
      "lateness (an event's arrival minus its due time), ms; not for the "
      "+log shapes, whose sets are answered after a sync, so that the "
      "middle of the call is no estimate of when the timer was armed:\n");
  for (std::size_t s = 0; s < timer_shapes.size(); ++s) {
    const std::string& shape = timer_shapes[s];
    if (shape.find("+log") != std::string::npos) continue;
    std::printf("  %-16s p50", shape.c_str());
    for (double v : late50[s]) std::printf(" %.3f", v);
    std::printf("  p99");
    for (double v : late99[s]) std::printf(" %.3f", v);
    std::printf("\n");
  }
  if (timer_only) return 0;
  std::printf("server CPU per health Check at %d/s, one at a time:\n", rate);
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    Print(shapes[s].c_str(), us[s], "us", 1);
  }
  std::printf("ceiling: health Checks/s, 64 in flight over 4 connections:\n");
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    Print(shapes[s].c_str(), peak[s], "k/s", 1e-3);
  }
  return 0;
}
