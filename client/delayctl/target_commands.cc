// A namespace's push target: target get|set|rm|test.
#include <google/protobuf/util/time_util.h>

#include <cstdio>
#include <memory>
#include <optional>

#include "client/delayctl/commands.h"
#include "client/delayctl/exit_codes.h"
#include "client/delayctl/print.h"

namespace delayctl {
namespace {

using google::protobuf::util::TimeUtil;

struct TargetArgs {
  std::string url, method = "POST", content_type, timeout = "10s";
  std::vector<std::string> headers, secrets, secret_files;
  bool keep_secrets = false, retry_client_errors = false,
       follow_redirects = false;
  std::string ca_file, client_cert_file, client_key_file;
  std::uint32_t max_in_flight = 0;
  std::uint32_t pause_after_failures = 0;
  // test
  std::string key, payload;
};

void PrintTarget(bool json, const std::string& ns, const v1::PushTarget& t) {
  if (json) {
    std::printf("%s\n", Json(t).c_str());
    return;
  }
  if (t.url().empty()) {
    std::printf("namespace %s has no push target\n",
                ns.empty() ? "default" : ns.c_str());
    return;
  }
  std::string headers, secrets;
  for (const v1::PushHeader& h : t.headers()) {
    headers += (headers.empty() ? "" : ", ") + h.name() + ": " + h.value();
  }
  for (const std::string& id : t.secret_ids()) {
    secrets += (secrets.empty() ? "" : ", ") + id;
  }
  PrintTable(
      {{"namespace", ns.empty() ? "default" : ns},
       {"url", t.url()},
       {"method", t.method()},
       {"headers", headers.empty() ? "none" : headers},
       {"content_type", t.content_type()},
       {"timeout", TimeUtil::ToString(t.timeout())},
       {"secrets", secrets.empty() ? "none (unsigned)" : secrets},
       {"client_errors",
        t.retry_client_errors() ? "retried" : "dead letter at once"},
       {"redirects", t.follow_redirects() ? "followed" : "not followed"},
       {"ca", t.ca_pem().empty() ? "the system's" : "the target's own"},
       {"client_certificate", t.client_cert_pem().empty() ? "none" : "set"},
       {"max_in_flight", std::to_string(t.max_in_flight())}});
}

// The target the flags describe (files read, secrets kept by id if asked).
v1::PushTarget FromFlags(Client& c, const Global& g, const TargetArgs& a) {
  v1::PushTarget t;
  t.set_url(a.url);
  t.set_method(a.method);
  for (const std::string& h : a.headers) {
    const auto colon = h.find(':');
    if (colon == std::string::npos) {
      throw Exit{kUsage, "--header " + h + ": not NAME: VALUE"};
    }
    std::string value = h.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    v1::PushHeader* header = t.add_headers();
    header->set_name(h.substr(0, colon));
    header->set_value(value);
  }
  t.set_content_type(a.content_type);
  *t.mutable_timeout() = DurationFlag(a.timeout, "--timeout");
  for (const std::string& s : a.secrets) t.add_secrets(s);
  for (const std::string& f : a.secret_files) {
    std::string s = ReadWholeFile(f, "--secret-file");
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    t.add_secrets(s);
  }
  if (a.keep_secrets) {
    const v1::Policy now = GetPolicy(c, g);
    for (const std::string& id : now.push().secret_ids()) t.add_secret_ids(id);
  }
  t.set_retry_client_errors(a.retry_client_errors);
  t.set_follow_redirects(a.follow_redirects);
  if (!a.ca_file.empty()) t.set_ca_pem(ReadWholeFile(a.ca_file, "--ca-file"));
  if (!a.client_cert_file.empty()) {
    t.set_client_cert_pem(ReadWholeFile(a.client_cert_file, "--client-cert"));
  }
  if (!a.client_key_file.empty()) {
    t.set_client_key_pem(ReadWholeFile(a.client_key_file, "--client-key"));
  }
  t.set_max_in_flight(a.max_in_flight);
  t.set_pause_after_failures(a.pause_after_failures);
  return t;
}

// Replaces the target whole (update mask "push"), or removes it.
int Set(Client& c, const Global& g, const v1::PushTarget& t) {
  v1::SetPolicyRequest req;
  req.set_namespace_(g.ns);
  *req.mutable_policy()->mutable_push() = t;
  req.mutable_update_mask()->add_paths("push");
  v1::Policy now;
  Check(c.stub().SetPolicy(c.Context().get(), req, &now));
  PrintTarget(c.json(), g.ns, now.push());
  return kOk;
}

int Test(Client& c, const Global& g, const TargetArgs& a) {
  v1::TestPushTargetRequest req;
  req.set_namespace_(g.ns);
  req.set_key(a.key);
  req.set_payload(ReadPayload(a.payload));
  v1::TestPushTargetResponse resp;
  Check(c.stub().TestPushTarget(c.Context().get(), req, &resp));
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
  } else {
    PrintTable({{"outcome", resp.outcome()},
                {"http_status", resp.http_status() == 0
                                    ? "no answer"
                                    : std::to_string(resp.http_status())},
                {"error", resp.error().empty() ? "none" : resp.error()},
                {"duration", TimeUtil::ToString(resp.duration())}});
  }
  if (resp.outcome() != "ack") {
    throw Exit{kRpcFailed, "the target did not acknowledge the test event"};
  }
  return kOk;
}

}  // namespace

