// Reads of a partition: found holding it, payloads read after, without it
// (partition.h, Found).
#include "server/core/partition.h"
#include "server/core/payload_ref.h"

namespace delayd {

void Partition::AddFound(std::uint32_t r, bool payload, Found& out) const {
  const Record& rec = records_[r];
  const NamespaceId ns = rec.ns();
  if (store_ != nullptr) {
    out.timers.push_back(TimerInfo{
        ns, std::string(rec.blob.key()), {}, rec.fire_time, rec.version});
    if (payload) out.payload_ids.push_back(PayloadIdOf(rec.blob));
  } else {
    out.timers.push_back(
        TimerInfo{ns, std::string(rec.blob.key()),
                  payload ? std::string(rec.blob.payload()) : std::string(),
                  rec.fire_time, rec.version});
  }
  out.records.push_back(r);
  if (store_ != nullptr && !out.view && payload) out.view = store_->NewView();
}

Status Partition::Get(NamespaceId ns, std::string_view key, Found& out) const {
  MutexLock lock(&mu_);
  if (auto refused = Refusal()) return std::move(*refused);
  const std::uint32_t r = Find(ns, key, Hash(ns, key));
  if (r != KeyIndex::kNone) AddFound(r, true, out);
  return Status::Ok();
}

Status Partition::List(NamespaceId ns, std::string_view prefix,
                       std::uint32_t cursor, std::size_t max_timers,
                       bool payloads, Found& out,
                       std::optional<std::uint32_t>* next) const {
  MutexLock lock(&mu_);
  if (auto refused = Refusal()) return std::move(*refused);
  *next = ListLocked(ns, prefix, cursor, max_timers, payloads, out);
  return Status::Ok();
}

std::optional<std::uint32_t> Partition::ListLocked(
    NamespaceId ns, std::string_view prefix, std::uint32_t cursor,
    std::size_t max_timers, bool payloads, Found& out) const {
  for (std::uint32_t r = cursor; r < records_.size(); ++r) {
    const Record& rec = records_[r];
    // (Schedules' runs, under run keys, are not timers a client set.)
    if (!rec.blob || rec.ns() != ns || !rec.blob.key().starts_with(prefix) ||
        rec.blob.key().starts_with(std::string_view("\0", 1))) {
      continue;
    }
    if (out.timers.size() >= max_timers) return r;
    AddFound(r, payloads, out);
  }
  return std::nullopt;
}

bool Partition::ReadPayloads(Found& found, Status* error, std::size_t max_bytes,
                             std::size_t bytes_before) const {
  // A few at a time, so that a page stops reading once it is full: memory
  // per call stays near max_bytes, whatever the page size.
  constexpr std::size_t kChunk = 32;
  const bool read = !found.payload_ids.empty();
  std::size_t bytes = bytes_before;
  std::size_t kept = 0;
  for (std::size_t from = 0; from < found.timers.size(); from += kChunk) {
    const std::size_t n = std::min(kChunk, found.timers.size() - from);
    std::vector<std::string> payloads;
    std::vector<bool> readable;
    std::vector<bool> gone(n, false);
    Status s;
    if (read) {
      s = store_->GetPayloads({found.payload_ids.data() + from, n}, *found.view,
                              &payloads, &readable, &gone);
    }
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = from + j;
      if (gone[j]) continue;  // Removed or fired since it was found.
      if (read && !readable[j]) {
        *error =
            Status::ReadFailed(s, "the payload of timer '" +
                                      found.timers[i].key + "' cannot be read");
        return false;
      }
      if (read) found.timers[i].payload = std::move(payloads[j]);
      bytes += ListCost(found.timers[i]);
      const bool page_empty = bytes_before == 0 && kept == 0;
      if (bytes > max_bytes && !page_empty) {
        found.next = found.records[i];
        found.timers.resize(kept);
        found.records.resize(kept);
        return true;
      }
      if (kept != i) {
        found.timers[kept] = std::move(found.timers[i]);
        found.records[kept] = found.records[i];
      }
      ++kept;
    }
  }
  found.timers.resize(kept);
  found.records.resize(kept);
  return true;
}

}  // namespace delayd
