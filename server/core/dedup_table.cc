#include "server/core/dedup_table.h"

#include <cstring>

#include "server/common/record_codec.h"
#include "server/common/rfc3339.h"

namespace delayd {
namespace {

constexpr std::uint8_t kVersion = 1;
constexpr std::size_t kSize = 1 + 1 + 8 + 8 + 8;

}  // namespace

std::string EncodeDedup(const DedupEntry& e) {
  std::string out;
  out.reserve(kSize);
  record::AppendRaw(out, kVersion);
  record::AppendRaw(out, static_cast<std::uint8_t>(e.fate));
  record::AppendRaw(out, e.version);
  record::AppendRaw<std::int64_t>(out, e.at);
  record::AppendRaw<std::int64_t>(out, e.until);
  return out;
}

std::optional<DedupEntry> DecodeDedup(std::string_view bytes) {
  if (bytes.size() != kSize || bytes[0] != kVersion) return std::nullopt;
  const char* p = bytes.data() + 1;
  DedupEntry e;
  const auto fate = record::ReadRaw<std::uint8_t>(p);
  if (fate < 1 || fate > 3) return std::nullopt;
  e.fate = static_cast<DedupEntry::Fate>(fate);
  e.version = record::ReadRaw<std::uint64_t>(p);
  e.at = record::ReadRaw<std::int64_t>(p);
  e.until = record::ReadRaw<std::int64_t>(p);
  if (e.until < e.at) return std::nullopt;
  return e;
}

std::string DedupRefusal(std::string_view key, const DedupEntry& e) {
  const char* what = e.fate == DedupEntry::Fate::kFired ? "fired"
                     : e.fate == DedupEntry::Fate::kAcked
                         ? "fired and was acknowledged"
                         : "was removed";
  return "timer '" + std::string(key) + "' " + what + " at " +
         Rfc3339Millis(e.at) + " (version " + std::to_string(e.version) +
         "): a create-only set of this key is refused until " +
         Rfc3339Millis(e.until) + " (the namespace's dedup window)";
}

std::string DedupTable::KeyOf(NamespaceId ns, std::string_view key) {
  std::string k(sizeof ns, '\0');
  std::memcpy(k.data(), &ns, sizeof ns);
  k.append(key);
  return k;
}

std::pair<NamespaceId, std::string> DedupTable::Split(const std::string& k) {
  NamespaceId ns;
  std::memcpy(&ns, k.data(), sizeof ns);
  return {ns, k.substr(sizeof ns)};
}

const DedupEntry* DedupTable::Find(NamespaceId ns, std::string_view key,
                                   WallNanos now) const {
  const DedupEntry* e = Peek(ns, key);
  return e != nullptr && e->until > now ? e : nullptr;
}

const DedupEntry* DedupTable::Peek(NamespaceId ns, std::string_view key) const {
  if (entries_.empty()) return nullptr;
  auto it = entries_.find(KeyOf(ns, key));
  return it == entries_.end() ? nullptr : &it->second;
}

void DedupTable::Erase(const std::string& k, DedupWindows& windows) {
  auto it = entries_.find(k);
  if (it == entries_.end()) return;
  by_end_.erase({it->second.until, k});
  entries_.erase(it);
  windows.entries.fetch_sub(1, std::memory_order_relaxed);
}

std::optional<bool> DedupTable::Put(
    NamespaceId ns, std::string_view key, const DedupEntry& e,
    DedupWindows& windows,
    std::optional<std::pair<NamespaceId, std::string>>* evicted) {
  std::string k = KeyOf(ns, key);
  if (auto it = entries_.find(k); it != entries_.end()) {
    by_end_.erase({it->second.until, k});
    it->second = e;
    by_end_.emplace(e.until, std::move(k));
    return false;
  }
  if (windows.entries.load(std::memory_order_relaxed) >=
      windows.max_entries()) {
    if (by_end_.empty()) {
      windows.evicted.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    const std::string first = by_end_.begin()->second;
    Erase(first, windows);
    *evicted = Split(first);
    windows.evicted.fetch_add(1, std::memory_order_relaxed);
  }
  entries_.emplace(k, e);
  by_end_.emplace(e.until, std::move(k));
  windows.entries.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::vector<std::pair<NamespaceId, std::string>> DedupTable::TakeExpired(
    WallNanos now, std::size_t max, DedupWindows& windows) {
  std::vector<std::pair<NamespaceId, std::string>> out;
  while (!by_end_.empty() && out.size() < max &&
         by_end_.begin()->first <= now) {
    const std::string k = by_end_.begin()->second;
    Erase(k, windows);
    out.push_back(Split(k));
  }
  return out;
}

std::vector<NamespaceId> DedupTable::TakeAll(DedupWindows& windows) {
  std::vector<NamespaceId> out;
  out.reserve(entries_.size());
  for (const auto& [k, e] : entries_) out.push_back(Split(k).first);
  windows.entries.fetch_sub(entries_.size(), std::memory_order_relaxed);
  entries_.clear();
  by_end_.clear();
  return out;
}

}  // namespace delayd
