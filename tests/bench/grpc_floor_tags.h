// What grpc_floor's completion-queue servers share: an operation's tag as
// the closure its completion runs, one turn of a queue's loop, a call, the
// +log shapes' durable log, and the worker's Watch stream its timers' events
// are written on.
#ifndef DELAYD_TESTS_BENCH_GRPC_FLOOR_TAGS_H_
#define DELAYD_TESTS_BENCH_GRPC_FLOOR_TAGS_H_

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"

namespace delayd::bench::floor {

// What a completion-queue operation does when it completes.
struct Tag {
  std::function<void(bool)> done;
};
inline void* NewTag(std::function<void(bool)> done) {
  return new Tag{std::move(done)};
}

// From any thread: `f` runs on the thread polling `cq`, as soon as it
// polls. (An alarm due in the past completes at once; one due "now" is
// rounded up by gRPC to its next millisecond.)
inline void RunSoon(grpc::CompletionQueue* cq, std::function<void()> f) {
  auto* alarm = new grpc::Alarm;
  alarm->Set(cq, gpr_inf_past(GPR_CLOCK_MONOTONIC),
             NewTag([alarm, f = std::move(f)](bool) {
               delete alarm;
               f();
             }));
}

// Waits on `cq` until `deadline` for one completion and runs its Tag (the
// process ends if the queue shuts down); whether one came.
inline bool RunNext(grpc::CompletionQueue* cq,
                    std::chrono::system_clock::time_point deadline) {
  void* tag;
  bool ok;
  switch (cq->AsyncNext(&tag, &ok, deadline)) {
    case grpc::CompletionQueue::SHUTDOWN:
      std::_Exit(0);
    case grpc::CompletionQueue::TIMEOUT:
      return false;
    case grpc::CompletionQueue::GOT_EVENT: {
      auto* t = static_cast<Tag*>(tag);
      t->done(ok);
      delete t;
      return true;
    }
  }
  return false;
}

// One Check call in the completion-queue shape: requested, then answered.
struct AsyncCall {
  grpc::ServerContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ServerAsyncResponseWriter<grpc::health::v1::HealthCheckResponse> writer{
      &ctx};
  bool answered = false;
};

// Answers `c` SERVING and frees it once the answer is sent (from any
// thread: the completion comes back to the call's queue).
inline void AnswerServing(AsyncCall* c) {
  c->resp.set_status(grpc::health::v1::HealthCheckResponse::SERVING);
  c->writer.Finish(c->resp, grpc::Status::OK, NewTag([c](bool) { delete c; }));
}

// What the log keeps of one call: its request's bytes in a 64-byte record,
// about a SetTimer's record with a short key and payload. (The benches'
// Checks are empty messages: appending only their bytes would append
// nothing, and an fdatasync with nothing to write costs next to nothing.)
inline std::string RecordOf(const grpc::health::v1::HealthCheckRequest& req) {
  std::string record = req.SerializeAsString();
  record.resize(std::max<std::size_t>(record.size(), 64), '.');
  return record;
}

// A log that every answer waits for: each group of records is appended to
// `fd` and made durable (fdatasync) before any of them is answered.
inline void AppendDurably(int fd, const std::string& bytes) {
  if (write(fd, bytes.data(), bytes.size()) !=
          static_cast<ssize_t>(bytes.size()) ||
      fdatasync(fd) != 0) {
    std::perror("log");
    std::_Exit(1);
  }
}

// A writer thread that appends and syncs whatever calls gathered while it
// last wrote, then runs their answers (an answer may start on any thread).
// Locking: mu_ guards answers_ and bytes_.
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

// The worker's Watch stream, requested on `cq` and used only by the thread
// polling it: each Fired() event is written once the one before is, one
// write in flight at a time.
class WatchStream {
 public:
  WatchStream(grpc::health::v1::Health::AsyncService& svc,
              grpc::ServerCompletionQueue* cq) {
    event_.set_status(grpc::health::v1::HealthCheckResponse::SERVING);
    svc.RequestWatch(&ctx_, &req_, &writer_, cq, cq, NewTag([this](bool ok) {
      watching_ = ok;
      WriteNext();
    }));
  }
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  // A timer came due: its event is to be written.
  void Fired() {
    ++due_;
    WriteNext();
  }

 private:
  void WriteNext() {
    if (!watching_ || writing_ || due_ == 0) return;
    --due_;
    writing_ = true;
    writer_.Write(event_, NewTag([this](bool ok) {
                    writing_ = false;
                    if (ok) WriteNext();
                  }));
  }

  grpc::ServerContext ctx_;
  grpc::health::v1::HealthCheckRequest req_;
  grpc::ServerAsyncWriter<grpc::health::v1::HealthCheckResponse> writer_{&ctx_};
  grpc::health::v1::HealthCheckResponse event_;
  bool watching_ = false, writing_ = false;
  int due_ = 0;  // Events fired and not yet written.
};

}  // namespace delayd::bench::floor

#endif  // DELAYD_TESTS_BENCH_GRPC_FLOOR_TAGS_H_
