#include "delayd/text/zone.h"

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

namespace delayd {
namespace {

// Where the date library reads the tz database from (USE_OS_TZDB), and so
// the footers.
constexpr const char* kZoneDir = "/usr/share/zoneinfo/";

// The date library ends the last transition a file lists at the year
// 32767: that info holds for every later instant.
bool OpenEnded(const date::sys_info& i) {
  return i.end >= date::sys_days{date::year{9999} / 1 / 1};
}

// The footer of TZif file `path` (its last line, between two newlines), if
// it has one (version 2 and later).
std::optional<std::string> Footer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream bytes;
  bytes << in.rdbuf();
  const std::string s = bytes.str();
  if (s.size() < 2 || s.back() != '\n') return std::nullopt;
  const auto start = s.rfind('\n', s.size() - 2);
  if (start == std::string::npos) return std::nullopt;
  return s.substr(start + 1, s.size() - start - 2);
}

}  // namespace

const Zone* Zone::Find(std::string_view name, std::string* error) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Zone>, std::less<>> zones;
  std::lock_guard lock(mu);
  if (auto it = zones.find(name); it != zones.end()) return it->second.get();
  const date::time_zone* listed = nullptr;
  try {
    listed = date::locate_zone(name);
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
  std::optional<TzRule> rule;
  if (auto footer = Footer(kZoneDir + std::string(listed->name()))) {
    rule = TzRule::Parse(*footer);
  }
  auto zone = std::unique_ptr<Zone>(new Zone(listed, std::move(rule)));
  return zones.emplace(std::string(name), std::move(zone)).first->second.get();
}

date::sys_info Zone::Info(date::sys_seconds t) const {
  date::sys_info listed = listed_->get_info(t);
  if (!rule_ || !OpenEnded(listed)) return listed;
  date::sys_info ruled = rule_->Info(t);
  ruled.begin = std::max(ruled.begin, listed.begin);
  return ruled;
}

date::local_info Zone::Info(date::local_seconds l) const {
  date::local_info listed = listed_->get_info(l);
  // Around the last listed transition the listed answer stands; past it,
  // the rule's.
  if (!rule_ || listed.result != date::local_info::unique ||
      !OpenEnded(listed.first)) {
    return listed;
  }
  return rule_->Info(l);
}

}  // namespace delayd
