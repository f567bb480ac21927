// Events: watch, work, ack, nack, extend.
#include <google/protobuf/util/time_util.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <asio/post.hpp>
#include <asio/thread_pool.hpp>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "client/delayctl/commands.h"
#include "client/delayctl/exit_codes.h"
#include "client/delayctl/print.h"
#include "client/delayctl/signals.h"
#include "delayd/text/duration.h"

namespace delayctl {
namespace {

int Watch(Client& c, const Global& g, std::uint64_t count) {
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
      PrintEvent(c.json(), e);
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

struct WorkArgs {
  std::string command, ack_timeout = "30s";
  std::uint32_t concurrency = 1;
  std::uint64_t count = 0;
};

// Acks `e` after its command exited 0; nacks it otherwise, so that it comes
// back after the backoff for its attempt. Prints one line per event.
void Finish(Client& c, const v1::Event& e, int code) {
  grpc::Status s;
  if (code == 0) {
    v1::AckRequest ack;
    ack.set_namespace_(e.namespace_());
    ack.add_event_ids(e.id());
    v1::AckResponse resp;
    s = c.stub().Ack(c.Context().get(), ack, &resp);
  } else {
    v1::NackRequest nack;
    nack.set_namespace_(e.namespace_());
    nack.add_event_ids(e.id());
    nack.set_error("command exited " + std::to_string(code));
    v1::NackResponse resp;
    s = c.stub().Nack(c.Context().get(), nack, &resp);
    std::fprintf(stderr,
                 "event %llu (%s attempt %u): command exited %d; nacked, it "
                 "comes back after the backoff\n",
                 static_cast<unsigned long long>(e.id()), e.key().c_str(),
                 e.attempt(), code);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "event %llu: %s failed: %s\n",
                 static_cast<unsigned long long>(e.id()),
                 code == 0 ? "ack" : "nack", s.error_message().c_str());
  }
  if (!c.json()) {
    std::printf("%llu %s attempt=%u exit=%d\n",
                static_cast<unsigned long long>(e.id()), e.key().c_str(),
                e.attempt(), code);
  } else {
    std::printf("{\"id\":\"%llu\",\"key\":%s,\"attempt\":%u,\"exit\":%d}\n",
                static_cast<unsigned long long>(e.id()),
                JsonString(e.key()).c_str(), e.attempt(), code);
  }
  std::fflush(stdout);
}

// Keeps the leases of the events whose commands run: every half ack
// timeout, one ExtendLease of all of them by an ack timeout, so a command
// may run as long as it needs and a dead delayctl's events still come back.
class LeaseKeeper {
 public:
  LeaseKeeper(Client& c, const std::string& ns,
              std::chrono::nanoseconds ack_timeout)
      : c_(c), ns_(ns), ack_timeout_(ack_timeout) {
    thread_ = std::thread([this] { Run(); });
  }
  ~LeaseKeeper() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Started(std::uint64_t id) {
    std::lock_guard lock(mu_);
    running_.insert(id);
  }
  void Ended(std::uint64_t id) {
    std::lock_guard lock(mu_);
    running_.erase(id);
  }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, ack_timeout_ / 2, [this] { return stop_; })) {
      if (running_.empty()) continue;
      v1::ExtendLeaseRequest req;
      req.set_namespace_(ns_);
      for (auto id : running_) req.add_event_ids(id);
      *req.mutable_extension() =
          google::protobuf::util::TimeUtil::NanosecondsToDuration(
              ack_timeout_.count());
      lock.unlock();
      v1::ExtendLeaseResponse resp;
      grpc::Status s = c_.stub().ExtendLease(c_.Context().get(), req, &resp);
      if (!s.ok()) {
        std::fprintf(stderr, "extending leases failed: %s\n",
                     s.error_message().c_str());
      }
      lock.lock();
    }
  }

  Client& c_;
  const std::string ns_;
  const std::chrono::nanoseconds ack_timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::set<std::uint64_t> running_;
  std::thread thread_;
};

