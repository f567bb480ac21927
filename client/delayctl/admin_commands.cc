// The daemon: stats (and --watch), backup, health, cluster.
#include <google/protobuf/util/time_util.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <memory>

#include "client/delayctl/commands.h"
#include "client/delayctl/exit_codes.h"
#include "client/delayctl/print.h"
#include "client/delayctl/signals.h"
#include "delayd/text/duration.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace delayctl {
namespace {

struct StatsArgs {
  bool watch = false;
  std::string interval = "2s";
  std::uint64_t count = 0;  // Refreshes before leaving (0: until a signal).
};

std::string N(std::uint64_t v) { return std::to_string(v); }

// The daemon-wide figures as NAME VALUE rows; with `rates` (the previous
// refresh and the seconds since), totals also show their rate per second.
void PrintDaemonFigures(const v1::StatsResponse& s,
                        const v1::StatsResponse* before, double seconds) {
  auto total = [&](const char* name, std::uint64_t now, std::uint64_t then) {
    std::vector<std::string> row = {name, N(now)};
    if (before != nullptr && seconds > 0 && now >= then) {
      char rate[48];
      std::snprintf(rate, sizeof rate, "%.1f/s",
                    static_cast<double>(now - then) / seconds);
      row.push_back(rate);
    }
    return row;
  };
  const v1::StatsResponse& b = before != nullptr ? *before : s;
  PrintTable({{"pending_timers", N(s.pending_timers())},
              {"ready_events", N(s.ready_events())},
              {"in_flight_events", N(s.in_flight_events())},
              {"retrying_events", N(s.retrying_events())},
              {"dead_letters", N(s.dead_letters())},
              {"workers", N(s.workers())},
              {"watchers", N(s.watchers())},
              {"partitions", N(s.partitions())},
              total("timers_set", s.timers_set(), b.timers_set()),
              total("timers_fired", s.timers_fired(), b.timers_fired()),
              total("events_acked", s.events_acked(), b.events_acked()),
              total("events_redelivered", s.events_redelivered(),
                    b.events_redelivered()),
              {"durable", s.durable() ? "yes" : "no"},
              {"store_errors", N(s.store_errors())},
              {"version", s.version()}});
}

void PrintNamespaces(const v1::StatsResponse& s) {
  std::vector<std::vector<std::string>> rows = {
      {"NAMESPACE", "PENDING", "READY", "IN_FLIGHT", "RETRYING", "DEAD",
       "WORKERS", "WATCHERS", "SET", "MOVED", "REMOVED", "EXPIRED", "DRAINED",
       "DELIVERED", "REDELIVERED", "ACKED"}};
  for (const auto& n : s.namespaces()) {
    rows.push_back({n.namespace_(), N(n.pending_timers()), N(n.ready_events()),
                    N(n.in_flight_events()), N(n.retrying_events()),
                    N(n.dead_letters()), N(n.workers()), N(n.watchers()),
                    N(n.timers_set()), N(n.timers_moved()),
                    N(n.timers_removed()), N(n.timers_expired()),
                    N(n.timers_drained()), N(n.events_delivered()),
                    N(n.events_redelivered()), N(n.events_acked())});
  }
  PrintTable(rows);
}

void PrintStats(bool json, bool daemon_wide, const v1::StatsResponse& s,
                const v1::StatsResponse* before, double seconds) {
  if (json) {
    std::printf("%s\n", Json(s).c_str());
  } else {
    if (daemon_wide) {
      PrintDaemonFigures(s, before, seconds);
      std::printf("\n");
    }
    PrintNamespaces(s);
  }
  std::fflush(stdout);
}

// Prints the figures once, or with --watch every --interval: in place on a
// terminal, one snapshot after another otherwise (one JSON line each with
// -o json). A failed refresh is shown and retried; the first must succeed.
int Stats(Client& c, const Global& g, const StatsArgs& a) {
  v1::StatsRequest req;
  req.set_namespace_(g.ns);
  const bool daemon_wide = g.ns.empty();
  const auto interval = *delayd::ParseDuration(a.interval);
  std::unique_ptr<SignalCanceller> signals;
  if (a.watch) signals = std::make_unique<SignalCanceller>();
  const bool in_place = a.watch && !c.json() && isatty(STDOUT_FILENO) == 1;
  v1::StatsResponse before;
  auto taken = std::chrono::steady_clock::now();
  for (std::uint64_t refresh = 0;; ++refresh) {
    v1::StatsResponse s;
    grpc::Status status = c.stub().Stats(c.Context().get(), req, &s);
    if (refresh == 0) Check(status);
    const auto now = std::chrono::steady_clock::now();
    if (in_place) std::printf("\033[H\033[2J");
    if (a.watch && !c.json()) {
      std::printf("%s every %s, %s\n\n", g.endpoint.c_str(), a.interval.c_str(),
                  google::protobuf::util::TimeUtil::ToString(
                      google::protobuf::util::TimeUtil::GetCurrentTime())
                      .c_str());
    }
    if (!status.ok()) {
      std::printf("%s: %s\n", CodeName(status.error_code()),
                  status.error_message().c_str());
      std::fflush(stdout);
    } else {
      PrintStats(c.json(), daemon_wide, s, refresh == 0 ? nullptr : &before,
                 std::chrono::duration<double>(now - taken).count());
      before = std::move(s);
      taken = now;
    }
    if (!a.watch || (a.count != 0 && refresh + 1 == a.count)) return kOk;
    if (!c.json() && !in_place) std::printf("\n");
    if (!signals->WaitFor(interval)) return kOk;
  }
}

int Backup(Client& c, const std::string& dir) {
  v1::BackupRequest req;
  req.set_dir(dir);
  v1::BackupResponse resp;
  Check(c.stub().Backup(c.Context().get(), req, &resp));
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
  } else {
    std::printf("backup written to %s\n", resp.dir().c_str());
  }
  return kOk;
}

