// What the core measures as it goes, as Prometheus histograms and counters
// (prometheus-cpp) in one registry; the layers above add their own families
// to it, and the metrics endpoint serves it (server/api/metrics_export.h).
// Figures the core already keeps as atomics (counters.h) are not duplicated
// here: they are read when scraped.
//
// Thread safety: every method may be called from any thread.
#ifndef DELAYD_SERVER_COMMON_METRICS_H_
#define DELAYD_SERVER_COMMON_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace delayd {

// Bucket upper bounds, in seconds, for latencies from 0.1 ms to 5 min.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets();

// Observations gathered on one thread and added to a histogram at once:
// one lock of the histogram for a batch of events instead of one per event.
class Observations {
 public:
  explicit Observations(const prometheus::Histogram::BucketBoundaries& bounds)
      : bounds_(bounds), counts_(bounds.size() + 1, 0.0) {}
  void Add(double value);
  void Add(std::chrono::nanoseconds d) { Add(d.count() / 1e9); }
  // Adds what was gathered to `h` (built with the same bounds) and starts
  // again.
  void AddTo(prometheus::Histogram& h);

 private:
  const prometheus::Histogram::BucketBoundaries& bounds_;
  std::vector<double> counts_;
  double sum_ = 0;
  bool any_ = false;
};

// A histogram read as quantiles: each the upper bound of the bucket the
// quantile falls in (the largest finite bound if it falls beyond it), in
// seconds; zero while the histogram is empty.
struct Quantiles {
  std::uint64_t count = 0;
  double p50 = 0;
  double p99 = 0;
};
Quantiles QuantilesOf(const prometheus::Histogram& h);

class Metrics {
 public:
  Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  const std::shared_ptr<prometheus::Registry>& registry() const {
    return registry_;
  }

  // Fire time to the event's hand-over to its namespace's dispatcher.
  prometheus::Histogram& firing_lateness() { return *firing_lateness_; }
  // Fire time to the event's first hand-over to a worker's stream.
  prometheus::Histogram& delivery_lateness() { return *delivery_lateness_; }
  // A delivery to its acknowledgement.
  prometheus::Histogram& ack_latency() { return *ack_latency_; }
  // One sync of the write-ahead log, and the writes it made durable.
  prometheus::Histogram& wal_sync() { return *wal_sync_; }
  prometheus::Histogram& wal_sync_group() { return *wal_sync_group_; }
  // RocksDB stopped or slowed writes (its compaction fell behind).
  prometheus::Counter& write_stalls() { return *write_stalls_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* firing_lateness_;
  prometheus::Histogram* delivery_lateness_;
  prometheus::Histogram* ack_latency_;
  prometheus::Histogram* wal_sync_;
  prometheus::Histogram* wal_sync_group_;
  prometheus::Counter* write_stalls_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_METRICS_H_
