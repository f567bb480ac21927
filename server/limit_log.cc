#include "server/limit_log.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace delayd {

void LogLimitHit(std::string_view limit, std::string_view detail) {
  struct Entry {
    std::chrono::steady_clock::time_point next_line{};
    std::uint64_t hits = 0;  // Since the last line.
  };
  static std::mutex mu;
  // Keyed by limit names from delayd's own code: a small, fixed set.
  static std::map<std::string, Entry, std::less<>> entries;
  constexpr auto kInterval = std::chrono::seconds(10);
  const auto now = std::chrono::steady_clock::now();
  std::uint64_t hits;
  {
    std::lock_guard lock(mu);
    auto it = entries.find(limit);
    if (it == entries.end()) it = entries.emplace(limit, Entry{}).first;
    Entry& e = it->second;
    ++e.hits;
    if (now < e.next_line) return;
    hits = e.hits;
    e.hits = 0;
    e.next_line = now + kInterval;
  }
  spdlog::warn("limit {} hit ({} time{} in the last interval): {}", limit, hits,
               hits == 1 ? "" : "s", detail);
}

}  // namespace delayd
