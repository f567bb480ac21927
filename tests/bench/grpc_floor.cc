// The floor under delayd's CPU at moderate load: what a gRPC C++ server on
// this machine spends per unary call when calls come one at a time at a
// steady pace, with nothing to do but answer (grpc.health.v1 Check, an
// empty answer). Each server runs in a child process of its own, so its CPU
// (user + system, from /proc) is its alone; the client is this process,
// which runs itself again as `grpc_floor --serve SHAPE FD` for each server.
//
//   grpc_floor [--rate N] [--seconds N] [--rounds N] [--timer-only]
//
// Shapes, each the way its API is meant to be used:
//   callback  the callback API (what delayd uses): the handler finishes the
//             call inline;
//   async-1   the completion-queue API with one thread that polls the queue
//             and answers each call on it (no hand-over at all);
//   async-2   the same with two threads on the queue;
//   sync      the synchronous API (gRPC's own thread pool).
// Each round also measures every shape's ceiling: Checks/s with 64 calls in
// flight over 4 connections (load_gen's health figure). Rounds alternate
// between the shapes; medians are printed, with the range.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/bench/bench_client.h"

namespace {

using delayd::bench::Bench;
using delayd::bench::Clock;
using delayd::bench::CpuSeconds;
namespace health = grpc::health::v1;

class CallbackHealth : public health::Health::CallbackService {
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const health::HealthCheckRequest*,
                                  health::HealthCheckResponse* resp) override {
    resp->set_status(health::HealthCheckResponse::SERVING);
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
};

class SyncHealth : public health::Health::Service {
  grpc::Status Check(grpc::ServerContext*, const health::HealthCheckRequest*,
                     health::HealthCheckResponse* resp) override {
    resp->set_status(health::HealthCheckResponse::SERVING);
    return grpc::Status::OK;
  }
};

// One call in the completion-queue shape: requested, then answered.
struct AsyncCall {
  grpc::ServerContext ctx;
  health::HealthCheckRequest req;
  health::HealthCheckResponse resp;
  grpc::ServerAsyncResponseWriter<health::HealthCheckResponse> writer{&ctx};
  bool answered = false;
};

// What a completion-queue operation does when it completes.
struct Tag {
  std::function<void(bool)> done;
};
void* NewTag(std::function<void(bool)> done) {
  return new Tag{std::move(done)};
}

// The timer shape on one completion-queue thread, the least a gRPC server
// can do for delayd's traffic: a Check for service "set" (a SetTimer) is
// answered and comes due kAhead later, when the thread's wait on the queue
// ends and it writes one message on the open Watch stream (the event); a
// Check for "ack" is answered. Three wake-ups per timer, all on one thread;
// no store, no wheel.
constexpr auto kAhead = std::chrono::milliseconds(2);
[[noreturn]] void ServeTimers(health::Health::AsyncService& svc,
                              grpc::ServerCompletionQueue* cq) {
  grpc::ServerContext watch_ctx;
  health::HealthCheckRequest watch_req;
  grpc::ServerAsyncWriter<health::HealthCheckResponse> watch(&watch_ctx);
  health::HealthCheckResponse event;
  event.set_status(health::HealthCheckResponse::SERVING);
  // Due times, in order (all are kAhead after their set). The queue's own
  // deadline wakes this thread for them: no timer thread, no hand-over.
  std::deque<std::chrono::system_clock::time_point> timers;
  bool watching = false, writing = false;
  int due = 0;  // Events fired and not yet written.
  std::function<void()> write_next = [&] {
    if (!watching || writing || due == 0) return;
    --due;
    writing = true;
    watch.Write(event, NewTag([&](bool ok) {
                  writing = false;
                  if (ok) write_next();
                }));
  };
  svc.RequestWatch(&watch_ctx, &watch_req, &watch, cq, cq, NewTag([&](bool ok) {
    watching = ok;
    write_next();
  }));
  std::function<void()> request_check = [&] {
    auto* c = new AsyncCall;
    svc.RequestCheck(
        &c->ctx, &c->req, &c->writer, cq, cq, NewTag([&, c](bool ok) {
          if (!ok) {
            delete c;
            return;
          }
          request_check();
          if (c->req.service() == "set") {
            timers.push_back(std::chrono::system_clock::now() + kAhead);
          }
          c->resp.set_status(health::HealthCheckResponse::SERVING);
          c->writer.Finish(c->resp, grpc::Status::OK,
                           NewTag([c](bool) { delete c; }));
        }));
  };
  request_check();
  void* tag;
  bool ok;
  for (;;) {
    const auto next = timers.empty() ? std::chrono::system_clock::now() +
                                           std::chrono::seconds(1)
                                     : timers.front();
    switch (cq->AsyncNext(&tag, &ok, next)) {
      case grpc::CompletionQueue::SHUTDOWN:
        std::_Exit(0);
      case grpc::CompletionQueue::TIMEOUT:
        break;
      case grpc::CompletionQueue::GOT_EVENT: {
        auto* t = static_cast<Tag*>(tag);
        t->done(ok);
        delete t;
      }
    }
    const auto now = std::chrono::system_clock::now();
    while (!timers.empty() && timers.front() <= now) {
      timers.pop_front();
      ++due;
    }
    write_next();
  }
}

// A log that every answer waits for: each group of requests is appended to
// `fd` and made durable (fdatasync) before any of them is answered.
void AppendDurably(int fd, const std::string& bytes) {
  if (write(fd, bytes.data(), bytes.size()) !=
          static_cast<ssize_t>(bytes.size()) ||
      fdatasync(fd) != 0) {
    std::perror("log");
    std::_Exit(1);
  }
}

// A writer thread that appends and syncs whatever calls gathered while it
// last wrote, then runs their answers.
class LogWriter {
 public:
  explicit LogWriter(int fd) : fd_(fd) {
    std::thread([this] { Loop(); }).detach();
  }
  void Add(const std::string& bytes, std::function<void()> answer) {
    {
      std::lock_guard lock(mu_);
      bytes_ += bytes;
      answers_.push_back(std::move(answer));
    }
    cv_.notify_one();
  }

