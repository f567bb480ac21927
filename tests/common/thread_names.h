// The names of this process's threads, as `top -H` and /proc show them.
#ifndef DELAYD_TESTS_COMMON_THREAD_NAMES_H_
#define DELAYD_TESTS_COMMON_THREAD_NAMES_H_

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
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

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_THREAD_NAMES_H_
