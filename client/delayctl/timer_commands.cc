// Timers: set, move, rm, get, ls, drain, batch.
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "client/delayctl/commands.h"
#include "client/delayctl/exit_codes.h"
#include "client/delayctl/print.h"
#include "delayd/text/duration.h"

namespace delayctl {

std::string ReadPayload(const std::string& arg) {
  if (arg == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  if (!arg.empty() && arg[0] == '@') {
    std::ifstream in(arg.substr(1), std::ios::binary);
    if (!in) throw Exit{kUsage, "cannot read payload file " + arg.substr(1)};
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  return arg;
}

namespace {

using google::protobuf::util::TimeUtil;

struct TimerArgs {
  std::string key, payload, in, at, jitter;
  bool if_absent = false;
  std::uint64_t version = 0;
};

// Fills a request's delay or fire_time from --in / --at.
template <typename Req>
void SetWhen(const std::string& in, const std::string& at, Req* req) {
  if (in.empty() == at.empty()) {
    throw Exit{kUsage, "give exactly one of --in DURATION or --at RFC3339"};
  }
  if (!in.empty()) {
    auto d = delayd::ParseDuration(in);
    if (!d) {
      throw Exit{kUsage,
                 "--in: not a duration (like 90s, 1h30m, 500ms, 2d): " + in};
    }
    *req->mutable_delay() = TimeUtil::NanosecondsToDuration(d->count());
  } else {
    google::protobuf::Timestamp t;
    if (!TimeUtil::FromString(at, &t)) {
      throw Exit{kUsage, "--at: not an RFC 3339 time: " + at};
    }
    *req->mutable_fire_time() = t;
  }
}

int Set(Client& c, const Global& g, const TimerArgs& a) {
  v1::SetTimerRequest req;
  req.set_namespace_(g.ns);
  req.set_key(a.key);
  req.set_payload(ReadPayload(a.payload));
  req.set_if_absent(a.if_absent);
  SetWhen(a.in, a.at, &req);
  if (!a.jitter.empty()) {
    *req.mutable_jitter() = DurationFlag(a.jitter, "--jitter");
  }
  v1::SetTimerResponse resp;
  Check(c.stub().SetTimer(c.Context().get(), req, &resp));
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
  } else {
    PrintTable({{"KEY", "VERSION", "FIRE TIME", "REPLACED"},
                {a.key, std::to_string(resp.version()), Time(resp.fire_time()),
                 resp.replaced() ? "yes" : "no"}});
  }
  return kOk;
}

int Move(Client& c, const Global& g, const TimerArgs& a) {
  v1::MoveTimerRequest req;
  req.set_namespace_(g.ns);
  req.set_key(a.key);
  req.set_expected_version(a.version);
  SetWhen(a.in, a.at, &req);
  v1::MoveTimerResponse resp;
  Check(c.stub().MoveTimer(c.Context().get(), req, &resp));
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
  } else {
    PrintTable(
        {{"KEY", "VERSION", "FIRE TIME"},
         {a.key, std::to_string(resp.version()), Time(resp.fire_time())}});
  }
  return kOk;
}

int Remove(Client& c, const Global& g, const TimerArgs& a) {
  v1::RemoveTimerRequest req;
  req.set_namespace_(g.ns);
  req.set_key(a.key);
  req.set_expected_version(a.version);
  v1::RemoveTimerResponse resp;
  Check(c.stub().RemoveTimer(c.Context().get(), req, &resp));
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
  } else {
    std::printf("removed %s (version %llu)\n", a.key.c_str(),
                static_cast<unsigned long long>(resp.version()));
  }
  return kOk;
}

int Get(Client& c, const Global& g, const TimerArgs& a) {
  v1::GetTimerRequest req;
  req.set_namespace_(g.ns);
  req.set_key(a.key);
  v1::Timer t;
  Check(c.stub().GetTimer(c.Context().get(), req, &t));
  if (c.json()) {
    std::printf("%s\n", Json(t).c_str());
  } else {
    PrintTable({{"NAMESPACE", "KEY", "VERSION", "FIRE TIME", "PAYLOAD"},
                {t.namespace_(), t.key(), std::to_string(t.version()),
                 Time(t.fire_time()), Shown(t.payload())}});
  }
  return kOk;
}

struct ListArgs {
  std::string prefix;
  std::size_t limit = 0;
  bool no_payloads = false;
};

int List(Client& c, const Global& g, const ListArgs& a) {
  std::vector<std::vector<std::string>> rows = {
      {"NAMESPACE", "KEY", "VERSION", "FIRE TIME", "PAYLOAD"}};
  std::string token;
  std::size_t shown = 0;
  do {
    v1::ListTimersRequest req;
    req.set_namespace_(g.ns);
    req.set_key_prefix(a.prefix);
    req.set_page_size(1000);
    req.set_page_token(token);
    req.set_without_payloads(a.no_payloads);
    v1::ListTimersResponse resp;
    Check(c.stub().ListTimers(c.Context().get(), req, &resp));
    for (const auto& t : resp.timers()) {
      if (a.limit != 0 && shown == a.limit) break;
      ++shown;
      if (c.json()) {
        std::printf("%s\n", Json(t).c_str());
      } else {
        rows.push_back({t.namespace_(), t.key(), std::to_string(t.version()),
                        Time(t.fire_time()), Shown(t.payload())});
      }
    }
    token = resp.next_page_token();
  } while (!token.empty() && (a.limit == 0 || shown < a.limit));
  if (!c.json()) PrintTable(rows);
  return kOk;
}

int Drain(Client& c, const Global& g) {
  v1::DrainRequest req;
  req.set_namespace_(g.ns);
  v1::DrainResponse resp;
  Check(c.stub().Drain(c.Context().get(), req, &resp));
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
  } else {
    std::printf("drained %llu timers\n",
                static_cast<unsigned long long>(resp.drained()));
  }
  return kOk;
}

