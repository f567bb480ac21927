// Timing wheel vs the usual alternatives, side by side in one process:
//   (a) std::priority_queue with lazy deletion,
//   (b) std::set keyed by (deadline, seq),
//   (c) one asio::steady_timer-style timer per job on an io_context (with a
//       settable clock, so that "advance" needs no real waiting).
// With N pending timers (deadlines uniform in [1 s, 1 h] at 1 ms ticks):
//   ScheduleCancel: schedule a timer and cancel it (a timeout that is set and
//                   then cleared: the commonest use of a timer);
//   Churn:          cancel a random pending timer and schedule a new one
//                   (memory-bound: each touches cold nodes);
//   Reschedule:     move a random pending timer to a new random deadline;
//   AdvanceAll:     fire all N by advancing through the hour in 1 ms steps.
// Prints a table of ratios (baseline time / wheel time) at the end, plus
// bytes of memory per pending timer for each structure. Repetitions of all
// cases run in a random interleaving (unless
// --benchmark_enable_random_interleaving=false is given), so that a slow
// spell of a shared machine falls on the wheel and its baselines alike, and
// each ratio takes each case's best repetition.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "wheel/timing_wheel.h"

namespace {

using delayd::wheel::TimingWheel;
using std::chrono::milliseconds;

constexpr std::uint64_t kMinDelayMs = 1000;
constexpr std::uint64_t kMaxDelayMs = 3'600'000;

struct Rng {
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  std::uint64_t Next() {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  }
  // Uniform in [kMinDelayMs, kMaxDelayMs) by multiply-shift range reduction
  // (a modulo would cost the harness a division per call).
  std::uint64_t Delay() {
    return kMinDelayMs +
           static_cast<std::uint64_t>((static_cast<unsigned __int128>(Next()) *
                                       (kMaxDelayMs - kMinDelayMs)) >>
                                      64);
  }
};

// Bytes malloc has handed out: from its arenas (uordblks) and as separate
// mappings (hblkhd: large blocks such as a big vector's array).
std::size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// ---- the structures under test, behind one small interface ----

// The interface adds no call of its own to any structure: each method is
// inlined into the benchmark loop, so the loop runs each structure's code as
// a direct user of it would.
#define BENCH_INLINE [[gnu::always_inline]] inline

class WheelImpl {
 public:
  using Handle = TimingWheel::Handle;
  static constexpr const char* kName = "wheel";
  WheelImpl() : wheel_(milliseconds(1)) {}
  BENCH_INLINE Handle Schedule(std::uint64_t ms, std::uint32_t id) {
    return wheel_.Schedule(milliseconds(ms), id);
  }
  BENCH_INLINE void Cancel(Handle h) { wheel_.Cancel(h); }
  BENCH_INLINE Handle Reschedule(Handle h, std::uint64_t ms) {
    wheel_.Reschedule(h, milliseconds(ms));
    return h;
  }
  BENCH_INLINE std::size_t AdvanceTo(std::uint64_t ms) {
    return wheel_.Advance(milliseconds(ms), [](const TimingWheel::Expired&) {});
  }
  std::size_t Bytes() const { return wheel_.MemoryUsage(); }

 private:
  TimingWheel wheel_;
};

class HeapImpl {
 public:
  using Handle = std::uint32_t;  // The timer id.
  static constexpr const char* kName = "priority_queue";
  BENCH_INLINE Handle Schedule(std::uint64_t ms, std::uint32_t id) {
    if (id >= live_.size()) live_.resize(id + 1, 0);
    live_[id] = ++seq_;
    heap_.push({ms, seq_, id});
    return id;
  }
  BENCH_INLINE void Cancel(Handle id) { live_[id] = 0; }
  BENCH_INLINE Handle Reschedule(Handle id, std::uint64_t ms) {
    return Schedule(ms, id);
  }
  BENCH_INLINE std::size_t AdvanceTo(std::uint64_t ms) {
    std::size_t fired = 0;
    while (!heap_.empty() && heap_.top().deadline <= ms) {
      const Entry e = heap_.top();
      heap_.pop();
      if (live_[e.id] == e.seq) {
        live_[e.id] = 0;
        ++fired;
      }
    }
    return fired;
  }