 private:
  [[noreturn]] void Loop() {
    std::vector<std::function<void()>> group;
    std::string bytes;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !answers_.empty(); });
        group.swap(answers_);
        bytes.swap(bytes_);
      }
      AppendDurably(fd_, bytes);
      for (auto& answer : group) answer();
      group.clear();
      bytes.clear();
    }
  }
  const int fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::function<void()>> answers_;  // Under mu_.
  std::string bytes_;                           // Under mu_.
};

// callback+log: the callback API's handler hands each call to the writer,
// which finishes it once synced (delayd's shape without its store: one
// hand-over each way).
class LoggedCallbackHealth : public health::Health::CallbackService {
 public:
  explicit LoggedCallbackHealth(LogWriter* log) : log_(log) {}
  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx,
                                  const health::HealthCheckRequest* req,
                                  health::HealthCheckResponse* resp) override {
    resp->set_status(health::HealthCheckResponse::SERVING);
    auto* r = ctx->DefaultReactor();
    log_->Add(req->SerializeAsString(), [r] { r->Finish(grpc::Status::OK); });
    return r;
  }

 private:
  LogWriter* const log_;
};

// cq1+writer: one completion-queue thread takes the calls and hands each to
// the writer, which answers it once synced; the answer's completion comes
// back to the queue's thread.
[[noreturn]] void ServeWithWriter(health::Health::AsyncService& svc,
                                  grpc::ServerCompletionQueue* cq,
                                  LogWriter* log) {
  auto request = [&] {
    auto* c = new AsyncCall;
    svc.RequestCheck(&c->ctx, &c->req, &c->writer, cq, cq, c);
  };
  request();
  void* tag;
  bool ok;
  while (cq->Next(&tag, &ok)) {
    auto* c = static_cast<AsyncCall*>(tag);
    if (c->answered || !ok) {
      delete c;
      continue;
    }
    request();
    c->answered = true;
    log->Add(c->req.SerializeAsString(), [c] {
      c->resp.set_status(health::HealthCheckResponse::SERVING);
      c->writer.Finish(c->resp, grpc::Status::OK, c);
    });
  }
  std::_Exit(0);
}