// One operation per line: "set KEY DURATION [PAYLOAD]", "move KEY DURATION",
// "rm KEY", or a JSON BatchOperation ({"set": {...}}). Blank lines and lines
// starting with '#' are skipped.
v1::BatchOperation ParseBatchLine(const Global& g, const std::string& line,
                                  std::size_t number) {
  v1::BatchOperation op;
  const std::string where = "line " + std::to_string(number) + ": ";
  if (line[0] == '{') {
    if (!google::protobuf::util::JsonStringToMessage(line, &op).ok()) {
      throw Exit{kUsage, where + "not a JSON operation"};
    }
    return op;
  }
  std::istringstream in(line);
  std::string verb, key, when;
  in >> verb >> key;
  if (key.empty()) throw Exit{kUsage, where + "missing key"};
  auto delay = [&]() {
    in >> when;
    auto d = delayd::ParseDuration(when);
    if (!d) throw Exit{kUsage, where + "not a duration: " + when};
    return TimeUtil::NanosecondsToDuration(d->count());
  };
  if (verb == "set") {
    auto* s = op.mutable_set();
    s->set_namespace_(g.ns);
    s->set_key(key);
    *s->mutable_delay() = delay();
    std::string payload;
    std::getline(in >> std::ws, payload);
    s->set_payload(payload);
  } else if (verb == "move") {
    auto* m = op.mutable_move();
    m->set_namespace_(g.ns);
    m->set_key(key);
    *m->mutable_delay() = delay();
  } else if (verb == "rm") {
    auto* r = op.mutable_remove();
    r->set_namespace_(g.ns);
    r->set_key(key);
  } else {
    throw Exit{kUsage, where + "unknown operation '" + verb +
                           "' (set, move, rm or JSON)"};
  }
  return op;
}

