#include "server/common/limit_log.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace delayd {

namespace {

// How many times `key` came up since its last line, or 0 if no line is due.
std::uint64_t Due(std::string_view key) {
  struct Entry {
    std::chrono::steady_clock::time_point next_line{};
    std::uint64_t hits = 0;  // Since the last line.
  };
  static std::mutex mu;
  // Keyed by names from delayd's own code: a small, fixed set.
  static std::map<std::string, Entry, std::less<>> entries;
  constexpr auto kInterval = std::chrono::seconds(10);
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu);
  auto it = entries.find(key);
  if (it == entries.end()) it = entries.emplace(key, Entry{}).first;
  Entry& e = it->second;
  ++e.hits;
  if (now < e.next_line) return 0;
  const std::uint64_t hits = e.hits;
  e.hits = 0;
  e.next_line = now + kInterval;
  return hits;
}

}  // namespace

void LogSampled(std::string_view what, std::string_view detail) {
  struct Entry {
    std::chrono::steady_clock::time_point interval_end{};
    int lines = 0;              // In this interval.
    std::uint64_t skipped = 0;  // Since the last line.
  };
  static std::mutex mu;
  static std::map<std::string, Entry, std::less<>> entries;
  constexpr auto kInterval = std::chrono::seconds(10);
  const auto now = std::chrono::steady_clock::now();
  std::uint64_t skipped;
  {
    std::lock_guard lock(mu);
    auto it = entries.find(what);
    if (it == entries.end()) it = entries.emplace(what, Entry{}).first;
    Entry& e = it->second;
    if (now >= e.interval_end) {
      e.interval_end = now + kInterval;
      e.lines = 0;
    }
    if (e.lines == kSampledLines) {
      ++e.skipped;
      return;
    }
    ++e.lines;
    skipped = e.skipped;
    e.skipped = 0;
  }
  if (skipped == 0) {
    spdlog::info("{}", detail);
  } else {
    spdlog::info("{} ({} more {} lines left out before this one)", detail,
                 skipped, what);
  }
}

void LogLimitHit(std::string_view limit, std::string_view detail) {
  const std::uint64_t hits = Due(limit);
  if (hits == 0) return;
  spdlog::warn("limit {} hit ({} time{} in the last interval): {}", limit, hits,
               hits == 1 ? "" : "s", detail);
}

void LogRepeated(std::string_view what, std::string_view detail) {
  const std::uint64_t hits = Due(what);
  if (hits == 0) return;
  spdlog::error("{} ({} time{} in the last interval): {}", what, hits,
                hits == 1 ? "" : "s", detail);
}

}  // namespace delayd
