// What a cluster node's log says of the partitions it holds.
#ifndef DELAYD_TESTS_COMMON_CLUSTER_LOG_H_
#define DELAYD_TESTS_COMMON_CLUSTER_LOG_H_

#include <string>

namespace delayd::testing {

// How many partitions the node whose output is `log` holds loaded: those
// it took, less those it let go (a partition let go while it loaded logs
// both "no longer this node's" and "could not be taken").
inline int PartitionsLoaded(const std::string& log) {
  auto count = [&](const std::string& text) {
    int n = 0;
    for (std::size_t at = 0; (at = log.find(text, at)) != std::string::npos;
         at += text.size()) {
      ++n;
    }
    return n;
  };
  return count("taken (epoch") - count("no longer this node's") +
         count("could not be taken");
}

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_CLUSTER_LOG_H_
