// grpc.health.v1.Health served on the loop (loop_server.h), from the
// statuses the server sets (LoopServer::SetServingStatus), as gRPC's
// default health service answers: Check gives a service's status, or
// NOT_FOUND for a service never set; Watch writes the status at once and
// then each change, SERVICE_UNKNOWN for a service never set.
#ifndef DELAYD_SERVER_API_LOOP_HEALTH_H_
#define DELAYD_SERVER_API_LOOP_HEALTH_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <utility>

#include "server/api/queue_call.h"
#include "server/common/mutex.h"

namespace delayd {

class LoopServer;

// Parses a HealthCheckRequest's service name; false if it is not one.
bool ParseHealthRequest(const grpc::ByteBuffer& in, std::string* service);
// A HealthCheckResponse of `status`.
grpc::ByteBuffer HealthResponse(int status);

class HealthCheckOnQueue final : public QueueReactor {
 public:
  HealthCheckOnQueue(QueueCall* call, LoopServer& loop);
  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  LoopServer& loop_;
  grpc::ByteBuffer in_, out_;
};

// Locking: mu_ guards what is written; LoopServer calls Changed holding
// its health lock, so mu_ comes after it.
class HealthWatch {
 public:
  virtual void Changed(int status) = 0;
  virtual const std::string& service() const = 0;

 protected:
  ~HealthWatch() = default;
};

class HealthWatchOnQueue final : public QueueReactor, public HealthWatch {
 public:
  HealthWatchOnQueue(QueueCall* call, LoopServer& loop);
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override EXCLUDES(mu_);
  void OnCancel() override EXCLUDES(mu_);
  void OnDone() override;
  void Changed(int status) override EXCLUDES(mu_);
  const std::string& service() const override { return service_; }

 private:
  // Writes `want_` unless a write is under way or it went already.
  void WriteLatest() REQUIRES(mu_);
  void FinishOnce(const grpc::Status& status) EXCLUDES(mu_);

  LoopServer& loop_;
  grpc::ByteBuffer in_;
  std::string service_;  // Set once read, before AddWatch.
  Mutex mu_;
  grpc::ByteBuffer out_ GUARDED_BY(mu_);
  int want_ GUARDED_BY(mu_) = 0;     // The status to tell.
  int written_ GUARDED_BY(mu_) = 0;  // The status told (or being told).
  bool writing_ GUARDED_BY(mu_) = false;
  bool over_ GUARDED_BY(mu_) = false;  // Writes nothing more.
  bool finished_ GUARDED_BY(mu_) = false;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_LOOP_HEALTH_H_
