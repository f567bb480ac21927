// Namespace policies: policy get|set, pause, resume.
#include <google/protobuf/util/time_util.h>

#include <cstdio>
#include <memory>
#include <optional>

#include "client/delayctl/commands.h"
#include "client/delayctl/exit_codes.h"
#include "client/delayctl/print.h"
#include "delayd/text/duration.h"

namespace delayctl {
namespace {

using google::protobuf::util::TimeUtil;

// Flags of `policy set`; each one given changes that field alone.
struct PolicyArgs {
  bool reset = false;
  std::optional<std::string> initial_backoff, max_backoff, ack_timeout,
      dedup_window;
  std::optional<double> multiplier, jitter, rate;
  std::optional<std::uint32_t> burst, max_in_flight, max_attempts;
  std::optional<bool> paused;
};

void CheckFlags(const PolicyArgs& a) {
  if (a.initial_backoff) DurationFlag(*a.initial_backoff, "--initial-backoff");
  if (a.max_backoff) DurationFlag(*a.max_backoff, "--max-backoff");
  if (a.ack_timeout) DurationFlag(*a.ack_timeout, "--ack-timeout");
  if (a.dedup_window) DurationFlag(*a.dedup_window, "--dedup-window");
}

std::string Seconds(const google::protobuf::Duration& d) {
  return TimeUtil::ToString(d);
}

void PrintPolicy(bool json, const std::string& ns, const v1::Policy& p) {
  if (json) {
    std::printf("%s\n", Json(p).c_str());
    return;
  }
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  PrintTable(
      {{"namespace", ns.empty() ? "default" : ns},
       {"paused", p.paused() ? "yes" : "no"},
       {"max_attempts",
        p.max_attempts() == 0 ? "unlimited" : std::to_string(p.max_attempts())},
       {"initial_backoff", Seconds(p.initial_backoff())},
       {"backoff_multiplier", number(p.backoff_multiplier())},
       {"max_backoff", Seconds(p.max_backoff())},
       {"backoff_jitter", number(p.backoff_jitter())},
       {"ack_timeout", Seconds(p.ack_timeout())},
       {"max_dispatch_rate", p.max_dispatch_rate() == 0
                                 ? "unlimited"
                                 : number(p.max_dispatch_rate()) + "/s"},
       {"dispatch_burst", std::to_string(p.dispatch_burst())},
       {"max_in_flight", p.max_in_flight() == 0
                             ? "unlimited"
                             : std::to_string(p.max_in_flight())},
       {"dedup_window",
        p.has_dedup_window() ? Seconds(p.dedup_window()) : "none"}});
}

// Sets the fields the flags give, naming them in the update mask (the
// daemon changes those alone, over the policy in force: nothing set by
// someone else meanwhile is undone); with --reset, the whole policy.
int Set(Client& c, const Global& g, const PolicyArgs& a) {
  v1::SetPolicyRequest req;
  req.set_namespace_(g.ns);
  v1::Policy& p = *req.mutable_policy();
  auto* mask = req.mutable_update_mask();
  if (a.initial_backoff) {
    *p.mutable_initial_backoff() =
        DurationFlag(*a.initial_backoff, "--initial-backoff");
    mask->add_paths("initial_backoff");
  }
  if (a.max_backoff) {
    *p.mutable_max_backoff() = DurationFlag(*a.max_backoff, "--max-backoff");
    mask->add_paths("max_backoff");
  }
  if (a.ack_timeout) {
    *p.mutable_ack_timeout() = DurationFlag(*a.ack_timeout, "--ack-timeout");
    mask->add_paths("ack_timeout");
  }
  if (a.dedup_window) {
    *p.mutable_dedup_window() = DurationFlag(*a.dedup_window, "--dedup-window");
    mask->add_paths("dedup_window");
  }
  auto set = [&](const auto& flag, auto setter, const char* field) {
    if (!flag) return;
    (p.*setter)(*flag);
    mask->add_paths(field);
  };
  set(a.multiplier, &v1::Policy::set_backoff_multiplier, "backoff_multiplier");
  set(a.jitter, &v1::Policy::set_backoff_jitter, "backoff_jitter");
  set(a.rate, &v1::Policy::set_max_dispatch_rate, "max_dispatch_rate");
  set(a.burst, &v1::Policy::set_dispatch_burst, "dispatch_burst");
  set(a.max_in_flight, &v1::Policy::set_max_in_flight, "max_in_flight");
  set(a.paused, &v1::Policy::set_paused, "paused");
  set(a.max_attempts, &v1::Policy::set_max_attempts, "max_attempts");
  if (a.reset) {
    req.clear_update_mask();  // The flags over the defaults, whole.
  } else if (mask->paths().empty()) {
    PrintPolicy(c.json(), g.ns, GetPolicy(c, g));  // Nothing to change.
    return kOk;
  }
  v1::Policy now;
  Check(c.stub().SetPolicy(c.Context().get(), req, &now));
  PrintPolicy(c.json(), g.ns, now);
  return kOk;
}

}  // namespace

v1::Policy GetPolicy(Client& c, const Global& g) {
  v1::GetPolicyRequest req;
  req.set_namespace_(g.ns);
  v1::Policy p;
  Check(c.stub().GetPolicy(c.Context().get(), req, &p));
  return p;
}

void AddPolicyCommands(CLI::App& app, const Global& g, Commands& out) {
  auto* policy = app.add_subcommand(
      "policy", "Show or change a namespace's delivery policy (-n)");
  policy->require_subcommand(1);
  auto* get = policy->add_subcommand("get", "Show the policy");
  out.push_back({get, {}, {}, [&g](Client& c) {
                   PrintPolicy(c.json(), g.ns, GetPolicy(c, g));
                   return kOk;
                 }});

  auto a = std::make_shared<PolicyArgs>();
  auto* set = policy->add_subcommand(
      "set", "Change the fields given (the others stay as they are)");
  set->add_flag("--reset", a->reset, "Start from the defaults");
  set->add_option("--max-attempts", a->max_attempts,
                  "Deliveries before an event becomes a dead letter (0: no "
                  "limit)");
  set->add_option("--initial-backoff", a->initial_backoff,
                  "Wait after a first failed delivery (default 1s)");
  set->add_option("--backoff-multiplier", a->multiplier,
                  "Each further failure multiplies the wait (default 2)");
  set->add_option("--max-backoff", a->max_backoff,
                  "The longest wait (default 10m)");
  set->add_option("--backoff-jitter", a->jitter,
                  "Cut each wait by up to this fraction, at random (0..1)");
  set->add_option("--ack-timeout", a->ack_timeout,
                  "For workers that give none (default 30s)");
  set->add_option("--max-dispatch-rate", a->rate,
                  "Events per second to all workers together (0: no limit)");
  set->add_option("--dispatch-burst", a->burst,
                  "The most at once after a quiet spell (0: a second's worth)");
  set->add_option("--max-in-flight", a->max_in_flight,
                  "Events in flight across all workers (0: no limit)");
  set->add_option("--paused", a->paused, "true: hold delivery");
  set->add_option("--dedup-window", a->dedup_window,
                  "For this long after a key fired or was removed, a "
                  "create-only set of it is refused (0: none; up to 720h)");
  out.push_back({set,
                 [a] { CheckFlags(*a); },
                 {},
                 [&g, a](Client& c) { return Set(c, g, *a); }});

  auto paused = std::make_shared<PolicyArgs>();
  paused->paused = true;
  auto* pause = app.add_subcommand(
      "pause",
      "Hold a namespace's delivery (-n): timers still fire, events wait");
  out.push_back(
      {pause, {}, {}, [&g, paused](Client& c) { return Set(c, g, *paused); }});
  auto resumed = std::make_shared<PolicyArgs>();
  resumed->paused = false;
  auto* resume = app.add_subcommand(
      "resume", "Deliver a paused namespace's events again (-n)");
  out.push_back({resume, {}, {}, [&g, resumed](Client& c) {
                   return Set(c, g, *resumed);
                 }});
}

}  // namespace delayctl
