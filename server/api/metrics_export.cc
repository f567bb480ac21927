#include "server/api/metrics_export.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <sstream>

namespace delayd {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(const char* name, const char* help, MetricType type) {
  return MetricFamily{name, help, type, {}};
}

void Add(MetricFamily& f, double value,
         std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

// The process's figures, as every Prometheus client library names them.
void AddProcess(std::vector<MetricFamily>& out) {
  std::ifstream stat_file("/proc/self/stat");
  const std::string stat((std::istreambuf_iterator<char>(stat_file)),
                         std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces), from field 3.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return;
  std::istringstream fields(stat.substr(close + 2));
  std::vector<std::string> f((std::istream_iterator<std::string>(fields)),
                             std::istream_iterator<std::string>());
  if (f.size() < 22) return;
  // f[i] is field i + 3 of proc(5).
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;
  const double threads = std::stod(f[17]);
  const double start_ticks = std::stod(f[19]);
  const double vsize = std::stod(f[20]);
  const double rss = std::stod(f[21]) * page;
  double boot_time = 0;
  std::ifstream proc_stat("/proc/stat");
  for (std::string line; std::getline(proc_stat, line);) {
    if (line.rfind("btime ", 0) == 0) boot_time = std::stod(line.substr(6));
  }
  double fds = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++fds;
    }
    closedir(d);
    --fds;  // The directory's own.
  }
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);

  auto gauge = [&](const char* name, const char* help, double v) {
    out.push_back(Family(name, help, MetricType::Gauge));
    Add(out.back(), v);
  };
  out.push_back(Family("process_cpu_seconds_total",
                       "User and system CPU time spent, in seconds.",
                       MetricType::Counter));
  Add(out.back(), cpu);
  gauge("process_resident_memory_bytes", "Resident memory size in bytes.", rss);
  gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", vsize);
  gauge("process_open_fds", "Open file descriptors.", fds);
  gauge("process_max_fds", "The most file descriptors the process may open.",
        static_cast<double>(limit.rlim_cur));
  gauge("process_threads", "Threads of the process.", threads);
  gauge("process_start_time_seconds",
        "Start time of the process since the Unix epoch, in seconds.",
        boot_time + start_ticks / ticks);
}

}  // namespace

