// The names of this process's threads, as `top -H` and /proc show them,
// and how often a named thread (of this process or another) wakes.
#ifndef DELAYD_TESTS_COMMON_THREAD_NAMES_H_
#define DELAYD_TESTS_COMMON_THREAD_NAMES_H_

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace delayd::testing {

inline std::vector<std::string> ThreadNames() {
  std::vector<std::string> names;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name)) names.push_back(name);
  }
  return names;
}

// How many of this process's threads are named `name`.
inline long ThreadsNamed(const std::string& name) {
  const auto names = ThreadNames();
  return std::count(names.begin(), names.end(), name);
}

// How often the threads named `name` have slept and woken (their voluntary
// context switches, summed), or -1 if there is no such thread; of this
// process, or of the one whose pid is `proc`.
inline long WakeUpsOf(const std::string& name,
                      const std::string& proc = "self") {
  long sum = -1;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + proc + "/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string got;
    std::getline(comm, got);
    if (got != name) continue;
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.starts_with("voluntary_ctxt_switches:")) {
        sum = std::max(sum, 0L) + std::stol(line.substr(line.find(':') + 1));
      }
    }
  }
  return sum;
}

// Waits until the thread named `name` has not woken for `quiet`, for at
// most `limit`; returns its wake-ups then, or -1 if it kept waking (or
// there is no such thread).
inline long WaitUntilAsleep(const std::string& name,
                            std::chrono::milliseconds quiet,
                            std::chrono::milliseconds limit,
                            const std::string& proc = "self") {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  long seen = WakeUpsOf(name, proc);
  if (seen < 0) return -1;
  for (auto still = std::chrono::steady_clock::now();;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const long now = WakeUpsOf(name, proc);
    if (now != seen) {
      seen = now;
      still = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - still > quiet) {
      return seen;
    }
    if (std::chrono::steady_clock::now() > deadline) return -1;
  }
}

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_THREAD_NAMES_H_
