// The load generator's sections, beyond those in load_gen.cc.
#ifndef DELAYD_TESTS_BENCH_SECTIONS_H_
#define DELAYD_TESTS_BENCH_SECTIONS_H_

#include <chrono>
#include <string>

namespace delayd::bench {

// load_gen_store.cc: durable writes against in memory; RSS per pending
// timer by payload size; the data directory through churn; start-up time.
void Durability(const std::string& binary, const std::string& scratch,
                std::chrono::milliseconds dur);
void Payload(const std::string& binary, const std::string& scratch);
void Churn(const std::string& binary, const std::string& scratch);
void Recovery(const std::string& binary, const std::string& scratch);

// load_gen_schedule.cc: recurring schedules against one-shot timers (RSS,
// a burst of runs, start-up); the burst `rounds` times.
void Schedules(const std::string& binary, const std::string& scratch,
               int rounds, const std::string& only);

// load_gen_http.cc: the HTTP door's SetTimer and Batch against the gRPC
// port's on one daemon.
void Http(const std::string& binary, std::chrono::milliseconds dur);
void Pull(const std::string& binary, std::chrono::milliseconds dur);

}  // namespace delayd::bench

#endif  // DELAYD_TESTS_BENCH_SECTIONS_H_
