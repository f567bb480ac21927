// Push delivery's metrics, per namespace (its target): attempts by
// result, their duration, and requests in flight.
#ifndef DELAYD_SERVER_PUSH_PUSH_METRICS_H_
#define DELAYD_SERVER_PUSH_PUSH_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "server/common/metrics.h"

namespace delayd::push {

class PushMetrics {
 public:
  // One namespace's: owned by the registry's families (stable pointers).
  struct Target {
    prometheus::Counter* ok;           // 2xx: acknowledged.
    prometheus::Counter* failed;       // An answer that is retried.
    prometheus::Counter* rejected;     // An answer that makes a dead letter.
    prometheus::Counter* unreachable;  // No answer: refused, reset, timeout.
    prometheus::Histogram* duration;
    prometheus::Gauge* in_flight;
  };

  explicit PushMetrics(const std::shared_ptr<prometheus::Registry>& registry)
      : attempts_(prometheus::BuildCounter()
                      .Name("delayd_push_attempts_total")
                      .Help("Requests to push targets, by namespace and "
                            "result (ok, failed: retried, rejected: a dead "
                            "letter at once, unreachable: no answer)")
                      .Register(*registry)),
        duration_(prometheus::BuildHistogram()
                      .Name("delayd_push_duration_seconds")
                      .Help("Requests to push targets, start to answer")
                      .Register(*registry)),
        in_flight_(prometheus::BuildGauge()
                       .Name("delayd_push_in_flight")
                       .Help("Requests to push targets not yet answered")
                       .Register(*registry)) {}

  // (Add returns the existing metric for labels it has seen.)
  Target For(const std::string& ns) {
    auto counter = [&](const char* result) {
      return &attempts_.Add({{"namespace", ns}, {"result", result}});
    };
    return Target{counter("ok"),
                  counter("failed"),
                  counter("rejected"),
                  counter("unreachable"),
                  &duration_.Add({{"namespace", ns}}, LatencyBuckets()),
                  &in_flight_.Add({{"namespace", ns}})};
  }

 private:
  prometheus::Family<prometheus::Counter>& attempts_;
  prometheus::Family<prometheus::Histogram>& duration_;
  prometheus::Family<prometheus::Gauge>& in_flight_;
};

}  // namespace delayd::push

#endif  // DELAYD_SERVER_PUSH_PUSH_METRICS_H_