std::vector<MetricFamily> ScrapedFigures::Collect() const {
  // Per namespace, in this order: gauges, then totals.
  struct Def {
    const char* name;
    const char* help;
    MetricType type;
    std::atomic<std::uint64_t> NamespaceCounters::*field;
    std::vector<ClientMetric::Label> labels;
  };
  const std::vector<Def> defs = {
      {"delayd_pending_timers",
       "Timers set and not yet fired.",
       MetricType::Gauge,
       &NamespaceCounters::pending,
       {}},
      {"delayd_ready_events",
       "Fired events waiting for a worker.",
       MetricType::Gauge,
       &NamespaceCounters::ready,
       {}},
      {"delayd_in_flight_events",
       "Events delivered to a worker and not yet acknowledged.",
       MetricType::Gauge,
       &NamespaceCounters::in_flight,
       {}},
      {"delayd_retrying_events",
       "Events whose delivery failed (Nack or ack timeout), waiting for "
       "their retry time.",
       MetricType::Gauge,
       &NamespaceCounters::retrying,
       {}},
      {"delayd_dead_letters",
       "Events whose last attempt failed, kept until requeued or purged.",
       MetricType::Gauge,
       &NamespaceCounters::dead_letters,
       {}},
      {"delayd_subscribers",
       "Subscribers, by mode.",
       MetricType::Gauge,
       &NamespaceCounters::workers,
       {{"mode", "worker"}}},
      {"delayd_subscribers",
       "",
       MetricType::Gauge,
       &NamespaceCounters::watchers,
       {{"mode", "watcher"}}},
      {"delayd_timers_set_total",
       "Timers set (new or replaced).",
       MetricType::Counter,
       &NamespaceCounters::set,
       {}},
      {"delayd_timers_moved_total",
       "Timers moved.",
       MetricType::Counter,
       &NamespaceCounters::moved,
       {}},
      {"delayd_timers_removed_total",
       "Timers removed.",
       MetricType::Counter,
       &NamespaceCounters::removed,
       {}},
      {"delayd_timers_fired_total",
       "Timers fired, by reason.",
       MetricType::Counter,
       &NamespaceCounters::expired,
       {{"reason", "expired"}}},
      {"delayd_timers_fired_total",
       "",
       MetricType::Counter,
       &NamespaceCounters::drained,
       {{"reason", "drained"}}},
      {"delayd_events_delivered_total",
       "Deliveries of events to workers (redeliveries included).",
       MetricType::Counter,
       &NamespaceCounters::delivered,
       {}},
      {"delayd_events_redelivered_total",
       "Events made ready again: their ack deadline passed or their worker "
       "left.",
       MetricType::Counter,
       &NamespaceCounters::redelivered,
       {}},
      {"delayd_events_acked_total",
       "Events acknowledged.",
       MetricType::Counter,
       &NamespaceCounters::acked,
       {}},
      {"delayd_schedules",
       "Recurring schedules.",
       MetricType::Gauge,
       &NamespaceCounters::schedules,
       {}},
      {"delayd_schedule_runs_total",
       "Runs of recurring schedules fired; caught_up: for instants missed "
       "while delayd was down (also counted as fired); dropped: missed "
       "instants catch-up left out; skipped_overlap: instants the overlap "
       "policy left out.",
       MetricType::Counter,
       &NamespaceCounters::runs,
       {{"kind", "fired"}}},
      {"delayd_schedule_runs_total",
       "",
       MetricType::Counter,
       &NamespaceCounters::runs_caught_up,
       {{"kind", "caught_up"}}},
      {"delayd_schedule_runs_total",
       "",
       MetricType::Counter,
       &NamespaceCounters::runs_dropped,
       {{"kind", "dropped"}}},
      {"delayd_schedule_runs_total",
       "",
       MetricType::Counter,
       &NamespaceCounters::runs_skipped,
       {{"kind", "skipped_overlap"}}},
  };
  std::vector<MetricFamily> out;
  std::vector<std::size_t> family_of(defs.size());
  for (std::size_t i = 0; i < defs.size(); ++i) {
    if (defs[i].help[0] == '\0') {  // A second series of the family above.
      family_of[i] = family_of[i - 1];
      continue;
    }
    family_of[i] = out.size();
    out.push_back(Family(defs[i].name, defs[i].help, defs[i].type));
  }
  std::vector<double> sums(defs.size(), 0.0);
  std::size_t namespaces = 0;
  double subscribed = 0;  // Subscribers of namespaces in use.
  scheduler_.ForEachNamespace(
      [&](const std::string& name, const NamespaceCounters& c) {
        ++namespaces;
        subscribed += static_cast<double>(c.workers.load() + c.watchers.load());
        for (std::size_t i = 0; i < defs.size(); ++i) {
          const double v = static_cast<double>(
              (c.*defs[i].field).load(std::memory_order_relaxed));
          if (!namespace_labels_) {
            sums[i] += v;
            continue;
          }
          auto labels = defs[i].labels;
          labels.push_back({"namespace", name});
          Add(out[family_of[i]], v, std::move(labels));
        }
      });
  if (!namespace_labels_) {
    for (std::size_t i = 0; i < defs.size(); ++i) {
      Add(out[family_of[i]], sums[i], defs[i].labels);
    }
  }

  Counters& c = scheduler_.counters();
  out.push_back(
      Family("delayd_namespaces", "Namespaces in use.", MetricType::Gauge));
  Add(out.back(), static_cast<double>(namespaces));
  out.push_back(Family("delayd_subscribers_waiting",
                       "Subscribers of namespaces that do not exist yet.",
                       MetricType::Gauge));
  // The daemon-wide counts include them; the namespaces' do not.
  Add(out.back(),
      std::max(0.0, static_cast<double>(c.workers.load() + c.watchers.load()) -
                        subscribed));
  out.push_back(Family("delayd_store_errors_total",
                       "Store reads or writes that failed.",
                       MetricType::Counter));
  Add(out.back(), static_cast<double>(c.store_errors.load()));
  out.push_back(Family("delayd_clock_steps_total",
                       "Steps of the system clock (set, not slewed) the "
                       "daemon re-derived its deadlines for.",
                       MetricType::Counter));
  Add(out.back(), static_cast<double>(c.clock_steps.load()));
  const DedupWindows& dedup = scheduler_.dedup_windows();
  out.push_back(Family("delayd_dedup_keys",
                       "Keys remembered for namespaces' dedup windows.",
                       MetricType::Gauge));
  Add(out.back(), static_cast<double>(dedup.entries.load()));
  out.push_back(Family("delayd_dedup_evicted_total",
                       "Keys let go before their dedup window ended, at "
                       "--max-dedup-keys.",
                       MetricType::Counter));
  Add(out.back(), static_cast<double>(dedup.evicted.load()));
  out.push_back(Family("delayd_durable",
                       "1 with a durable store, 0 with --in-memory.",
                       MetricType::Gauge));
  Add(out.back(), scheduler_.durable() ? 1 : 0);
  if (scheduler_.durable()) {
    for (const Store::Gauge& g : scheduler_.StoreGauges()) {
      out.push_back(Family(g.name.c_str(), g.help.c_str(), MetricType::Gauge));
      Add(out.back(), g.value);
    }
    out.push_back(Family(
        "delayd_store_busy_seconds",
        "How long the store's oldest running write, sync or payload read "
        "has run (0: none); health is NOT_SERVING past --store-stall-limit.",
        MetricType::Gauge));
    Add(out.back(),
        std::chrono::duration<double>(scheduler_.StoreBusy()).count());
  }
  AddProcess(out);
  return out;
}

Status MetricsEndpoint::Start(const std::string& listen, bool namespace_labels,
                              Scheduler& scheduler,
                              std::unique_ptr<MetricsEndpoint>* out) {
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  try {
    // One thread: a scrape is rare and cheap next to the daemon's work.
    e->exposer_ = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& ex) {
    return Status::InvalidArgument("--metrics-listen " + listen + ": " +
                                   ex.what());
  }
  const auto ports = e->exposer_->GetListeningPorts();
  if (ports.empty()) {
    return Status::InvalidArgument("--metrics-listen " + listen +
                                   ": could not listen");
  }
  e->port_ = ports.front();
  e->scraped_ = std::make_shared<ScrapedFigures>(scheduler, namespace_labels);
  e->exposer_->RegisterCollectable(scheduler.metrics().registry());
  e->exposer_->RegisterCollectable(e->scraped_);
  *out = std::move(e);
  return Status::Ok();
}

}  // namespace delayd
