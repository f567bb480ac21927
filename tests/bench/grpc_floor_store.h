// The store under grpc_floor's timer shapes: what a one-thread server
// writes at each step of a timer's life, as delayd's RocksDB store writes it
// under `--fsync 1s` (each change written to the WAL, none synced per call).
#ifndef DELAYD_TESTS_BENCH_GRPC_FLOOR_STORE_H_
#define DELAYD_TESTS_BENCH_GRPC_FLOOR_STORE_H_

#include <memory>
#include <string>

#include "tests/bench/grpc_floor_tags.h"

namespace delayd::bench::floor {

// The store calls of a timer shape, all made on the thread polling its
// queue. Set and Ack return true when the store answers the call itself
// (once its change is written, from another thread); false when the
// caller answers it at once (the change is already written).
class TimerStore {
 public:
  virtual ~TimerStore() = default;
  virtual bool Set(AsyncCall* c) = 0;
  virtual void Fire() = 0;
  virtual bool Ack(AsyncCall* c) = 0;
};

// A RocksDB database in `dir` (made empty first), written as delayd writes
// a timer: a set puts its payload and its timer record, a firing deletes
// the timer and puts the event, an ack deletes the event and the payload;
// 8-byte ids, 64-byte payloads, the WAL on and unsynced. With
// `writer_thread` false the polling thread writes each change itself
// (timer-1+rocks); true, a writer thread writes whatever gathered while it
// last wrote as one batch and then answers its sets and acks
// (timer-1+rocks-writer: delayd's writer, under one loop).
std::unique_ptr<TimerStore> MakeRocksTimerStore(const std::string& dir,
                                                bool writer_thread);

}  // namespace delayd::bench::floor

#endif  // DELAYD_TESTS_BENCH_GRPC_FLOOR_STORE_H_
