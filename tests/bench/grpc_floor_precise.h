// The timer shape on one completion-queue thread whose timers fire on
// time (grpc_floor.cc's timer-1+tt shapes). gRPC's own waits are in whole
// milliseconds here (gRPC 1.51: a grpc::Alarm, and AsyncNext's deadline,
// end 0.7-1.1 ms after the time asked for at the median), so a loop whose
// only clock is its queue fires that late; delayd's firings are due within
// 0.1 ms. This shape keeps the due times on a timer thread that sleeps until
// the first (a futex wait, as precise as the kernel's timer slack) and then
// hands the loop the timers that came due: the least a one-loop daemon that
// fires on time pays for it, one hand-over per firing that no call carries.
#ifndef DELAYD_TESTS_BENCH_GRPC_FLOOR_PRECISE_H_
#define DELAYD_TESTS_BENCH_GRPC_FLOOR_PRECISE_H_

#include <grpcpp/grpcpp.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/bench/grpc_floor_store.h"

namespace delayd::bench::floor {

// Serves the timer shape (ServeTimers in grpc_floor_serve.cc) on the thread
// that calls it, polling `cq`; a set's timer is kept by a timer thread,
// which wakes the loop (a grpc::Alarm due at once, unless one is pending)
// when it comes due. With a `store` (timer-1+tt+rocks), each set, firing
// and ack is written to it on the loop's thread, as in timer-1+rocks. With a
// `log` (timer-1+tt+log; -1: none), each set, ack and firing makes a
// record, and the calls are answered once their records are synced, as
// delayd's store does under --fsync always: the loop hands each turn's
// records (the completions that were ready together) to a thread that
// writes and syncs them and answers the calls: the loop never waits for the
// disk, so that it fires on time meanwhile (an fdatasync that appends
// takes 0.20-0.23 ms here, two a timer). A set's timer is armed before
// its sync, as delayd arms a timer before its write is durable.
[[noreturn]] void ServePrecise(grpc::health::v1::Health::AsyncService& svc,
                               grpc::ServerCompletionQueue* cq,
                               TimerStore* store, int log);

}  // namespace delayd::bench::floor

#endif  // DELAYD_TESTS_BENCH_GRPC_FLOOR_PRECISE_H_
