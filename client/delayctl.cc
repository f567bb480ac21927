// delayctl: the operator's CLI for delayd. One function per subcommand;
// results on stdout, errors on stderr, named exit codes; never interactive.
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <asio/post.hpp>
#include <asio/thread_pool.hpp>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "delayd/v1/delayd.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/duration.h"

namespace {

namespace v1 = delayd::v1;
using google::protobuf::util::TimeUtil;

// Exit codes (listed in --help).
enum ExitCode : int {
  kOk = 0,
  kUsage = 1,          // Bad flags or arguments.
  kCannotConnect = 2,  // The daemon could not be reached.
  kRpcFailed = 3,      // The call failed; status and message on stderr.
  kNotFound = 4,       // No such timer; `health`: not serving.
};

constexpr const char* kExitCodesHelp =
    "Exit codes: 0 success; 1 usage error; 2 cannot connect; 3 the RPC failed "
    "(gRPC status and message on stderr); 4 not found (health: not serving).";

// Thrown by subcommands to leave with a code and a message on stderr.
struct Exit {
  int code;
  std::string message;
};

struct Global {
  std::string endpoint = "127.0.0.1:7070";
  std::string timeout = "10s";
  std::string output = "table";
  std::string ns;
  // TLS: on with --tls or any of the files; the server is checked against
  // --tls-ca, else the system's roots.
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key;
  std::string token;
};

std::string ReadWholeFile(const std::string& path, const char* flag);

class Client {
 public:
  explicit Client(const Global& g) : g_(g) {
    auto t = delayd::ParseDuration(g.timeout);
    if (!t) throw Exit{kUsage, "--timeout: not a duration: " + g.timeout};
    timeout_ = *t;
    channel_ = grpc::CreateChannel(g.endpoint, Credentials(g));
    if (!channel_->WaitForConnected(std::chrono::system_clock::now() +
                                    timeout_)) {
      throw Exit{kCannotConnect, "cannot connect to " + g.endpoint};
    }
    stub_ = v1::Delayd::NewStub(channel_);
  }
  v1::Delayd::Stub& stub() { return *stub_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  // A context with the --timeout deadline (and the token).
  std::unique_ptr<grpc::ClientContext> Context() const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + timeout_);
    Authorize(*ctx);
    return ctx;
  }
  // Adds the bearer token, if any, to a call (streams have no deadline).
  void Authorize(grpc::ClientContext& ctx) const {
    if (!g_.token.empty()) {
      ctx.AddMetadata("authorization", "Bearer " + g_.token);
    }
  }
  bool json() const { return g_.output == "json"; }

 private:
  static std::shared_ptr<grpc::ChannelCredentials> Credentials(
      const Global& g) {
    if (!g.tls && g.tls_ca.empty() && g.tls_cert.empty() && g.tls_key.empty()) {
      return grpc::InsecureChannelCredentials();
    }
    if (g.tls_cert.empty() != g.tls_key.empty()) {
      throw Exit{kUsage, "--tls-cert and --tls-key go together"};
    }
    grpc::SslCredentialsOptions o;
    if (!g.tls_ca.empty())
      o.pem_root_certs = ReadWholeFile(g.tls_ca, "--tls-ca");
    if (!g.tls_cert.empty()) {
      o.pem_cert_chain = ReadWholeFile(g.tls_cert, "--tls-cert");
      o.pem_private_key = ReadWholeFile(g.tls_key, "--tls-key");
    }
    return grpc::SslCredentials(o);
  }

  const Global& g_;
  std::chrono::nanoseconds timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Delayd::Stub> stub_;
};

std::string ReadWholeFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Exit{kUsage, std::string(flag) + ": cannot read " + path};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    default:
      return "UNKNOWN";
  }
}

// Leaves with the right code for a failed call.
void Check(const grpc::Status& s) {
  if (s.ok()) return;
  const std::string text =
      std::string(CodeName(s.error_code())) + ": " + s.error_message();
  if (s.error_code() == grpc::StatusCode::NOT_FOUND)
    throw Exit{kNotFound, text};
  throw Exit{kRpcFailed, text};
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

// A JSON string literal.
std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

std::string Time(const google::protobuf::Timestamp& t) {
  return TimeUtil::ToString(t);
}

// Prints a table with a header row, columns padded to fit.
void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()));
    for (std::size_t c = 0; c < r.size(); ++c) {
      width[c] = std::max(width[c], r[c].size());
    }
  }
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size())
        line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

