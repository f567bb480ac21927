// Recurring schedules: schedule next (PreviewSchedule).
#include <date/tz.h>
#include <google/protobuf/util/time_util.h>

#include <cstdio>
#include <memory>
#include <optional>

#include "client/commands.h"
#include "client/exit_codes.h"
#include "client/print.h"
#include "delayd/text/duration.h"

namespace delayctl {
namespace {

using google::protobuf::util::TimeUtil;

struct SpecArgs {
  std::string cron, every, tz, start, end, after;
  std::uint64_t max_runs = 0;
  std::uint32_t count = 10;
};

google::protobuf::Timestamp TimeFlag(const std::string& text,
                                     const char* flag) {
  google::protobuf::Timestamp t;
  if (!TimeUtil::FromString(text, &t)) {
    throw Exit{kUsage, std::string(flag) + ": not an RFC 3339 time: " + text};
  }
  return t;
}

v1::ScheduleSpec Spec(const SpecArgs& a) {
  if (a.cron.empty() == a.every.empty()) {
    throw Exit{kUsage, "give exactly one of --cron EXPR or --every DURATION"};
  }
  v1::ScheduleSpec spec;
  if (!a.cron.empty()) spec.set_cron(a.cron);
  if (!a.every.empty())
    *spec.mutable_every() = DurationFlag(a.every, "--every");
  spec.set_time_zone(a.tz);
  if (!a.start.empty())
    *spec.mutable_start_time() = TimeFlag(a.start, "--start");
  if (!a.end.empty()) *spec.mutable_end_time() = TimeFlag(a.end, "--end");
  spec.set_max_runs(a.max_runs);
  return spec;
}

// `t` as wall time in `zone` (empty: none), with its UTC offset.
std::string Local(const google::protobuf::Timestamp& t,
                  const std::string& zone) {
  if (zone.empty()) return "";
  try {
    const date::zoned_seconds z{
        zone, date::sys_seconds{std::chrono::seconds{t.seconds()}}};
    return date::format("%Y-%m-%d %H:%M:%S %Z (%Ez)", z);
  } catch (const std::exception&) {
    return "";  // a zone this machine's tz database lacks: UTC only
  }
}

int Next(Client& c, const Global& g, const SpecArgs& a) {
  v1::PreviewScheduleRequest req;
  req.set_namespace_(g.ns);
  *req.mutable_spec() = Spec(a);
  if (!a.after.empty()) *req.mutable_after() = TimeFlag(a.after, "--after");
  req.set_count(a.count);
  v1::PreviewScheduleResponse resp;
  Check(c.stub().PreviewSchedule(c.Context().get(), req, &resp));
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
    return kOk;
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"#", "instant (UTC)"});
  if (!a.tz.empty()) rows.back().push_back("local");
  int i = 0;
  for (const auto& t : resp.instants()) {
    rows.push_back({std::to_string(++i), Time(t)});
    if (!a.tz.empty()) rows.back().push_back(Local(t, a.tz));
  }
  PrintTable(rows);
  return kOk;
}

}  // namespace

void AddScheduleCommands(CLI::App& app, const Global& g, Commands& out) {
  auto* schedule = app.add_subcommand("schedule", "Recurring schedules");
  schedule->require_subcommand(1);
  auto a = std::make_shared<SpecArgs>();
  auto* next = schedule->add_subcommand(
      "next", "Show the next instants of a spec, creating nothing");
  next->add_option("--cron", a->cron,
                   "A cron expression: 5 fields, or 6 with seconds first");
  next->add_option("--every", a->every, "A fixed interval (like 30s, 1h)");
  next->add_option("--tz", a->tz, "IANA time zone of --cron (default UTC)");
  next->add_option("--start", a->start, "No instant before (RFC 3339)");
  next->add_option("--end", a->end, "No instant after (RFC 3339)");
  next->add_option("--max-runs", a->max_runs, "At most this many runs");
  next->add_option("--after", a->after, "From this time (default now)");
  next->add_option("-c,--count", a->count, "How many (at most 1000)")
      ->capture_default_str();
  out.push_back({next,
                 [a] { Spec(*a); },
                 {},
                 [&g, a](Client& c) { return Next(c, g, *a); }});
}

}  // namespace delayctl
