// Figures the core keeps as it goes, daemon-wide and per namespace, read by
// the Stats call and the metrics endpoint (server/api/metrics_export.h).
//
// Relaxed atomics: each figure is exact on its own; figures read together
// may come from slightly different instants.
#ifndef DELAYD_SERVER_CORE_COUNTERS_H_
#define DELAYD_SERVER_CORE_COUNTERS_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace delayd {

// One namespace's figures. Gauges go up and down; totals only grow, from
// zero when the namespace is created (an id reused by a new namespace starts
// again from zero).
struct alignas(64) NamespaceCounters {
  // Gauges.
  std::atomic<std::uint64_t> pending{0};
  std::atomic<std::uint64_t> ready{0};
  std::atomic<std::uint64_t> in_flight{0};
  std::atomic<std::uint64_t> retrying{0};  // Failed, waiting to retry.
  std::atomic<std::uint64_t> dead_letters{0};
  std::atomic<std::uint64_t> workers{0};
  std::atomic<std::uint64_t> watchers{0};
  std::atomic<std::uint64_t> schedules{0};
  // Totals.
  std::atomic<std::uint64_t> set{0};
  std::atomic<std::uint64_t> moved{0};
  std::atomic<std::uint64_t> removed{0};
  std::atomic<std::uint64_t> expired{0};  // Fired at their time.
  std::atomic<std::uint64_t> drained{0};  // Fired by Drain.
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<std::uint64_t> redelivered{0};
  std::atomic<std::uint64_t> acked{0};
  // Schedules' runs: fired; fired for missed instants (catch-up); instants
  // dropped (catch-up, or a run that could not be set); skipped by the
  // overlap policy.
  std::atomic<std::uint64_t> runs{0};
  std::atomic<std::uint64_t> runs_caught_up{0};
  std::atomic<std::uint64_t> runs_dropped{0};
  std::atomic<std::uint64_t> runs_skipped{0};

  void ResetTotals() {
    for (auto* t :
         {&set, &moved, &removed, &expired, &drained, &delivered, &redelivered,
          &acked, &runs, &runs_caught_up, &runs_dropped, &runs_skipped}) {
      t->store(0, std::memory_order_relaxed);
    }
  }
};

// Daemon-wide figures, updated by partitions and dispatchers, and the
// figures of each namespace id.
struct Counters {
  explicit Counters(std::size_t namespaces)
      : by_namespace(new NamespaceCounters[namespaces]) {}

  NamespaceCounters& of(std::uint32_t ns) { return by_namespace[ns]; }

  std::atomic<std::uint64_t> pending{0};
  std::atomic<std::uint64_t> ready{0};
  std::atomic<std::uint64_t> in_flight{0};
  std::atomic<std::uint64_t> retrying{0};
  std::atomic<std::uint64_t> dead_letters{0};
  // Subscribers, those waiting for their namespace to be created included.
  std::atomic<std::uint64_t> workers{0};
  std::atomic<std::uint64_t> watchers{0};
  std::atomic<std::uint64_t> subscribers{0};
  std::atomic<std::uint64_t> set{0};
  std::atomic<std::uint64_t> fired{0};
  std::atomic<std::uint64_t> acked{0};
  std::atomic<std::uint64_t> redelivered{0};
  // Store reads or writes that failed (a damaged or full disk).
  std::atomic<std::uint64_t> store_errors{0};
  // Steps of the system's wall clock the scheduler acted on as they came.
  std::atomic<std::uint64_t> clock_steps{0};

 private:
  std::unique_ptr<NamespaceCounters[]> by_namespace;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_COUNTERS_H_
