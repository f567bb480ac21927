// RocksStore::Check: the offline verification behind `delayd check`.
#include <rocksdb/db.h>

#include <string>
#include <vector>

#include "server/common/policy.h"
#include "server/store/rocksdb/rocks_store.h"

namespace delayd {

void RocksStore::Check(CheckReport* report) {
  auto problem = [&](std::string what) {
    report->problems.push_back(std::move(what));
  };
  for (const auto& m : mark_problems_) problem(m);
  if (rocksdb::Status s = db_->VerifyChecksum(); !s.ok()) {
    problem("table checksums: " + s.ToString());
  }
  std::vector<std::string> names;
  if (Status s = LoadNamespaces(&names); !s.ok()) problem(s.message());
  for (const auto& n : names) report->namespaces += n.empty() ? 0 : 1;
  std::uint64_t next_version = 0, next_event_seq = 0;
  if (Status s = LoadCounters(&next_version, &next_event_seq); !s.ok()) {
    problem(s.message());
  }
  std::vector<std::pair<std::string, std::string>> policies;
  if (Status s = LoadPolicies(&policies); !s.ok()) problem(s.message());
  for (const auto& [name, bytes] : policies) {
    if (!DecodePolicy(bytes)) {
      problem("the policy of namespace '" + name + "' is malformed");
    }
  }
  if (Status s = ForEachFate([](std::uint64_t, const StoredFate&) {});
      !s.ok()) {
    problem(s.message());
  }
  auto name_of = [&](NamespaceId ns) {
    return ns < names.size() && !names[ns].empty()
               ? "namespace '" + names[ns] + "'"
               : "unknown namespace id " + std::to_string(ns);
  };
  // Every record's payload, with what it belongs to.
  struct Owner {
    std::uint64_t payload_id;
    std::string what;
  };
  std::vector<Owner> owners;
  Status s = ForEachTimer([&](const StoredTimer& t) {
    ++report->timers;
    if (t.ns >= names.size() || names[t.ns].empty()) {
      problem("timer '" + std::string(t.key) + "' names " + name_of(t.ns));
    }
    owners.push_back(
        {t.payload_id, name_of(t.ns) + ", timer '" + std::string(t.key) + "'"});
  });
  if (!s.ok()) problem(s.message());
  s = ForEachEvent([&](const StoredEvent& e) {
    ++report->events;
    if (e.ns >= names.size() || names[e.ns].empty()) {
      problem("event " + std::to_string(e.id) + " names " + name_of(e.ns));
    }
    owners.push_back({e.payload_id, name_of(e.ns) + ", event " +
                                        std::to_string(e.id) + " (key '" +
                                        std::string(e.key) + "')"});
  });
  if (!s.ok()) problem(s.message());
  // (A schedule's encoding is the core's: recovery reads it, and refuses a
  // malformed one by name.)
  s = ForEachSchedule(
      [&](NamespaceId ns, std::string_view key, std::string_view encoded) {
        if (ns >= names.size() || names[ns].empty() || encoded.empty()) {
          problem("schedule '" + std::string(key) + "' names " + name_of(ns) +
                  (encoded.empty() ? " and is empty" : ""));
        }
      });
  if (!s.ok()) problem(s.message());
  s = ForEachDedup(
      [&](NamespaceId ns, std::string_view key, std::string_view encoded) {
        if (ns >= names.size() || names[ns].empty() || encoded.empty()) {
          problem("dedup record of key '" + std::string(key) + "' names " +
                  name_of(ns) + (encoded.empty() ? " and is empty" : ""));
        }
      });
  if (!s.ok()) problem(s.message());
  constexpr std::size_t kChunk = 1024;
  for (std::size_t at = 0; at < owners.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, owners.size() - at);
    std::vector<std::uint64_t> ids(n);
    for (std::size_t i = 0; i < n; ++i) ids[i] = owners[at + i].payload_id;
    std::vector<std::string> payloads;
    std::vector<bool> readable;
    const Status read = GetPayloads(ids, &payloads, &readable);
    for (std::size_t i = 0; i < n; ++i) {
      if (!readable[i]) {
        problem(owners[at + i].what + ": payload " + std::to_string(ids[i]) +
                " cannot be read (" + read.message() + ")");
      }
    }
  }
}

}  // namespace delayd
