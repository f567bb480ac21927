// Recurring schedules: schedule set, get, ls, rm, pause, resume, trigger,
// next.
#include <date/tz.h>
#include <google/protobuf/util/time_util.h>

#include <cstdio>
#include <memory>
#include <optional>

#include "client/delayctl/commands.h"
#include "client/delayctl/exit_codes.h"
#include "client/delayctl/print.h"
#include "delayd/text/duration.h"
#include "delayd/text/zone.h"

namespace delayctl {
namespace {

using google::protobuf::util::TimeUtil;

struct SpecArgs {
  std::string cron, every, tz, start, end, after;
  std::uint64_t max_runs = 0;
  std::uint32_t count = 10;
  // set, get, rm
  std::string key, payload, catch_up = "latest", overlap = "allow", jitter;
  std::uint32_t catch_up_limit = 0;
  bool if_absent = false;
  std::uint64_t version = 0;
  // ls
  std::string prefix;
};

v1::CatchUp CatchUpFlag(const std::string& v) {
  if (v == "latest") return v1::CATCH_UP_LATEST;
  if (v == "none") return v1::CATCH_UP_NONE;
  if (v == "all") return v1::CATCH_UP_ALL;
  throw Exit{kUsage, "--catch-up: latest, none or all, not " + v};
}

v1::Overlap OverlapFlag(const std::string& v) {
  if (v == "allow") return v1::OVERLAP_ALLOW;
  if (v == "skip") return v1::OVERLAP_SKIP;
  if (v == "buffer-one") return v1::OVERLAP_BUFFER_ONE;
  throw Exit{kUsage, "--overlap: allow, skip or buffer-one, not " + v};
}

std::string OverlapName(v1::Overlap o) {
  return o == v1::OVERLAP_SKIP         ? "skip"
         : o == v1::OVERLAP_BUFFER_ONE ? "buffer-one"
                                       : "allow";
}

std::string CatchUpName(v1::CatchUp c) {
  return c == v1::CATCH_UP_NONE  ? "none"
         : c == v1::CATCH_UP_ALL ? "all"
                                 : "latest";
}

// One schedule: its spec in words, runs, last and next instant.
std::vector<std::string> Row(const v1::Schedule& s) {
  const v1::ScheduleSpec& spec = s.spec();
  std::string when =
      spec.has_every()
          ? "every " + TimeUtil::ToString(spec.every())
          : spec.cron() + (spec.time_zone().empty() || spec.time_zone() == "UTC"
                               ? ""
                               : " " + spec.time_zone());
  return {s.key(),
          std::to_string(s.version()),
          when,
          std::to_string(s.runs()),
          s.has_last_instant() ? Time(s.last_instant()) : "-",
          s.paused()             ? "paused"
          : s.has_next_instant() ? Time(s.next_instant())
                                 : "ended",
          Shown(s.payload())};
}

const std::vector<std::string> kHeader = {"KEY",  "VERSION", "WHEN",   "RUNS",
                                          "LAST", "NEXT",    "PAYLOAD"};

void PrintSchedule(bool json, const v1::Schedule& s) {
  if (json) {
    std::printf("%s\n", Json(s).c_str());
  } else {
    PrintTable({kHeader, Row(s)});
  }
}

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
  std::string error;
  const delayd::Zone* z = delayd::Zone::Find(zone, &error);
  if (z == nullptr) return "";  // A zone this machine lacks: UTC only.
  const date::sys_seconds at{std::chrono::seconds{t.seconds()}};
  const date::sys_info info = z->Info(at);
  const auto east = std::chrono::abs(info.offset);
  char offset[16];
  std::snprintf(offset, sizeof offset, " (%c%02d:%02d)",
                info.offset < std::chrono::seconds{0} ? '-' : '+',
                static_cast<int>(east.count() / 3600),
                static_cast<int>(east.count() / 60 % 60));
  return date::format("%Y-%m-%d %H:%M:%S ", z->ToLocal(at)) + info.abbrev +
         offset;
}

int Set(Client& c, const Global& g, const SpecArgs& a) {
  v1::SetScheduleRequest req;
  req.set_namespace_(g.ns);
  req.set_key(a.key);
  *req.mutable_spec() = Spec(a);
  req.set_payload(ReadPayload(a.payload));
  req.set_if_absent(a.if_absent);
  req.set_expected_version(a.version);
  req.set_catch_up(CatchUpFlag(a.catch_up));
  req.set_catch_up_limit(a.catch_up_limit);
  req.set_overlap(OverlapFlag(a.overlap));
  if (!a.jitter.empty())
    *req.mutable_jitter() = DurationFlag(a.jitter, "--jitter");
  v1::Schedule s;
  Check(c.stub().SetSchedule(c.Context().get(), req, &s));
  PrintSchedule(c.json(), s);
  return kOk;
}

int Get(Client& c, const Global& g, const SpecArgs& a) {
  v1::GetScheduleRequest req;
  req.set_namespace_(g.ns);
  req.set_key(a.key);
  v1::Schedule s;
  Check(c.stub().GetSchedule(c.Context().get(), req, &s));
  if (c.json()) {
    PrintSchedule(true, s);
    return kOk;
  }
  PrintSchedule(false, s);
  std::printf("catch-up %s (limit %u), overlap %s, jitter %s\n",
              CatchUpName(s.catch_up()).c_str(), s.catch_up_limit(),
              OverlapName(s.overlap()).c_str(),
              TimeUtil::ToString(s.jitter()).c_str());
  return kOk;
}

int List(Client& c, const Global& g, const SpecArgs& a) {
  std::vector<std::vector<std::string>> rows = {kHeader};
  std::string token;
  do {
    v1::ListSchedulesRequest req;
    req.set_namespace_(g.ns);
    req.set_prefix(a.prefix);
    req.set_page_size(1000);
    req.set_page_token(token);
    v1::ListSchedulesResponse resp;
    Check(c.stub().ListSchedules(c.Context().get(), req, &resp));
    for (const auto& s : resp.schedules()) {
      if (c.json()) {
        std::printf("%s\n", Json(s).c_str());
      } else {
        rows.push_back(Row(s));
      }
    }
    token = resp.next_page_token();
  } while (!token.empty());
  if (!c.json()) PrintTable(rows);
  return kOk;
}

int Remove(Client& c, const Global& g, const SpecArgs& a) {
  v1::DeleteScheduleRequest req;
  req.set_namespace_(g.ns);
  req.set_key(a.key);
  req.set_expected_version(a.version);
  v1::DeleteScheduleResponse resp;
  Check(c.stub().DeleteSchedule(c.Context().get(), req, &resp));
  std::printf("removed schedule %s (version %llu)\n", a.key.c_str(),
              static_cast<unsigned long long>(resp.version()));
  return kOk;
}

// pause, resume, trigger: the schedule as it then is.
using Action = grpc::Status (v1::Delayd::Stub::*)(
    grpc::ClientContext*, const v1::ScheduleActionRequest&, v1::Schedule*);
int Act(Client& c, const Global& g, const SpecArgs& a, Action action) {
  v1::ScheduleActionRequest req;
  req.set_namespace_(g.ns);
  req.set_key(a.key);
  req.set_expected_version(a.version);
  v1::Schedule s;
  Check((c.stub().*action)(c.Context().get(), req, &s));
  PrintSchedule(c.json(), s);
  return kOk;
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
  auto* schedule = app.add_subcommand(
      "schedule", "Recurring schedules: each due instant fires an event");
  schedule->require_subcommand(1);
  auto spec_flags = [](CLI::App* sub, SpecArgs* a) {
    sub->add_option("--cron", a->cron,
                    "A cron expression: 5 fields, or 6 with seconds first");
    sub->add_option("--every", a->every, "A fixed interval (like 30s, 1h)");
    sub->add_option("--tz", a->tz, "IANA time zone of --cron (default UTC)");
    sub->add_option("--start", a->start, "No instant before (RFC 3339)");
    sub->add_option("--end", a->end, "No instant after (RFC 3339)");
    sub->add_option("--max-runs", a->max_runs, "At most this many runs");
  };

  auto s = std::make_shared<SpecArgs>();
  auto* set = schedule->add_subcommand(
      "set", "Create or replace a schedule (a new version; runs from now)");
  set->add_option("key", s->key, "Schedule key")->required();
  set->add_option("payload", s->payload,
                  "Each run's payload: text, @file, or - for stdin");
  spec_flags(set, s.get());
  set->add_option("--catch-up", s->catch_up,
                  "Instants missed while down: latest (one run), none, all")
      ->capture_default_str();
  set->add_option("--catch-up-limit", s->catch_up_limit,
                  "With --catch-up all: at most this many runs (default 100)");
  set->add_option("--overlap", s->overlap,
                  "A due instant while the last run is unacknowledged: allow, "
                  "skip, or buffer-one (hold one until it is)")
      ->capture_default_str();
  set->add_option("--jitter", s->jitter,
                  "Delay each run by up to this, at random (never early)");
  set->add_flag("--if-absent", s->if_absent, "Create only");
  set->add_option("--version", s->version,
                  "Replace only if the schedule has this version");
  out.push_back({set,
                 [s] {
                   Spec(*s);
                   CatchUpFlag(s->catch_up);
                   OverlapFlag(s->overlap);
                 },
                 {},
                 [&g, s](Client& c) { return Set(c, g, *s); }});

  auto* get = schedule->add_subcommand("get", "Show a schedule");
  get->add_option("key", s->key, "Schedule key")->required();
  out.push_back({get, {}, {}, [&g, s](Client& c) { return Get(c, g, *s); }});

  auto* ls = schedule->add_subcommand("ls", "List schedules, by key");
  ls->add_option("--prefix", s->prefix, "Only keys starting with this");
  out.push_back({ls, {}, {}, [&g, s](Client& c) { return List(c, g, *s); }});

  auto* rm = schedule->add_subcommand(
      "rm", "Delete a schedule (runs already fired stay)");
  rm->add_option("key", s->key, "Schedule key")->required();
  rm->add_option("--version", s->version,
                 "Delete only if the schedule has this version");
  out.push_back({rm, {}, {}, [&g, s](Client& c) { return Remove(c, g, *s); }});

  const std::pair<const char*, const char*> actions[] = {
      {"pause", "Hold a schedule's runs until resumed"},
      {"resume", "Run a paused schedule again (missed instants by --catch-up)"},
      {"trigger", "Fire a run now, outside the spec"}};
  for (const auto& [name, help] : actions) {
    auto* sub = schedule->add_subcommand(name, help);
    sub->add_option("key", s->key, "Schedule key")->required();
    sub->add_option("--version", s->version,
                    "Only if the schedule has this version");
    const std::string which = name;
    const Action action = which == "pause" ? &v1::Delayd::Stub::PauseSchedule
                          : which == "resume"
                              ? &v1::Delayd::Stub::ResumeSchedule
                              : &v1::Delayd::Stub::TriggerSchedule;
    out.push_back({sub, {}, {}, [&g, s, action](Client& c) {
                     return Act(c, g, *s, action);
                   }});
  }

  auto a = std::make_shared<SpecArgs>();
  auto* next = schedule->add_subcommand(
      "next", "Show the next instants of a spec, creating nothing");
  spec_flags(next, a.get());
  next->add_option("--after", a->after, "From this time (default now)");
  next->add_option("-c,--count", a->count, "How many (at most 1000)")
      ->capture_default_str();
  out.push_back({next,
                 [a] { Spec(*a); },
                 {},
                 [&g, a](Client& c) { return Next(c, g, *a); }});
}

}  // namespace delayctl
