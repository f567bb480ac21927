// The metrics endpoint: serves, in Prometheus's text format over plain HTTP
// (prometheus-cpp's Exposer), the registry of server/common/metrics.h and
// figures read when scraped: per namespace (counters.h), daemon-wide, the
// store's and the process's.
//
// Namespace labels: one series per namespace in use, so at most
// --max-namespaces; with `namespace_labels` off, each family is one series
// holding the sum over namespaces.
#ifndef DELAYD_SERVER_API_METRICS_EXPORT_H_
#define DELAYD_SERVER_API_METRICS_EXPORT_H_

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <memory>
#include <string>

#include "server/common/status.h"
#include "server/core/scheduler.h"

namespace delayd {

// Figures read at each scrape. Thread safety: Collect may run on any thread.
class ScrapedFigures : public prometheus::Collectable {
 public:
  ScrapedFigures(Scheduler& scheduler, bool namespace_labels)
      : scheduler_(scheduler), namespace_labels_(namespace_labels) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  Scheduler& scheduler_;
  const bool namespace_labels_;
};

class MetricsEndpoint {
 public:
  // Listens on `listen` ("host:port"; port 0 picks one).
  static Status Start(const std::string& listen, bool namespace_labels,
                      Scheduler& scheduler,
                      std::unique_ptr<MetricsEndpoint>* out);
  // The bound port.
  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;
  std::shared_ptr<ScrapedFigures> scraped_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_METRICS_EXPORT_H_