void AddTargetCommands(CLI::App& app, const Global& g, Commands& out) {
  auto* target = app.add_subcommand(
      "target",
      "Show, set, remove or try a namespace's push target (-n): the HTTP "
      "endpoint delayd calls with each event");
  target->require_subcommand(1);
  auto* get = target->add_subcommand("get", "Show the target");
  out.push_back({get, {}, {}, [&g](Client& c) {
                   PrintTarget(c.json(), g.ns, GetPolicy(c, g).push());
                   return kOk;
                 }});

  auto a = std::make_shared<TargetArgs>();
  auto* set = target->add_subcommand(
      "set",
      "Set the target, replacing the one there is (its secrets too, "
      "unless --keep-secrets)");
  set->add_option("url", a->url, "https://host[:port]/path")->required();
  set->add_option("--method", a->method, "POST or PUT")
      ->check(CLI::IsMember({"POST", "PUT"}));
  set->add_option("--header", a->headers,
                  "NAME: VALUE, sent with every request (repeatable)");
  set->add_option("--content-type", a->content_type,
                  "Of the payload (default application/octet-stream)");
  set->add_option("--timeout", a->timeout, "For one attempt (100ms .. 5m)")
      ->capture_default_str();
  set->add_option("--secret", a->secrets,
                  "A Standard Webhooks secret (whsec_...) that signs every "
                  "request (repeatable; --secret-file keeps it out of the "
                  "process list)");
  set->add_option("--secret-file", a->secret_files,
                  "A file holding a secret (repeatable)");
  set->add_flag("--keep-secrets", a->keep_secrets,
                "Keep the target's secrets beside the new ones (a rotation)");
  set->add_flag("--retry-client-errors", a->retry_client_errors,
                "Retry 4xx answers instead of making dead letters at once");
  set->add_flag("--follow-redirects", a->follow_redirects,
                "Follow up to 5 redirects");
  set->add_option("--ca-file", a->ca_file,
                  "PEM CAs to trust instead of the system's");
  set->add_option("--client-cert", a->client_cert_file,
                  "PEM client certificate (mutual TLS; with --client-key)");
  set->add_option("--client-key", a->client_key_file,
                  "PEM key of --client-cert");
  set->add_option("--max-in-flight", a->max_in_flight,
                  "Requests at once (default 16)");
  set->add_option("--pause-after-failures", a->pause_after_failures,
                  "Pause the namespace after this many failed requests in a "
                  "row (0: never)");
  out.push_back(
      {set,
       [a] { DurationFlag(a->timeout, "--timeout"); },
       {},
       [&g, a](Client& c) { return Set(c, g, FromFlags(c, g, *a)); }});

  auto* rm = target->add_subcommand(
      "rm", "Remove the target: its events wait for workers");
  out.push_back(
      {rm, {}, {}, [&g](Client& c) { return Set(c, g, v1::PushTarget()); }});

  auto* test = target->add_subcommand(
      "test",
      "Send a test request to the target now and show the answer (exit code "
      "3 unless it is a 2xx)");
  test->add_option("--key", a->key,
                   "The test event's key (default delayd-test)");
  test->add_option("--payload", a->payload,
                   "Its payload: text, @file or - for stdin");
  out.push_back({test, {}, {}, [&g, a](Client& c) { return Test(c, g, *a); }});
}

}  // namespace delayctl