int Work(Client& c, const Global& g, const WorkArgs& a) {
  auto timeout = delayd::ParseDuration(a.ack_timeout);
  if (!timeout) throw Exit{kUsage, "--ack-timeout: not a duration"};
  grpc::ClientContext ctx;
  c.Authorize(ctx);
  SignalCanceller canceller(&ctx);
  v1::SubscribeRequest req;
  req.set_namespace_(g.ns);
  req.set_mode(v1::SubscribeRequest::WORKER);
  // The daemon never hands over more than can run at once, nor more than
  // --count in all: an event handed to a stream that then ends counts as
  // an attempt (and may be its last).
  req.set_max_in_flight(a.concurrency);
  req.set_max_events(a.count);
  *req.mutable_ack_timeout() =
      google::protobuf::util::TimeUtil::NanosecondsToDuration(timeout->count());
  auto reader = c.stub().Subscribe(&ctx, req);
  LeaseKeeper leases(c, g.ns, *timeout);
  // A fixed pool of `concurrency` threads runs the commands; the reader
  // waits while all of them are busy.
  asio::thread_pool pool(a.concurrency);
  std::mutex mu;
  std::condition_variable cv;
  std::uint32_t running = 0;
  v1::SubscribeResponse msg;
  std::uint64_t started = 0;
  const std::uint64_t count = a.count;
  while ((count == 0 || started < count) && reader->Read(&msg)) {
    for (const auto& e : msg.events()) {
      if (count != 0 && started == count) break;
      ++started;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return running < a.concurrency; });
        ++running;
      }
      asio::post(pool, [&, e] {
        leases.Started(e.id());
        const int code = RunForEvent(a.command, e);
        leases.Ended(e.id());
        Finish(c, e, code);
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

struct LeaseArgs {
  std::vector<std::uint64_t> ids;
  std::string duration;  // Nack: the retry time (empty: backoff).
  std::string error;     // Nack: what went wrong.
};

// Prints "VERB N" and each unknown id; kNotFound if there were any.
template <typename Resp>
int PrintIdsResult(Client& c, const Resp& resp, const char* verb,
                   std::uint32_t done) {
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
  } else {
    std::printf("%s %u\n", verb, done);
    for (auto id : resp.unknown_ids()) {
      std::printf("unknown %llu\n", static_cast<unsigned long long>(id));
    }
  }
  return resp.unknown_ids_size() == 0 ? kOk : kNotFound;
}

int Nack(Client& c, const Global& g, const LeaseArgs& a) {
  v1::NackRequest req;
  req.set_namespace_(g.ns);
  for (auto id : a.ids) req.add_event_ids(id);
  if (!a.duration.empty()) {
    *req.mutable_retry_after() = DurationFlag(a.duration, "--retry-after");
  }
  req.set_error(a.error);
  v1::NackResponse resp;
  Check(c.stub().Nack(c.Context().get(), req, &resp));
  return PrintIdsResult(c, resp, "nacked", resp.nacked());
}

int Extend(Client& c, const Global& g, const LeaseArgs& a) {
  v1::ExtendLeaseRequest req;
  req.set_namespace_(g.ns);
  for (auto id : a.ids) req.add_event_ids(id);
  *req.mutable_extension() = DurationFlag(a.duration, "--by");
  v1::ExtendLeaseResponse resp;
  Check(c.stub().ExtendLease(c.Context().get(), req, &resp));
  return PrintIdsResult(c, resp, "extended", resp.extended());
}

int Ack(Client& c, const Global& g, const std::vector<std::uint64_t>& ids) {
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

}  // namespace

void AddWorkerCommands(CLI::App& app, const Global& g, Commands& out) {
  auto count = std::make_shared<std::uint64_t>(0);
  auto* watch = app.add_subcommand("watch", "Print every event as it fires");
  watch->add_option("--count", *count, "Stop after this many (0: never)");
  out.push_back({watch,
                 {},
                 [] { return true; },
                 [&g, count](Client& c) { return Watch(c, g, *count); }});

  auto w = std::make_shared<WorkArgs>();
  auto* work = app.add_subcommand(
      "work",
      "Run a command per event (payload on stdin, DELAYD_* env vars), "
      "extending its lease while it runs; ack when it exits 0, nack "
      "otherwise (it comes back after the backoff)");
  work->add_option("--exec", w->command, "Shell command")->required();
  work->add_option("--concurrency", w->concurrency, "Commands at once")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  work->add_option("--ack-timeout", w->ack_timeout,
                   "Lease per event; extended while its command runs, so "
                   "that it ends this long after delayctl does")
      ->capture_default_str();
  work->add_option("--count", w->count, "Stop after this many (0: never)");
  out.push_back({work,
                 [w] {
                   if (!delayd::ParseDuration(w->ack_timeout)) {
                     throw Exit{kUsage, "--ack-timeout: not a duration: " +
                                            w->ack_timeout};
                   }
                 },
                 [] { return true; },
                 [&g, w](Client& c) { return Work(c, g, *w); }});

  auto n = std::make_shared<LeaseArgs>();
  auto* nack = app.add_subcommand(
      "nack",
      "Say delivered events failed: they come back after --retry-after, or "
      "the backoff for their attempt");
  nack->add_option("ids", n->ids)->required();
  nack->add_option("--retry-after", n->duration,
                   "Deliver again after this long (0s: at once)");
  nack->add_option("--error", n->error,
                   "What went wrong (kept should it become a dead letter)");
  out.push_back({nack,
                 [n] {
                   if (!n->duration.empty()) {
                     DurationFlag(n->duration, "--retry-after");
                   }
                 },
                 {},
                 [&g, n](Client& c) { return Nack(c, g, *n); }});

  auto x = std::make_shared<LeaseArgs>();
  auto* extend = app.add_subcommand(
      "extend", "Say delivered events are still being worked on");
  extend->add_option("ids", x->ids)->required();
  extend->add_option("--by", x->duration, "New ack deadline, from now")
      ->required();
  out.push_back({extend,
                 [x] { DurationFlag(x->duration, "--by"); },
                 {},
                 [&g, x](Client& c) { return Extend(c, g, *x); }});

  auto ids = std::make_shared<std::vector<std::uint64_t>>();
  auto* ack = app.add_subcommand("ack", "Acknowledge events by id");
  ack->add_option("ids", *ids)->required();
  out.push_back(
      {ack, {}, {}, [&g, ids](Client& c) { return Ack(c, g, *ids); }});
}

}  // namespace delayctl
