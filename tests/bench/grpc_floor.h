// The servers grpc_floor measures (grpc_floor.cc), each run in a child
// process of its own as `grpc_floor --serve SHAPE FD LOG`.
#ifndef DELAYD_TESTS_BENCH_GRPC_FLOOR_H_
#define DELAYD_TESTS_BENCH_GRPC_FLOOR_H_

#include <chrono>
#include <string>

namespace delayd::bench::floor {

// How long after its "set" a timer of the timer-1 shape comes due.
constexpr auto kAhead = std::chrono::milliseconds(2);

// Serves grpc.health.v1 in `shape` (grpc_floor.cc lists them) on
// 127.0.0.1, an OS-picked port, which it writes to `port_fd`; the +log and
// +writer shapes append to the file `log`. Never returns; ends when killed.
[[noreturn]] void Serve(const std::string& shape, int port_fd, const char* log);

}  // namespace delayd::bench::floor

#endif  // DELAYD_TESTS_BENCH_GRPC_FLOOR_H_