 private:
  struct Entry {
    std::uint64_t deadline;
    std::uint64_t seq;
    std::uint32_t id;
    bool operator>(const Entry& o) const {
      return deadline != o.deadline ? deadline > o.deadline : seq > o.seq;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap_;
  std::vector<std::uint64_t> live_;  // id -> seq of its live entry, 0 = none.
  std::uint64_t seq_ = 0;
};

class SetImpl {
 public:
  using Key = std::pair<std::uint64_t, std::uint64_t>;  // (deadline, seq)
  using Handle = std::set<Key>::iterator;
  static constexpr const char* kName = "std::set";
  BENCH_INLINE Handle Schedule(std::uint64_t ms, std::uint32_t) {
    return set_.emplace(ms, ++seq_).first;
  }
  BENCH_INLINE void Cancel(Handle h) { set_.erase(h); }
  BENCH_INLINE Handle Reschedule(Handle h, std::uint64_t ms) {
    set_.erase(h);
    return set_.emplace(ms, ++seq_).first;
  }
  BENCH_INLINE std::size_t AdvanceTo(std::uint64_t ms) {
    std::size_t fired = 0;
    while (!set_.empty() && set_.begin()->first <= ms) {
      set_.erase(set_.begin());
      ++fired;
    }
    return fired;
  }

 private:
  std::set<Key> set_;
  std::uint64_t seq_ = 0;
};

// A clock Asio's timer queue reads, set by the benchmark; its wait traits
// never let the reactor sleep, so run() only dispatches what is due.
struct FakeClock {
  using rep = std::int64_t;
  using period = std::milli;
  using duration = std::chrono::duration<rep, period>;
  using time_point = std::chrono::time_point<FakeClock>;
  static constexpr bool is_steady = true;
  static inline time_point current{};
  static time_point now() noexcept { return current; }
};
struct NoWaitTraits {
  static FakeClock::duration to_wait_duration(const FakeClock::duration&) {
    return FakeClock::duration::zero();
  }
  static FakeClock::duration to_wait_duration(const FakeClock::time_point&) {
    return FakeClock::duration::zero();
  }
};
using AsioTimer = asio::basic_waitable_timer<FakeClock, NoWaitTraits>;

class AsioImpl {
 public:
  using Handle = AsioTimer*;
  static constexpr const char* kName = "asio timer per job";
  AsioImpl() { FakeClock::current = FakeClock::time_point{}; }
  // Owns the timers of the handles it returned: Cancel() each before this
  // is destroyed.
  BENCH_INLINE Handle Schedule(std::uint64_t ms, std::uint32_t) {
    auto* timer = new AsioTimer(ctx_);
    timer->expires_at(FakeClock::time_point(milliseconds(ms)));
    timer->async_wait([this](const asio::error_code& ec) {
      if (!ec) ++fired_;
    });
    return timer;
  }
  BENCH_INLINE void Cancel(Handle h) {
    delete h;  // The destructor cancels the wait.
    if (++ops_ % 1024 == 0) Poll();
  }
  BENCH_INLINE Handle Reschedule(Handle h, std::uint64_t ms) {
    h->expires_at(FakeClock::time_point(milliseconds(ms)));  // Cancels.
    h->async_wait([this](const asio::error_code& ec) {
      if (!ec) ++fired_;
    });
    if (++ops_ % 1024 == 0) Poll();
    return h;
  }
  BENCH_INLINE std::size_t AdvanceTo(std::uint64_t ms) {
    FakeClock::current = FakeClock::time_point(milliseconds(ms));
    const std::size_t before = fired_;
    Poll();
    return fired_ - before;
  }

