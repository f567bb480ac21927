#include "server/http/routes.h"

#include <simdjson.h>

#include "delayd/v1/delayd.pb.h"

namespace delayd::http {
namespace {

constexpr char kNs[] = "/v1/namespaces/{namespace}";

const std::vector<Route>& Table() {
  static const std::vector<Route> table = [] {
    const std::string ns = kNs;
    return std::vector<Route>{
        {"PUT", ns + "/timers/{key}", "SetTimer", true, "Set a timer"},
        {"GET", ns + "/timers/{key}", "GetTimer", false, "Get a timer"},
        {"DELETE", ns + "/timers/{key}", "RemoveTimer", false,
         "Remove a timer"},
        {"POST", ns + "/timers/{key}:move", "MoveTimer", true,
         "Move a timer to another fire time"},
        {"GET", ns + "/timers", "ListTimers", false,
         "List timers, page by page (in no key order: partition by "
         "partition)"},
        {"POST", "/v1/timers:batch", "Batch", true,
         "Set, move and remove timers in one call"},
        {"POST", ns + ":drain", "Drain", true,
         "Fire every pending timer of the namespace now"},
        {"POST", ns + "/events:pull", "Subscribe", true,
         "Take ready events as a worker without a stream", Route::kPull},
        {"GET", ns + "/events", "Subscribe", false,
         "Watch the namespace's events (Server-Sent Events)", Route::kWatch},
        {"POST", ns + "/events:ack", "Ack", true, "Acknowledge events"},
        {"POST", ns + "/events:nack", "Nack", true,
         "Give events back for a retry"},
        {"POST", ns + "/events:extend", "ExtendLease", true,
         "Extend events' ack deadlines"},
        {"GET", ns + "/policy", "GetPolicy", false,
         "Get the namespace's policy"},
        {"PUT", ns + "/policy", "SetPolicy", true,
         "Set the namespace's policy"},
        {"POST", ns + "/policy:testPush", "TestPushTarget", true,
         "Send a test request to the namespace's push target"},
        {"GET", ns + "/deadLetters", "ListDeadLetters", false,
         "List dead letters"},
        {"POST", ns + "/deadLetters:requeue", "RequeueDeadLetters", true,
         "Requeue dead letters"},
        {"POST", ns + "/deadLetters:purge", "PurgeDeadLetters", true,
         "Purge dead letters"},
        {"GET", ns + "/stats", "Stats", false, "Statistics of a namespace"},
        {"GET", "/v1/stats", "Stats", false,
         "Statistics of the daemon and every namespace"},
        {"PUT", ns + "/schedules/{key}", "SetSchedule", true,
         "Create or replace a schedule"},
        {"GET", ns + "/schedules/{key}", "GetSchedule", false,
         "Get a schedule"},
        {"DELETE", ns + "/schedules/{key}", "DeleteSchedule", false,
         "Delete a schedule"},
        {"GET", ns + "/schedules", "ListSchedules", false,
         "List schedules in key order"},
        {"POST", ns + "/schedules/{key}:pause", "PauseSchedule", true,
         "Pause a schedule"},
        {"POST", ns + "/schedules/{key}:resume", "ResumeSchedule", true,
         "Resume a schedule"},
        {"POST", ns + "/schedules/{key}:trigger", "TriggerSchedule", true,
         "Run a schedule now"},
        {"POST", "/v1/schedules:preview", "PreviewSchedule", true,
         "The next instants of a spec"},
        {"POST", "/v1:backup", "Backup", true,
         "Write a consistent copy of the store"},
        {"GET", "/v1/cluster", "ClusterStatus", false,
         "A cluster node's nodes and partition leases"},
    };
  }();
  return table;
}

std::vector<std::string_view> Split(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t slash = s.find('/', start);
    out.push_back(s.substr(start, slash - start));
    if (slash == std::string_view::npos) return out;
    start = slash + 1;
  }
}

std::string Join(std::span<const std::string_view> parts) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += '/';
    out += parts[i];
  }
  return out;
}

// Matches template segments `t` against path segments `p`, appending
// bindings; backtracks over how many segments `{namespace}` takes.
bool MatchSegments(std::span<const std::string_view> t,
                   std::span<const std::string_view> p, Match* m) {
  if (t.empty()) return p.empty();
  const std::string_view head = t.front();
  if (head == "{key}") {
    if (p.empty() || (p.size() == 1 && p[0].empty())) return false;
    m->bindings.emplace_back("key", Join(p));
    return true;
  }
  if (head == "{namespace}") {
    for (std::size_t n = 1; n <= p.size(); ++n) {
      const std::size_t mark = m->bindings.size();
      m->bindings.emplace_back("namespace", Join(p.first(n)));
      if (!m->bindings.back().second.empty() &&
          MatchSegments(t.subspan(1), p.subspan(n), m)) {
        return true;
      }
      m->bindings.resize(mark);
    }
    return false;
  }
  return !p.empty() && p.front() == head &&
         MatchSegments(t.subspan(1), p.subspan(1), m);
}

// `s` with each %XX turned into its byte; false if a % is not followed by
// two hex digits.
bool PercentDecode(std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    auto hex = [](char c) {
      return c >= '0' && c <= '9'   ? c - '0'
             : c >= 'a' && c <= 'f' ? c - 'a' + 10
             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                    : -1;
    };
    if (i + 2 >= s.size()) return false;
    const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  s = std::move(out);
  return true;
}

bool MatchPath(const Route& r, std::string_view path, Match* m) {
  std::string_view tmpl = r.path;
  // A trailing `:verb` is matched at the path's end first.
  const std::size_t last = tmpl.rfind('/');
  const std::size_t colon = tmpl.find(':', last);
  if (colon != std::string_view::npos) {
    const std::string_view verb = tmpl.substr(colon);
    if (path.size() <= verb.size() || !path.ends_with(verb)) return false;
    tmpl.remove_suffix(verb.size());
    path.remove_suffix(verb.size());
  }
  const std::vector<std::string_view> t = Split(tmpl);
  const std::vector<std::string_view> p = Split(path);
  m->bindings.clear();
  if (!MatchSegments(t, p, m)) return false;
  // Matched as sent (a %2F in a key is no separator), then decoded: to
  // UTF-8, as every string field of a request is.
  for (auto& [field, value] : m->bindings) {
    if (!PercentDecode(value) ||
        !simdjson::validate_utf8(value.data(), value.size())) {
      m->bad_encoding = field;
    }
  }
  return true;
}

}  // namespace

std::span<const Route> Routes() { return Table(); }

const google::protobuf::ServiceDescriptor* DelaydService() {
  static const google::protobuf::ServiceDescriptor* const service =
      v1::SetTimerRequest::descriptor()->file()->FindServiceByName("Delayd");
  return service;
}

std::optional<Match> MatchRoute(std::string_view method, std::string_view path,
                                std::string* allow) {
  allow->clear();
  for (const Route& r : Table()) {
    Match m;
    if (!MatchPath(r, path, &m)) continue;
    if (method == r.method) {
      m.route = &r;
      m.rpc = DelaydService()->FindMethodByName(r.rpc);
      allow->clear();
      return m;
    }
    if (("," + *allow + ",").find(std::string(",") + r.method + ",") ==
        std::string::npos) {
      if (!allow->empty()) *allow += ", ";
      *allow += r.method;
    }
  }
  return std::nullopt;
}

}  // namespace delayd::http
