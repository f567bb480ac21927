#include "server/common/metrics.h"

#include <prometheus/gauge.h>

#include <algorithm>
#include <cmath>

#include "delayd/text/build_info.h"

namespace delayd {

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
      0.25,   0.5,     1,      2.5,   5,      10,    30,   60,    300};
  return kBuckets;
}

void Observations::Add(double value) {
  // The first bound at or above the value, as prometheus::Histogram counts.
  const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  counts_[static_cast<std::size_t>(bucket - bounds_.begin())] += 1;
  sum_ += value;
  any_ = true;
}

void Observations::AddTo(prometheus::Histogram& h) {
  if (!any_) return;
  h.ObserveMultiple(counts_, sum_);
  std::fill(counts_.begin(), counts_.end(), 0.0);
  sum_ = 0;
  any_ = false;
}

Quantiles QuantilesOf(const prometheus::Histogram& h) {
  const prometheus::ClientMetric::Histogram hist = h.Collect().histogram;
  Quantiles q;
  q.count = hist.sample_count;
  if (q.count == 0 || hist.bucket.empty()) return q;
  auto at = [&](double quantile) {
    const double rank = quantile * static_cast<double>(q.count);
    double finite = 0;
    for (const auto& b : hist.bucket) {  // cumulative counts
      if (std::isfinite(b.upper_bound)) finite = b.upper_bound;
      if (static_cast<double>(b.cumulative_count) >= rank) return finite;
    }
    return finite;
  };
  q.p50 = at(0.5);
  q.p99 = at(0.99);
  return q;
}

namespace {
prometheus::Histogram* NewHistogram(
    prometheus::Registry& r, const char* name, const char* help,
    const prometheus::Histogram::BucketBoundaries& buckets) {
  return &prometheus::BuildHistogram().Name(name).Help(help).Register(r).Add(
      {}, buckets);
}
}  // namespace

Metrics::Metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  firing_lateness_ = NewHistogram(
      r, "delayd_firing_lateness_seconds",
      "From a timer's fire time to its event's hand-over for delivery.",
      LatencyBuckets());
  delivery_lateness_ = NewHistogram(
      r, "delayd_delivery_lateness_seconds",
      "From a timer's fire time to its event's first hand-over to a "
      "worker's stream.",
      LatencyBuckets());
  ack_latency_ = NewHistogram(r, "delayd_ack_latency_seconds",
                              "From an event's delivery to a worker to its "
                              "acknowledgement.",
                              LatencyBuckets());
  wal_sync_ = NewHistogram(r, "delayd_store_wal_sync_seconds",
                           "One sync of the store's write-ahead log.",
                           LatencyBuckets());
  wal_sync_group_ = NewHistogram(
      r, "delayd_store_wal_sync_group_writes",
      "Writes made durable by one sync of the write-ahead log (group "
      "commit).",
      {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096});
  write_stalls_ = &prometheus::BuildCounter()
                       .Name("delayd_store_write_stalls_total")
                       .Help(
                           "Times the store slowed or stopped writes "
                           "because compaction fell behind.")
                       .Register(r)
                       .Add({});
  // The usual shape of a build's identity (value 1, facts as labels).
  prometheus::BuildGauge()
      .Name("delayd_build_info")
      .Help("This daemon's version and the commit it was built from.")
      .Register(r)
      .Add({{"version", std::string(BuildVersion())},
            {"commit", std::string(BuildCommit())}})
      .Set(1);
}

}  // namespace delayd