int Health(Client& c, const std::string& service) {
  auto health = grpc::health::v1::Health::NewStub(c.channel());
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  Check(health->Check(c.Context().get(), req, &resp));
  const bool serving =
      resp.status() == grpc::health::v1::HealthCheckResponse::SERVING;
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
  } else {
    std::printf("%s\n", serving ? "SERVING" : "NOT_SERVING");
  }
  return serving ? kOk : kNotFound;
}

// "0-3,8,10-11": ascending numbers as ranges.
std::string Ranges(const google::protobuf::RepeatedField<std::uint32_t>& v) {
  std::string out;
  for (int i = 0; i < v.size();) {
    int j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(v[i]);
    if (j > i) out += "-" + std::to_string(v[j]);
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

int Cluster(Client& c) {
  v1::ClusterStatusRequest req;
  v1::ClusterStatusResponse resp;
  Check(c.stub().ClusterStatus(c.Context().get(), req, &resp));
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
    return kOk;
  }
  using google::protobuf::util::TimeUtil;
  const auto now = TimeUtil::GetCurrentTime();
  std::printf("%-20s %-28s %-8s %-5s %-10s %-9s %s\n", "NODE", "ADDRESS",
              "RELEASE", "LIVE", "HEARTBEAT", "OWNS", "PARTITIONS");
  for (const auto& n : resp.nodes()) {
    const double ago =
        TimeUtil::DurationToMilliseconds(now - n.heartbeat_time()) / 1000.0;
    char heartbeat[32];
    std::snprintf(heartbeat, sizeof heartbeat, "%.1fs ago", ago);
    std::printf("%-20s %-28s %-8s %-5s %-10s %-9d %s%s\n", n.node().c_str(),
                n.advertise().c_str(),
                n.release().empty() ? "0.1" : n.release().c_str(),
                n.live() ? "yes" : "no", heartbeat, n.partitions_size(),
                Ranges(n.partitions()).c_str(),
                n.node() == resp.node() ? "  (answered)" : "");
  }
  google::protobuf::RepeatedField<std::uint32_t> unowned;
  std::uint64_t low = UINT64_MAX, high = 0;
  for (const auto& p : resp.partitions()) {
    if (p.owner().empty()) unowned.Add(p.partition());
    low = std::min<std::uint64_t>(low, p.epoch());
    high = std::max<std::uint64_t>(high, p.epoch());
  }
  std::printf(
      "\n%d partitions, %d without an owner (%s); epochs %llu-%llu; "
      "lease term %s; cluster level %u\n",
      resp.partitions_size(), unowned.size(), Ranges(unowned).c_str(),
      static_cast<unsigned long long>(resp.partitions_size() ? low : 0),
      static_cast<unsigned long long>(high),
      TimeUtil::ToString(resp.lease_ttl()).c_str(), resp.cluster_level());
  return kOk;
}

}  // namespace

void AddAdminCommands(CLI::App& app, const Global& g, Commands& out) {
  auto st = std::make_shared<StatsArgs>();
  auto* stats = app.add_subcommand(
      "stats",
      "Show the daemon's figures and each namespace's (admin on *), or with "
      "-n one namespace's (read on it)");
  stats->add_flag("-w,--watch", st->watch, "Refresh until interrupted");
  stats->add_option("--interval", st->interval, "Refresh period for --watch")
      ->capture_default_str();
  stats->add_option("--count", st->count,
                    "With --watch: stop after this many refreshes (0: never)");
  out.push_back({stats,
                 [st] {
                   const auto d = delayd::ParseDuration(st->interval);
                   if (!d || d->count() <= 0) {
                     throw Exit{kUsage,
                                "--interval: not a positive duration: " +
                                    st->interval};
                   }
                 },
                 [st] { return st->watch; },
                 [&g, st](Client& c) { return Stats(c, g, *st); }});

  auto dir = std::make_shared<std::string>();
  auto* backup = app.add_subcommand(
      "backup",
      "Write a consistent copy of the store on the daemon's disk, in DIR "
      "under its --backup-dir");
  backup
      ->add_option("dir", *dir,
                   "New directory (relative to the daemon's --backup-dir)")
      ->required();
  out.push_back({backup, {}, {}, [dir](Client& c) { return Backup(c, *dir); }});

  auto* cluster = app.add_subcommand(
      "cluster",
      "A cluster node's view of its cluster: the nodes, their addresses and "
      "heartbeats, the partitions each owns, epochs (admin on *)");
  out.push_back({cluster, {}, {}, [](Client& c) { return Cluster(c); }});

  auto service = std::make_shared<std::string>();
  auto* health =
      app.add_subcommand("health", "Check health (0 serving, 4 not)");
  health->add_option("service", *service,
                     "Service: empty (the server), delayd.v1.Delayd, or "
                     "delayd.store (NOT_SERVING once the store failed)");
  out.push_back(
      {health, {}, {}, [service](Client& c) { return Health(c, *service); }});
}

}  // namespace delayctl