// cq1+log: one completion-queue thread takes every call that is ready, then
// appends and syncs them as one group and answers them, all on itself (the
// leader shape with no other thread).
[[noreturn]] void ServeLogged(health::Health::AsyncService& svc,
                              grpc::ServerCompletionQueue* cq, int fd) {
  auto request = [&] {
    auto* c = new AsyncCall;
    svc.RequestCheck(&c->ctx, &c->req, &c->writer, cq, cq, c);
  };
  request();
  std::vector<AsyncCall*> group;
  std::string bytes;
  for (;;) {
    void* tag;
    bool ok;
    // Waits for the first event; then takes what is ready without waiting.
    const auto got =
        group.empty()
            ? (cq->Next(&tag, &ok) ? grpc::CompletionQueue::GOT_EVENT
                                   : grpc::CompletionQueue::SHUTDOWN)
            : cq->AsyncNext(&tag, &ok, std::chrono::system_clock::now());
    if (got == grpc::CompletionQueue::SHUTDOWN) std::_Exit(0);
    if (got == grpc::CompletionQueue::GOT_EVENT) {
      auto* c = static_cast<AsyncCall*>(tag);
      if (c->answered || !ok) {
        delete c;
      } else {
        request();
        bytes += c->req.SerializeAsString();
        group.push_back(c);
      }
      continue;
    }
    AppendDurably(fd, bytes);
    for (auto* c : group) {
      c->answered = true;
      c->resp.set_status(health::HealthCheckResponse::SERVING);
      c->writer.Finish(c->resp, grpc::Status::OK, c);
    }
    group.clear();
    bytes.clear();
  }
}

// Serves until killed; writes its port to `port_fd`.
// `log`: the file the +log shapes append to.
[[noreturn]] void Serve(const std::string& shape, int port_fd,
                        const char* log) {
  const int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  CallbackHealth callback;
  SyncHealth sync;
  health::Health::AsyncService async;
  std::unique_ptr<grpc::ServerCompletionQueue> cq;
  if (shape == "callback") b.RegisterService(&callback);
  if (shape == "sync") b.RegisterService(&sync);
  std::unique_ptr<LogWriter> writer;
  if (shape == "callback+log" || shape == "cq1+writer") {
    writer = std::make_unique<LogWriter>(fd);
  }
  LoggedCallbackHealth logged(writer.get());
  if (shape == "callback+log") b.RegisterService(&logged);
  if (shape.rfind("async", 0) == 0 || shape == "timer-1" ||
      shape.rfind("cq1", 0) == 0) {
    b.RegisterService(&async);
    cq = b.AddCompletionQueue();
  }
  auto server = b.BuildAndStart();
  if (write(port_fd, &port, sizeof port) != sizeof port) std::_Exit(1);
  if (!cq) {
    server->Wait();
    std::_Exit(0);
  }
  if (shape == "timer-1") ServeTimers(async, cq.get());
  if (shape == "cq1+log") ServeLogged(async, cq.get(), fd);
  if (shape == "cq1+writer") ServeWithWriter(async, cq.get(), writer.get());
  auto request = [&] {
    auto* c = new AsyncCall;
    async.RequestCheck(&c->ctx, &c->req, &c->writer, cq.get(), cq.get(), c);
  };
  auto poll = [&] {
    void* tag;
    bool ok;
    while (cq->Next(&tag, &ok)) {
      auto* c = static_cast<AsyncCall*>(tag);
      if (c->answered || !ok) {
        delete c;
        continue;
      }
      request();
      c->answered = true;
      c->resp.set_status(health::HealthCheckResponse::SERVING);
      c->writer.Finish(c->resp, grpc::Status::OK, c);
    }
  };
  // As many calls requested as threads poll, so none waits for a request.
  std::vector<std::thread> more;
  for (int i = 1; i < (shape == "async-2" ? 2 : 1); ++i) {
    request();
    more.emplace_back(poll);
  }
  request();
  poll();
  std::_Exit(0);
}

