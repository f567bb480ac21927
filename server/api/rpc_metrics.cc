#include "server/api/rpc_metrics.h"

#include "delayd/text/code_name.h"
#include "server/common/metrics.h"

namespace delayd {

const char* CodeName(grpc::StatusCode code) {
  return GrpcCodeName(static_cast<int>(code));
}

MethodMetrics::MethodMetrics(std::string method,
                             prometheus::Family<prometheus::Counter>& requests,
                             prometheus::Family<prometheus::Histogram>& latency)
    : method_(std::move(method)),
      requests_(requests),
      latency_(latency.Add({{"method", method_}}, LatencyBuckets())) {}

void MethodMetrics::Observe(grpc::StatusCode code,
                            std::optional<std::chrono::nanoseconds> took) {
  auto i = static_cast<std::size_t>(code);
  if (i >= kCodes) i = static_cast<std::size_t>(grpc::StatusCode::UNKNOWN);
  prometheus::Counter* c = by_code_[i].load(std::memory_order_acquire);
  if (c == nullptr) {
    // Family::Add returns the same series for the same labels, so two
    // threads racing here store the same pointer.
    c = &requests_.Add({{"method", method_},
                        {"code", CodeName(static_cast<grpc::StatusCode>(i))}});
    by_code_[i].store(c, std::memory_order_release);
  }
  c->Increment();
  if (took) latency_.Observe(took->count() / 1e9);
}

RpcMetrics::RpcMetrics(prometheus::Registry& registry) {
  auto& requests = prometheus::BuildCounter()
                       .Name("delayd_grpc_requests_total")
                       .Help(
                           "Calls answered, by method and status code "
                           "(a Subscribe stream counts when it ends).")
                       .Register(registry);
  auto& latency = prometheus::BuildHistogram()
                      .Name("delayd_grpc_request_duration_seconds")
                      .Help("From a unary call's arrival to its answer.")
                      .Register(registry);
  static constexpr const char* kNames[kMethods] = {"SetTimer",
                                                   "MoveTimer",
                                                   "RemoveTimer",
                                                   "Drain",
                                                   "GetTimer",
                                                   "ListTimers",
                                                   "Batch",
                                                   "Subscribe",
                                                   "Ack",
                                                   "Nack",
                                                   "ExtendLease",
                                                   "Work",
                                                   "GetPolicy",
                                                   "SetPolicy",
                                                   "TestPushTarget",
                                                   "ListDeadLetters",
                                                   "RequeueDeadLetters",
                                                   "PurgeDeadLetters",
                                                   "Stats",
                                                   "Backup",
                                                   "PreviewSchedule",
                                                   "SetSchedule",
                                                   "GetSchedule",
                                                   "ListSchedules",
                                                   "DeleteSchedule",
                                                   "PauseSchedule",
                                                   "ResumeSchedule",
                                                   "TriggerSchedule",
                                                   "ClusterStatus"};
  // (A name left out would leave the last ones null.)
  static_assert(kNames[kMethods - 1] != nullptr);
  auto& forwarded =
      prometheus::BuildCounter()
          .Name("delayd_forwarded_requests_total")
          .Help(
              "Calls forwarded to the node owning their partition, by method "
              "and the status code of the owner's answer.")
          .Register(registry);
  auto& forwarded_latency =
      prometheus::BuildHistogram()
          .Name("delayd_forwarded_request_duration_seconds")
          .Help("A forwarded call's round trip to the owning node.")
          .Register(registry);
  forwarded_in_flight_ =
      &prometheus::BuildGauge()
           .Name("delayd_forwarded_requests_in_flight")
           .Help(
               "Calls forwarded to the node owning their partition whose "
               "answer this node awaits.")
           .Register(registry)
           .Add({});
  for (int m = 0; m < kMethods; ++m) {
    methods_[m] = std::make_unique<MethodMetrics>(kNames[m], requests, latency);
    forwarded_[m] = std::make_unique<MethodMetrics>(kNames[m], forwarded,
                                                    forwarded_latency);
  }
}

}  // namespace delayd