// Printable payload: as is when it is plain text, else a note of its size.
std::string Shown(const std::string& payload) {
  for (unsigned char c : payload) {
    if (c < 0x20 || c == 0x7f)
      return "<" + std::to_string(payload.size()) + " bytes>";
  }
  return payload;
}

// Payload from an argument, "@file", or "-" for stdin.
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

std::string ReasonName(v1::Reason r) {
  return r == v1::REASON_DRAINED ? "DRAINED" : "EXPIRED";
}

void PrintEvent(const Client& c, const v1::Event& e) {
  if (c.json()) {
    std::printf("%s\n", Json(e).c_str());
  } else {
    std::printf("%llu %s %s v%llu attempt=%u %s fire=%s fired=%s %s\n",
                static_cast<unsigned long long>(e.id()), e.namespace_().c_str(),
                e.key().c_str(), static_cast<unsigned long long>(e.version()),
                e.attempt(), ReasonName(e.reason()).c_str(),
                Time(e.fire_time()).c_str(), Time(e.fired_at()).c_str(),
                Shown(e.payload()).c_str());
  }
  std::fflush(stdout);
}

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  return set;
}

// Blocks the stop signals in this thread and every thread started after it;
// call before any thread exists (gRPC starts some with the first channel).
void BlockStopSignals() {
  sigset_t set = StopSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// Cancels `ctx` when SIGINT or SIGTERM arrives (taken by sigwait here, after
// BlockStopSignals), so a stream ends cleanly.
class SignalCanceller {
 public:
  explicit SignalCanceller(grpc::ClientContext* ctx) {
    const sigset_t set = StopSignals();
    thread_ = std::thread([ctx, set, this] {
      int sig = 0;
      sigwait(&set, &sig);
      if (sig != SIGUSR1) {
        interrupted_ = true;
        ctx->TryCancel();
      }
    });
  }
  ~SignalCanceller() {
    pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
  }
  bool interrupted() const { return interrupted_; }

 private:
  std::atomic<bool> interrupted_{false};
  std::thread thread_;
};

// ---- subcommands ----

struct TimerArgs {
  std::string key, payload, in, at;
  bool if_absent = false;
  std::uint64_t version = 0;
};

int CmdSet(Client& c, const Global& g, const TimerArgs& a) {
  v1::SetTimerRequest req;
  req.set_namespace_(g.ns);
  req.set_key(a.key);
  req.set_payload(ReadPayload(a.payload));
  req.set_if_absent(a.if_absent);
  SetWhen(a.in, a.at, &req);
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

int CmdMove(Client& c, const Global& g, const TimerArgs& a) {
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

int CmdRemove(Client& c, const Global& g, const TimerArgs& a) {
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

int CmdGet(Client& c, const Global& g, const TimerArgs& a) {
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

int CmdList(Client& c, const Global& g, const std::string& prefix,
            std::size_t limit, bool no_payloads) {
  std::vector<std::vector<std::string>> rows = {
      {"NAMESPACE", "KEY", "VERSION", "FIRE TIME", "PAYLOAD"}};
  std::string token;
  std::size_t shown = 0;
  do {
    v1::ListTimersRequest req;
    req.set_namespace_(g.ns);
    req.set_key_prefix(prefix);
    req.set_page_size(1000);
    req.set_page_token(token);
    req.set_without_payloads(no_payloads);
    v1::ListTimersResponse resp;
    Check(c.stub().ListTimers(c.Context().get(), req, &resp));
    for (const auto& t : resp.timers()) {
      if (limit != 0 && shown == limit) break;
      ++shown;
      if (c.json()) {
        std::printf("%s\n", Json(t).c_str());
      } else {
        rows.push_back({t.namespace_(), t.key(), std::to_string(t.version()),
                        Time(t.fire_time()), Shown(t.payload())});
      }
    }
    token = resp.next_page_token();
  } while (!token.empty() && (limit == 0 || shown < limit));
  if (!c.json()) PrintTable(rows);
  return kOk;
}

int CmdDrain(Client& c, const Global& g) {
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

int CmdBatch(Client& c, const Global& g, const std::string& file) {
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

int CmdWatch(Client& c, const Global& g, std::uint64_t count) {
  grpc::ClientContext ctx;
  c.Authorize(ctx);
  SignalCanceller canceller(&ctx);
  v1::SubscribeRequest req;
  req.set_namespace_(g.ns);
  req.set_mode(v1::SubscribeRequest::WATCHER);
  auto reader = c.stub().Subscribe(&ctx, req);
  v1::SubscribeResponse msg;
  std::uint64_t seen = 0;
  while ((count == 0 || seen < count) && reader->Read(&msg)) {
    for (const auto& e : msg.events()) {
      PrintEvent(c, e);
      if (count != 0 && ++seen == count) break;
    }
  }
  if (count != 0 && seen == count) ctx.TryCancel();
  grpc::Status s = reader->Finish();
  if (canceller.interrupted() || (count != 0 && seen == count)) return kOk;
  Check(s);
  return kOk;
}

// Runs `command` with `e`'s payload on stdin and its fields in the
// environment; returns the exit status (or -1 if it could not run).
int RunForEvent(const std::string& command, const v1::Event& e) {
  // The environment and arguments are built before fork(): gRPC's threads
  // may hold the allocator's lock at that moment, and a child that
  // allocated before exec would wait for it forever.
  const std::vector<std::string> vars = {
      "DELAYD_EVENT_ID=" + std::to_string(e.id()),
      "DELAYD_NAMESPACE=" + e.namespace_(),
      "DELAYD_KEY=" + e.key(),
      "DELAYD_VERSION=" + std::to_string(e.version()),
      "DELAYD_ATTEMPT=" + std::to_string(e.attempt()),
      "DELAYD_FIRE_TIME=" + Time(e.fire_time()),
      "DELAYD_FIRED_AT=" + Time(e.fired_at()),
      "DELAYD_REASON=" + ReasonName(e.reason())};
  std::vector<char*> envp;
  for (char** v = environ; *v != nullptr; ++v) {
    const std::string_view entry(*v);
    const bool ours = std::any_of(vars.begin(), vars.end(), [&](auto& o) {
      return entry.substr(0, entry.find('=') + 1) ==
             std::string_view(o).substr(0, o.find('=') + 1);
    });
    if (!ours) envp.push_back(*v);
  }
  for (const auto& v : vars) envp.push_back(const_cast<char*>(v.c_str()));
  envp.push_back(nullptr);
  const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
  int in[2];
  if (pipe(in) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    close(in[0]);
    close(in[1]);
    execve("/bin/sh", const_cast<char* const*>(argv), envp.data());
    _exit(127);
  }
  close(in[0]);
  signal(SIGPIPE, SIG_IGN);
  const std::string& p = e.payload();
  for (std::size_t off = 0; off < p.size();) {
    const ssize_t n = write(in[1], p.data() + off, p.size() - off);
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  close(in[1]);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int CmdWork(Client& c, const Global& g, const std::string& command,
            std::uint32_t concurrency, const std::string& ack_timeout,
            std::uint64_t count) {
  auto timeout = delayd::ParseDuration(ack_timeout);
  if (!timeout) throw Exit{kUsage, "--ack-timeout: not a duration"};
  grpc::ClientContext ctx;
  c.Authorize(ctx);
  SignalCanceller canceller(&ctx);
  v1::SubscribeRequest req;
  req.set_namespace_(g.ns);
  req.set_mode(v1::SubscribeRequest::WORKER);
  // The daemon never hands over more than can run at once.
  req.set_max_in_flight(concurrency);
  *req.mutable_ack_timeout() =
      TimeUtil::NanosecondsToDuration(timeout->count());
  auto reader = c.stub().Subscribe(&ctx, req);
  // A fixed pool of `concurrency` threads runs the commands; the reader
  // waits while all of them are busy.
  asio::thread_pool pool(concurrency);
  std::mutex mu;
  std::condition_variable cv;
  std::uint32_t running = 0;
  v1::SubscribeResponse msg;
  std::uint64_t started = 0;
  while ((count == 0 || started < count) && reader->Read(&msg)) {
    for (const auto& e : msg.events()) {
      if (count != 0 && started == count) break;
      ++started;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return running < concurrency; });
        ++running;
      }
      asio::post(pool, [&, e] {
        const int code = RunForEvent(command, e);
        if (code == 0) {
          v1::AckRequest ack;
          ack.set_namespace_(e.namespace_());
          ack.add_event_ids(e.id());
          v1::AckResponse resp;
          grpc::Status s = c.stub().Ack(c.Context().get(), ack, &resp);
          if (!s.ok()) {
            std::fprintf(stderr, "event %llu: ack failed: %s\n",
                         static_cast<unsigned long long>(e.id()),
                         s.error_message().c_str());
          }
        } else {
          std::fprintf(stderr,
                       "event %llu (%s attempt %u): command exited %d; left "
                       "for redelivery\n",
                       static_cast<unsigned long long>(e.id()), e.key().c_str(),
                       e.attempt(), code);
        }
        if (!c.json()) {
          std::printf("%llu %s attempt=%u exit=%d\n",
                      static_cast<unsigned long long>(e.id()), e.key().c_str(),
                      e.attempt(), code);
        } else {
          std::printf(
              "{\"id\":\"%llu\",\"key\":%s,\"attempt\":%u,\"exit\":%d}\n",
              static_cast<unsigned long long>(e.id()),
              JsonString(e.key()).c_str(), e.attempt(), code);
        }
        std::fflush(stdout);
        std::lock_guard lock(mu);
        --running;
        cv.notify_all();
      });
    }
  }
  pool.join();
  if (count != 0 && started == count) ctx.TryCancel();
  grpc::Status s = reader->Finish();
  if (canceller.interrupted() || (count != 0 && started == count)) return kOk;
  Check(s);
  return kOk;
}

int CmdAck(Client& c, const Global& g, const std::vector<std::uint64_t>& ids) {
  v1::AckRequest req;
  req.set_namespace_(g.ns);
  for (auto id : ids) req.add_event_ids(id);
  v1::AckResponse resp;
  Check(c.stub().Ack(c.Context().get(), req, &resp));
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
  } else {
    std::printf("acked %u\n", resp.acked());
    for (auto id : resp.unknown_ids()) {
      std::printf("unknown %llu\n", static_cast<unsigned long long>(id));
    }
  }
  return resp.unknown_ids_size() == 0 ? kOk : kNotFound;
}

int CmdBackup(Client& c, const std::string& dir) {
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

int CmdStats(Client& c) {
  v1::StatsResponse s;
  Check(c.stub().Stats(c.Context().get(), v1::StatsRequest(), &s));
  if (c.json()) {
    std::printf("%s\n", Json(s).c_str());
    return kOk;
  }
  PrintTable({{"pending_timers", std::to_string(s.pending_timers())},
              {"ready_events", std::to_string(s.ready_events())},
              {"in_flight_events", std::to_string(s.in_flight_events())},
              {"workers", std::to_string(s.workers())},
              {"watchers", std::to_string(s.watchers())},
              {"partitions", std::to_string(s.partitions())},
              {"timers_set", std::to_string(s.timers_set())},
              {"timers_fired", std::to_string(s.timers_fired())},
              {"events_acked", std::to_string(s.events_acked())},
              {"events_redelivered", std::to_string(s.events_redelivered())},
              {"durable", s.durable() ? "yes" : "no"},
              {"store_errors", std::to_string(s.store_errors())}});
  return kOk;
}

int CmdHealth(Client& c, const std::string& service) {
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"delayctl: operate a delayd daemon"};
  app.footer(kExitCodesHelp);
  app.require_subcommand(1);
  // Global options may also come after the subcommand.
  app.fallthrough();
  Global g;
  app.add_option("--endpoint", g.endpoint, "delayd address")
      ->envname("DELAYD_ENDPOINT")
      ->capture_default_str();
  app.add_flag("--tls", g.tls,
               "Use TLS, checking the server against the system's CAs")
      ->envname("DELAYD_TLS");
  app.add_option("--tls-ca", g.tls_ca,
                 "Use TLS, checking the server against these PEM CAs")
      ->envname("DELAYD_TLS_CA");
  app.add_option("--tls-cert", g.tls_cert,
                 "Client certificate (PEM) for mutual TLS")
      ->envname("DELAYD_TLS_CLIENT_CERT");
  app.add_option("--tls-key", g.tls_key, "Private key (PEM) of --tls-cert")
      ->envname("DELAYD_TLS_CLIENT_KEY");
  app.add_option("--token", g.token,
                 "Bearer token sent with every call (DELAYD_TOKEN)")
      ->envname("DELAYD_TOKEN");
  app.add_option("--timeout", g.timeout, "Deadline per call (e.g. 10s)")
      ->capture_default_str();
  app.add_option("-o,--output", g.output, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.add_option("-n,--namespace", g.ns, "Namespace (default: default)");

  TimerArgs a;
  auto when = [&](CLI::App* sub) {
    sub->add_option("--in", a.in, "Fire after this long (90s, 1h30m, 2d)");
    sub->add_option("--at", a.at, "Fire at this RFC 3339 time");
  };
  auto* set = app.add_subcommand("set", "Create or replace a timer");
  set->add_option("key", a.key)->required();
  set->add_option("payload", a.payload, "Payload: text, @file, or - for stdin");
  when(set);
  set->add_flag("--if-absent", a.if_absent, "Fail if the key is pending");
  auto* move = app.add_subcommand("move", "Change a pending timer's fire time");
  move->add_option("key", a.key)->required();
  when(move);
  move->add_option("--version", a.version, "Only if at this version");
  auto* rm = app.add_subcommand("rm", "Remove a pending timer");
  rm->add_option("key", a.key)->required();
  rm->add_option("--version", a.version, "Only if at this version");
  auto* get = app.add_subcommand("get", "Show a pending timer");
  get->add_option("key", a.key)->required();
  std::string prefix;
  std::size_t limit = 0;
  bool no_payloads = false;
  auto* ls = app.add_subcommand("ls", "List pending timers");
  ls->add_option("--prefix", prefix, "Only keys starting with this");
  ls->add_option("--limit", limit, "At most this many (0: all)");
  ls->add_flag("--no-payloads", no_payloads, "Leave payloads out");
  auto* drain = app.add_subcommand("drain", "Fire every pending timer now");
  std::string file = "-";
  auto* batch = app.add_subcommand(
      "batch",
      "Apply operations from a file or stdin, one per line: 'set KEY DURATION "
      "[PAYLOAD]', 'move KEY DURATION', 'rm KEY', or a JSON operation");
  batch->add_option("file", file, "File, or - for stdin")
      ->capture_default_str();
  std::uint64_t count = 0;
  auto* watch = app.add_subcommand("watch", "Print every event as it fires");
  watch->add_option("--count", count, "Stop after this many (0: never)");
  std::string command, ack_timeout = "30s";
  std::uint32_t concurrency = 1;
  auto* work = app.add_subcommand(
      "work",
      "Run a command per event (payload on stdin, DELAYD_* env vars); ack "
      "when it exits 0, leave for redelivery otherwise");
  work->add_option("--exec", command, "Shell command")->required();
  work->add_option("--concurrency", concurrency, "Commands at once")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  work->add_option("--ack-timeout", ack_timeout,
                   "Redeliver if not done within this")
      ->capture_default_str();
  work->add_option("--count", count, "Stop after this many (0: never)");
  std::vector<std::uint64_t> ids;
  auto* ack = app.add_subcommand("ack", "Acknowledge events by id");
  ack->add_option("ids", ids)->required();
  auto* stats = app.add_subcommand("stats", "Show counters");
  std::string backup_dir;
  auto* backup = app.add_subcommand(
      "backup",
      "Write a consistent copy of the store on the daemon's disk, in DIR "
      "under its --backup-dir");
  backup
      ->add_option("dir", backup_dir,
                   "New directory (relative to the "
                   "daemon's --backup-dir)")
      ->required();
  auto* health =
      app.add_subcommand("health", "Check health (0 serving, 4 not)");
  std::string health_service;
  health->add_option("service", health_service,
                     "Service: empty (the server), delayd.v1.Delayd, or "
                     "delayd.store (NOT_SERVING once the store failed)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kOk : kUsage;
  }
  try {
    // Usage errors come before any connection attempt.
    if (*set || *move) {
      v1::SetTimerRequest check;
      SetWhen(a.in, a.at, &check);
    }
    if (*watch || *work) BlockStopSignals();
    Client c(g);
    if (*set) return CmdSet(c, g, a);
    if (*move) return CmdMove(c, g, a);
    if (*rm) return CmdRemove(c, g, a);
    if (*get) return CmdGet(c, g, a);
    if (*ls) return CmdList(c, g, prefix, limit, no_payloads);
    if (*drain) return CmdDrain(c, g);
    if (*batch) return CmdBatch(c, g, file);
    if (*watch) return CmdWatch(c, g, count);
    if (*work) return CmdWork(c, g, command, concurrency, ack_timeout, count);
    if (*ack) return CmdAck(c, g, ids);
    if (*stats) return CmdStats(c);
    if (*backup) return CmdBackup(c, backup_dir);
    if (*health) return CmdHealth(c, health_service);
  } catch (const Exit& e) {
    std::fprintf(stderr, "delayctl: %s\n", e.message.c_str());
    return e.code;
  }
  return kUsage;
}