 private:
  void Poll() {
    ctx_.restart();
    ctx_.poll();
  }
  asio::io_context ctx_{1};
  std::size_t fired_ = 0;
  std::uint64_t ops_ = 0;
};

// ---- benchmarks ----

template <typename Impl>
struct Filled {
  std::unique_ptr<Impl> impl = std::make_unique<Impl>();
  std::vector<typename Impl::Handle> handles;
  Rng rng;
  std::size_t bytes_per_timer = 0;

  explicit Filled(std::size_t n) {
    handles.reserve(n);
    const std::size_t before = HeapInUse();
    for (std::uint32_t i = 0; i < n; ++i) {
      handles.push_back(impl->Schedule(rng.Delay(), i));
    }
    std::size_t bytes = HeapInUse() - before;
    bytes -= handles.capacity() * sizeof(handles[0]);
    if constexpr (requires(const Impl& x) { x.Bytes(); }) bytes = impl->Bytes();
    bytes_per_timer = bytes / n;
  }
  ~Filled() {
    if constexpr (std::is_same_v<Impl, AsioImpl>) {
      for (auto h : handles) impl->Cancel(h);
    }
  }
};

template <typename Impl>
void BM_ScheduleCancel(benchmark::State& state) {
  Filled<Impl> f(static_cast<std::size_t>(state.range(0)));
  const auto id = static_cast<std::uint32_t>(f.handles.size());
  for (auto _ : state) {
    f.impl->Cancel(f.impl->Schedule(f.rng.Delay(), id));
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["bytes_per_timer"] = static_cast<double>(f.bytes_per_timer);
}

template <typename Impl>
void BM_Churn(benchmark::State& state) {
  Filled<Impl> f(static_cast<std::size_t>(state.range(0)));
  std::uint32_t id = static_cast<std::uint32_t>(f.handles.size());
  for (auto _ : state) {
    const std::size_t k = f.rng.Next() % f.handles.size();
    f.impl->Cancel(f.handles[k]);
    f.handles[k] = f.impl->Schedule(f.rng.Delay(), id++);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["bytes_per_timer"] = static_cast<double>(f.bytes_per_timer);
}

template <typename Impl>
void BM_Reschedule(benchmark::State& state) {
  Filled<Impl> f(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    const std::size_t k = f.rng.Next() % f.handles.size();
    f.handles[k] = f.impl->Reschedule(f.handles[k], f.rng.Delay());
  }
  state.SetItemsProcessed(state.iterations());
}

template <typename Impl>
void BM_AdvanceAll(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::size_t fired = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto f = std::make_unique<Filled<Impl>>(n);
    state.ResumeTiming();
    for (std::uint64_t ms = 0; ms <= kMaxDelayMs; ++ms) {
      fired += f->impl->AdvanceTo(ms);
    }
    state.PauseTiming();
    f.reset();
    state.ResumeTiming();
  }
  if (fired != n * state.iterations()) state.SkipWithError("lost timers");
  state.SetItemsProcessed(static_cast<std::int64_t>(fired));
}

// Fixed iteration counts: each run fills N timers once (Google Benchmark's
// calibration would refill 10M timers several times per case).
void Sizes(benchmark::internal::Benchmark* b) {
  b->Arg(1'000'000)
      ->Arg(10'000'000)
      ->Iterations(2'000'000)
      ->Unit(benchmark::kNanosecond);
}

// Schedule + cancel runs for a few tens of milliseconds per case, short
// enough for one burst of interference to dominate: best of five.
BENCHMARK(BM_ScheduleCancel<WheelImpl>)->Apply(Sizes)->Repetitions(5);
BENCHMARK(BM_ScheduleCancel<HeapImpl>)->Apply(Sizes)->Repetitions(5);
BENCHMARK(BM_ScheduleCancel<SetImpl>)->Apply(Sizes)->Repetitions(5);
BENCHMARK(BM_ScheduleCancel<AsioImpl>)->Apply(Sizes)->Repetitions(5);
BENCHMARK(BM_Churn<WheelImpl>)->Apply(Sizes);
BENCHMARK(BM_Churn<HeapImpl>)->Apply(Sizes);
BENCHMARK(BM_Churn<SetImpl>)->Apply(Sizes);
BENCHMARK(BM_Churn<AsioImpl>)->Apply(Sizes);
BENCHMARK(BM_Reschedule<WheelImpl>)->Apply(Sizes);
BENCHMARK(BM_Reschedule<HeapImpl>)->Apply(Sizes);
BENCHMARK(BM_Reschedule<SetImpl>)->Apply(Sizes);
BENCHMARK(BM_Reschedule<AsioImpl>)->Apply(Sizes);
BENCHMARK(BM_AdvanceAll<WheelImpl>)
    ->Apply(Sizes)
    ->Iterations(1)
    ->Repetitions(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AdvanceAll<HeapImpl>)
    ->Apply(Sizes)
    ->Iterations(1)
    ->Repetitions(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AdvanceAll<SetImpl>)
    ->Apply(Sizes)
    ->Iterations(1)
    ->Repetitions(3)
    ->Unit(benchmark::kMillisecond);

// Collects each run's time per item so that ratios can be printed after.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred || r.iterations == 0) continue;
      if (r.run_type == Run::RT_Aggregate) continue;
      auto items = r.counters.find("items_per_second");
      if (items == r.counters.end()) continue;
      // "BM_X<Impl>/N/iterations:1" -> "BM_X<Impl>/N"
      std::string name = r.benchmark_name();
      name = name.substr(0, name.find("/iterations:"));
      // Repeated cases keep their best run: the machines are shared, and
      // interference only ever adds time.
      const double ns = 1e9 / items->second.value;
      auto [it, inserted] = ns_per_item_.emplace(name, ns);
      if (!inserted) it->second = std::min(it->second, ns);
      auto bytes = r.counters.find("bytes_per_timer");
      if (bytes != r.counters.end()) bytes_[name] = bytes->second.value;
    }
  }
  void PrintRatios() const {
    std::printf(
        "\nRatios: baseline time per item / wheel time per item "
        "(higher is better for the wheel)\n");
    std::printf("%-16s %9s %16s %10s %20s\n", "operation", "pending",
                "priority_queue", "std::set", "asio timer per job");
    for (const char* op :
         {"ScheduleCancel", "Churn", "Reschedule", "AdvanceAll"}) {
      for (const char* n : {"1000000", "10000000"}) {
        const std::string suffix = ">/" + std::string(n);
        const std::string base = "BM_" + std::string(op) + "<";
        auto wheel = ns_per_item_.find(base + "WheelImpl" + suffix);
        if (wheel == ns_per_item_.end()) continue;
        std::printf("%-16s %9s", op, n);
        int width[] = {16, 10, 20};
        int k = 0;
        for (const char* impl : {"HeapImpl", "SetImpl", "AsioImpl"}) {
          auto other = ns_per_item_.find(base + impl + suffix);
          if (other == ns_per_item_.end()) {
            std::printf(" %*s", width[k++], "-");
          } else {
            std::printf(" %*.1fx", width[k++] - 1,
                        other->second / wheel->second);
          }
        }
        std::printf("\n");
      }
    }
    std::printf("\nBytes per pending timer (heap growth while filling)\n");
    for (const auto& [name, bytes] : bytes_) {
      std::printf("  %-44s %6.1f\n", name.c_str(), bytes);
    }
  }

 private:
  std::map<std::string, double> ns_per_item_;
  std::map<std::string, double> bytes_;
};

}  // namespace

int main(int argc, char** argv) {
  // Interleaved repetitions by default; a flag given on the command line
  // comes later and wins.
  std::vector<char*> args(argv, argv + argc);
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  args.insert(args.begin() + 1, interleave.data());
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