// Starts `grpc_floor --serve SHAPE FD LOG` (a fresh process image: gRPC's
// threads in this one do not survive fork); returns its pid and port.
std::pair<pid_t, int> Spawn(const std::string& shape) {
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  const std::string log = std::filesystem::temp_directory_path() /
                          ("grpc-floor-" + std::to_string(getpid()) + ".log");
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    const std::string fd = std::to_string(fds[1]);
    execl("/proc/self/exe", "grpc_floor", "--serve", shape.c_str(), fd.c_str(),
          log.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  close(fds[1]);
  int port = 0;
  if (read(fds[0], &port, sizeof port) != sizeof port) std::exit(1);
  close(fds[0]);
  return {child, port};
}

// Ends a child of Spawn and removes its log.
void Reap(pid_t child) {
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  std::filesystem::remove(std::filesystem::temp_directory_path() /
                          ("grpc-floor-" + std::to_string(getpid()) + ".log"));
}

struct Figures {
  double us_per_call = -1;  // Server CPU at the steady pace.
  double peak = -1;         // Checks/s, 64 in flight.
};

// Server CPU in µs per call at `rate` calls/s, one at a time, `seconds`;
// then the shape's ceiling for `seconds`.
Figures Round(const std::string& shape, int rate, int seconds, bool steady) {
  const auto [child, port] = Spawn(shape);
  Figures f;
  {
    auto ch = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                  grpc::InsecureChannelCredentials());
    auto stub = health::Health::NewStub(ch);
    auto check = [&] {
      health::HealthCheckRequest req;
      health::HealthCheckResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
      return stub->Check(&ctx, req, &resp).ok();
    };
    for (int i = 0; i < 200; ++i) check();  // Warm-up.
    const long n = steady ? static_cast<long>(rate) * seconds : 0;
    const double cpu = CpuSeconds(child);
    const auto start = Clock::now();
    long ok = 0;
    for (long i = 0; i < n; ++i) {
      std::this_thread::sleep_until(
          start + std::chrono::nanoseconds(1'000'000'000L / rate * i));
      ok += check();
    }
    if (n > 0 && ok == n) f.us_per_call = 1e6 * (CpuSeconds(child) - cpu) / n;
    Bench bench("127.0.0.1:" + std::to_string(port), 4);
    f.peak = bench.HealthRate(64, std::chrono::seconds(seconds));
  }
  Reap(child);
  return f;
}

// Server CPU in µs per timer at `rate` timers/s for `seconds` on the timer
// shape: this process sets ("set" Checks, one at a time, paced) and a worker
// thread acknowledges each event with an "ack" Check as it arrives.
double TimerRound(int rate, int seconds) {
  const auto [child, port] = Spawn("timer-1");
  const long n = static_cast<long>(rate) * seconds;
  double per_timer = -1;
  {
    auto ch = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                  grpc::InsecureChannelCredentials());
    auto stub = health::Health::NewStub(ch);
    auto check = [&](const char* service) {
      health::HealthCheckRequest req;
      req.set_service(service);
      health::HealthCheckResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
      return stub->Check(&ctx, req, &resp).ok();
    };
    grpc::ClientContext watch_ctx;
    watch_ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(seconds + 20));
    health::HealthCheckRequest watch_req;
    auto reader = stub->Watch(&watch_ctx, watch_req);
    std::atomic<long> acked{0};
    std::thread worker([&] {
      health::HealthCheckResponse ev;
      while (acked.load() < n + 10 && reader->Read(&ev)) {
        if (check("ack")) acked.fetch_add(1);
      }
    });
    for (int i = 0; i < 10; ++i) check("set");  // Warm-up: 10 events.
    const auto warm_deadline = Clock::now() + std::chrono::seconds(5);
    while (acked.load() < 10 && Clock::now() < warm_deadline) {
      std::this_thread::yield();
    }
    const double cpu = CpuSeconds(child);
    const auto start = Clock::now();
    for (long i = 0; i < n; ++i) {
      std::this_thread::sleep_until(
          start + std::chrono::nanoseconds(1'000'000'000L / rate * i));
      check("set");
    }
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (acked.load() < n + 10 && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (acked.load() == n + 10) {
      per_timer = 1e6 * (CpuSeconds(child) - cpu) / n;
    } else {
      std::fprintf(stderr, "timer round: %ld of %ld events acknowledged\n",
                   acked.load(), n + 10);
    }
    watch_ctx.TryCancel();
    worker.join();
    reader->Finish();
  }
  Reap(child);
  return per_timer;
}

void Print(const char* shape, std::vector<double> v, const char* unit,
           double scale) {
  std::sort(v.begin(), v.end());
  std::printf("  %-12s median %8.2f %s  (%.2f-%.2f)\n", shape,
              v[v.size() / 2] * scale, unit, v.front() * scale,
              v.back() * scale);
}

// Ceilings of the two shapes that answer at once and of the two whose
// answers wait for a synced log, alternating; the ratio of each logged
// shape's ceiling to the best immediate one in the same round.
int Durable(int seconds, int rounds) {
  const std::vector<std::string> shapes = {
      "callback", "async-1", "callback+log", "cq1+writer", "cq1+log"};
  std::vector<std::vector<double>> peak(shapes.size()), ratio(shapes.size());
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t s = 0; s < shapes.size(); ++s) {
      peak[s].push_back(Round(shapes[s], 1, seconds, false).peak);
    }
    const double best = std::max(peak[0].back(), peak[1].back());
    for (std::size_t s = 2; s < shapes.size(); ++s) {
      ratio[s].push_back(peak[s].back() / best);
    }
  }
  std::printf("ceiling: Checks/s, 64 in flight over 4 connections:\n");
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    Print(shapes[s].c_str(), peak[s], "k/s", 1e-3);
  }
  std::printf("answers after a synced log / the best answering at once:\n");
  for (std::size_t s = 2; s < shapes.size(); ++s) {
    Print(shapes[s].c_str(), ratio[s], "x", 1);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--serve") {
    Serve(argv[2], std::atoi(argv[3]), argv[4]);
  }
  int rate = 4000, seconds = 3, rounds = 3;
  bool timer_only = false, durable = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rate" && i + 1 < argc) {
      rate = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--timer-only") {
      timer_only = true;
    } else if (a == "--durable") {
      durable = true;
    } else {
      std::fprintf(stderr,
                   "usage: grpc_floor [--rate N] [--seconds N] [--rounds N] "
                   "[--timer-only | --durable]\n");
      return 2;
    }
  }
  if (durable) return Durable(seconds, rounds);
  const std::vector<std::string> shapes = {"callback", "async-1", "async-2",
                                           "sync"};
  std::vector<std::vector<double>> us(shapes.size()), peak(shapes.size());
  std::vector<double> timer_us;
  for (int r = 0; r < rounds; ++r) {
    timer_us.push_back(TimerRound(rate / 2, seconds));
    if (timer_only) continue;
    for (std::size_t s = 0; s < shapes.size(); ++s) {
      const Figures f = Round(shapes[s], rate, seconds, true);
      us[s].push_back(f.us_per_call);
      peak[s].push_back(f.peak);
    }
  }
  std::printf(
      "server CPU per timer at %d timers/s (set, event %lld ms later, ack; "
      "one completion-queue thread):\n",
      rate / 2, static_cast<long long>(kAhead.count()));
  Print("timer-1", timer_us, "us", 1);
  std::sort(timer_us.begin(), timer_us.end());
  std::printf("  timer-1   %.3f cores\n",
              timer_us[timer_us.size() / 2] * (rate / 2) / 1e6);
  if (timer_only) return 0;
  std::printf("server CPU per health Check at %d/s, one at a time:\n", rate);
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    Print(shapes[s].c_str(), us[s], "us", 1);
  }
  std::printf("ceiling: health Checks/s, 64 in flight over 4 connections:\n");
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    Print(shapes[s].c_str(), peak[s], "k/s", 1e-3);
  }
  return 0;
}
