// Requests of each gRPC method by status code, and their latency, in the
// metrics registry (server/common/metrics.h).
//
// Thread safety: every method may be called from any thread.
#ifndef DELAYD_SERVER_API_RPC_METRICS_H_
#define DELAYD_SERVER_API_RPC_METRICS_H_

#include <grpcpp/grpcpp.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>

namespace delayd {

// The name of a gRPC status code, as in the gRPC docs ("NOT_FOUND").
const char* CodeName(grpc::StatusCode code);

// One method's figures.
class MethodMetrics {
 public:
  MethodMetrics(std::string method,
                prometheus::Family<prometheus::Counter>& requests,
                prometheus::Family<prometheus::Histogram>& latency);
  // One call answered `code` after `took` (unary calls; a stream has no
  // latency worth a histogram: pass nullopt).
  void Observe(grpc::StatusCode code,
               std::optional<std::chrono::nanoseconds> took);
  // The method's name ("SetTimer").
  const std::string& name() const { return method_; }

 private:
  static constexpr std::size_t kCodes = 17;  // grpc::StatusCode 0..16.
  const std::string method_;
  prometheus::Family<prometheus::Counter>& requests_;
  // A series per code, created on the code's first use (a series that
  // would stay at zero is not exported).
  std::array<std::atomic<prometheus::Counter*>, kCodes> by_code_{};
  prometheus::Histogram& latency_;
};

class RpcMetrics {
 public:
  enum Method {
    kSetTimer,
    kMoveTimer,
    kRemoveTimer,
    kDrain,
    kGetTimer,
    kListTimers,
    kBatch,
    kSubscribe,
    kAck,
    kNack,
    kExtendLease,
    kWork,
    kGetPolicy,
    kSetPolicy,
    kTestPushTarget,
    kListDeadLetters,
    kRequeueDeadLetters,
    kPurgeDeadLetters,
    kStats,
    kBackup,
    kPreviewSchedule,
    kSetSchedule,
    kGetSchedule,
    kListSchedules,
    kDeleteSchedule,
    kPauseSchedule,
    kResumeSchedule,
    kTriggerSchedule,
    kClusterStatus,
    kMethods
  };
  explicit RpcMetrics(prometheus::Registry& registry);
  MethodMetrics& operator[](Method m) { return *methods_[m]; }
  // Calls a cluster node forwarded to the owner of their partition (see
  // forward.h), by the owner's answer, and their round trip.
  MethodMetrics& forwarded(Method m) { return *forwarded_[m]; }
  // Forwarded calls whose answers this node awaits.
  prometheus::Gauge& forwarded_in_flight() { return *forwarded_in_flight_; }

 private:
  prometheus::Gauge* forwarded_in_flight_;
  std::array<std::unique_ptr<MethodMetrics>, kMethods> methods_;
  std::array<std::unique_ptr<MethodMetrics>, kMethods> forwarded_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_RPC_METRICS_H_