int Batch(Client& c, const Global& g, const std::string& file) {
  std::ifstream f;
  std::istream* in = &std::cin;
  if (file != "-") {
    f.open(file);
    if (!f) throw Exit{kUsage, "cannot read " + file};
    in = &f;
  }
  std::vector<v1::BatchOperation> ops;
  std::string line;
  for (std::size_t n = 1; std::getline(*in, line); ++n) {
    const auto start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#') continue;
    ops.push_back(ParseBatchLine(g, line.substr(start), n));
  }
  if (ops.empty()) throw Exit{kUsage, "no operations given"};
  bool failed = false;
  constexpr std::size_t kChunk = 1000;
  for (std::size_t base = 0; base < ops.size(); base += kChunk) {
    v1::BatchRequest req;
    for (std::size_t i = base; i < std::min(ops.size(), base + kChunk); ++i) {
      *req.add_operations() = ops[i];
    }
    v1::BatchResponse resp;
    Check(c.stub().Batch(c.Context().get(), req, &resp));
    for (int i = 0; i < resp.results_size(); ++i) {
      const auto& r = resp.results(i);
      failed |= r.code() != 0;
      if (c.json()) {
        std::printf("%s\n", Json(r).c_str());
      } else if (r.code() == 0) {
        std::printf("%zu ok version=%llu\n", base + i + 1,
                    static_cast<unsigned long long>(r.version()));
      } else {
        std::printf("%zu error %s %s\n", base + i + 1,
                    CodeName(static_cast<grpc::StatusCode>(r.code())),
                    r.message().c_str());
      }
    }
  }
  return failed ? kRpcFailed : kOk;
}

}  // namespace

void AddTimerCommands(CLI::App& app, const Global& g, Commands& out) {
  auto a = std::make_shared<TimerArgs>();
  auto when = [a](CLI::App* sub) {
    sub->add_option("--in", a->in, "Fire after this long (90s, 1h30m, 2d)");
    sub->add_option("--at", a->at, "Fire at this RFC 3339 time");
  };
  auto check_when = [a] {
    v1::SetTimerRequest check;
    SetWhen(a->in, a->at, &check);
  };

  auto* set = app.add_subcommand("set", "Create or replace a timer");
  set->add_option("key", a->key)->required();
  set->add_option("payload", a->payload,
                  "Payload: text, @file, or - for stdin");
  when(set);
  set->add_flag("--if-absent", a->if_absent, "Fail if the key is pending");
  set->add_option("--jitter", a->jitter,
                  "Fire at a random instant up to this much later");
  out.push_back({set,
                 [a, check_when] {
                   check_when();
                   if (!a->jitter.empty()) DurationFlag(a->jitter, "--jitter");
                 },
                 {},
                 [&g, a](Client& c) { return Set(c, g, *a); }});

  auto* move = app.add_subcommand("move", "Change a pending timer's fire time");
  move->add_option("key", a->key)->required();
  when(move);
  move->add_option("--version", a->version, "Only if at this version");
  out.push_back(
      {move, check_when, {}, [&g, a](Client& c) { return Move(c, g, *a); }});

  auto* rm = app.add_subcommand("rm", "Remove a pending timer");
  rm->add_option("key", a->key)->required();
  rm->add_option("--version", a->version, "Only if at this version");
  out.push_back({rm, {}, {}, [&g, a](Client& c) { return Remove(c, g, *a); }});

  auto* get = app.add_subcommand("get", "Show a pending timer");
  get->add_option("key", a->key)->required();
  out.push_back({get, {}, {}, [&g, a](Client& c) { return Get(c, g, *a); }});

  auto l = std::make_shared<ListArgs>();
  auto* ls = app.add_subcommand("ls", "List pending timers");
  ls->add_option("--prefix", l->prefix, "Only keys starting with this");
  ls->add_option("--limit", l->limit, "At most this many (0: all)");
  ls->add_flag("--no-payloads", l->no_payloads, "Leave payloads out");
  out.push_back({ls, {}, {}, [&g, l](Client& c) { return List(c, g, *l); }});

  auto* drain = app.add_subcommand("drain", "Fire every pending timer now");
  out.push_back({drain, {}, {}, [&g](Client& c) { return Drain(c, g); }});

  auto file = std::make_shared<std::string>("-");
  auto* batch = app.add_subcommand(
      "batch",
      "Apply operations from a file or stdin, one per line: 'set KEY DURATION "
      "[PAYLOAD]', 'move KEY DURATION', 'rm KEY', or a JSON operation");
  batch->add_option("file", *file, "File, or - for stdin")
      ->capture_default_str();
  out.push_back(
      {batch, {}, {}, [&g, file](Client& c) { return Batch(c, g, *file); }});
}

}  // namespace delayctl
