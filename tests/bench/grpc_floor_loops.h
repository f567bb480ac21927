// The timer traffic on two event loops, one per core (grpc_floor.cc's
// timer-2loop shapes): what a daemon of one completion-queue thread per
// core owning its partitions pays for the calls whose timer another loop
// owns.
#ifndef DELAYD_TESTS_BENCH_GRPC_FLOOR_LOOPS_H_
#define DELAYD_TESTS_BENCH_GRPC_FLOOR_LOOPS_H_

#include <grpcpp/grpcpp.h>

#include "grpc/health/v1/health.grpc.pb.h"

namespace delayd::bench::floor {

// Serves the timer shape (ServeTimers in grpc_floor_serve.cc) on two
// threads, each polling its own queue (`cq0`, `cq1`; gRPC hands a call to
// either) and owning the timers it arms. The worker's Watch stream is
// loop 0's, so an event loop 1 fires is handed to loop 0 to be written.
// With `hop_sets`, every other set belongs to the other loop than the one
// its call came to, and is handed there to be armed (keys hashed to
// partitions, two loops); without, a set is armed where its call came.
// A hand-over is a closure in the other loop's mailbox and, if that loop
// has none pending, a grpc::Alarm that wakes its queue.
[[noreturn]] void ServeLoops(grpc::health::v1::Health::AsyncService& svc,
                             grpc::ServerCompletionQueue* cq0,
                             grpc::ServerCompletionQueue* cq1, bool hop_sets);

}  // namespace delayd::bench::floor

#endif  // DELAYD_TESTS_BENCH_GRPC_FLOOR_LOOPS_H_
