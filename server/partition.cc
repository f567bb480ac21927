#include "server/partition.h"

#include <algorithm>
#include <cassert>
#include <unordered_map>

namespace delayd {

Partition::Partition(asio::io_context& io, std::uint32_t index,
                     std::chrono::nanoseconds tick, SteadyTime epoch,
                     const Limits& limits, Counters& counters, Publish publish)
    : partition_(index),
      limits_(limits),
      counters_(counters),
      publish_(std::move(publish)),
      strand_(asio::make_strand(io)),
      wheel_(
          strand_, tick, epoch,
          [this](std::vector<StrandWheel::Expired>& due) { OnExpired(due); }) {
  assert(index < 1024);
}

std::uint32_t Partition::Hash(NamespaceId ns, std::string_view key) {
  const std::size_t h = std::hash<std::string_view>{}(key);
  return static_cast<std::uint32_t>(h ^ (h >> 32)) ^ (ns * 0x9E3779B9u);
}

std::uint32_t Partition::Find(NamespaceId ns, std::string_view key,
                              std::uint32_t hash) const {
  return keys_.Find(hash, [&](std::uint32_t r) {
    return records_[r].ns() == ns && records_[r].blob.key() == key;
  });
}

wheel::TimingWheel::Time Partition::Deadline(WallNanos fire_time,
                                             WallNanos wall_now,
                                             SteadyTime steady_now) const {
  return wheel_.ToWheel(steady_now) +
         std::chrono::nanoseconds(std::max<WallNanos>(0, fire_time - wall_now));
}

OpResult Partition::Apply(Op& op, WallNanos wall_now, SteadyTime steady_now) {
  assert(strand_.running_in_this_thread());
  return std::visit(
      [&](auto& o) -> OpResult {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, SetOp>) {
          return Set(o, wall_now, steady_now);
        } else if constexpr (std::is_same_v<T, MoveOp>) {
          return Move(o, wall_now, steady_now);
        } else {
          return Remove(o);
        }
      },
      op);
}

OpResult Partition::Set(SetOp& op, WallNanos wall_now, SteadyTime steady_now) {
  const std::uint32_t hash = Hash(op.ns, op.key());
  std::uint32_t r = Find(op.ns, op.key(), hash);
  const auto deadline = Deadline(op.fire_time, wall_now, steady_now);
  OpResult result;
  if (r != KeyIndex::kNone) {
    if (op.if_absent) {
      result.status = Status::AlreadyExists("timer '" + std::string(op.key()) +
                                            "' is already pending");
      return result;
    }
    Record& rec = records_[r];
    rec.blob = std::move(op.blob);
    rec.blob.set_tag(static_cast<std::uint16_t>(op.ns));
    rec.fire_time = op.fire_time;
    rec.version = next_version_++;
    wheel_.wheel().Reschedule(rec.handle, deadline);
    wheel_.Scheduled(rec.handle);
    result.replaced = true;
  } else {
    // Events not yet acknowledged count too, so that memory stays bounded
    // while no worker drains them: producers get backpressure instead.
    const std::uint64_t undelivered =
        counters_.ready.load(std::memory_order_relaxed) +
        counters_.in_flight.load(std::memory_order_relaxed);
    if (counters_.pending.fetch_add(1) + undelivered >=
        limits_.max_pending_timers) {
      counters_.pending.fetch_sub(1);
      result.status = Status::ResourceExhausted(
          "pending-timer limit of " +
          std::to_string(limits_.max_pending_timers) +
          " reached (pending timers plus unacknowledged events)");
      return result;
    }
    if (free_records_.empty()) {
      r = static_cast<std::uint32_t>(records_.size());
      records_.emplace_back();
    } else {
      r = free_records_.back();
      free_records_.pop_back();
    }
    Record& rec = records_[r];
    rec.blob = std::move(op.blob);
    rec.blob.set_tag(static_cast<std::uint16_t>(op.ns));
    rec.fire_time = op.fire_time;
    rec.version = next_version_++;
    rec.handle = wheel_.wheel().Schedule(deadline, r);
    wheel_.Scheduled(rec.handle);
    keys_.Insert(hash, r);
  }
  counters_.set.fetch_add(1, std::memory_order_relaxed);
  result.version = records_[r].version;
  result.fire_time = op.fire_time;
  return result;
}

std::uint32_t Partition::FindExpected(NamespaceId ns, const std::string& key,
                                      std::uint64_t expected_version,
                                      Status* error) const {
  const std::uint32_t r = Find(ns, key, Hash(ns, key));
  if (r == KeyIndex::kNone) {
    *error = Status::NotFound("no pending timer '" + key + "'");
  } else if (expected_version != 0 && expected_version != records_[r].version) {
    *error = Status::Aborted("timer '" + key + "' has version " +
                             std::to_string(records_[r].version) + ", not " +
                             std::to_string(expected_version));
    return KeyIndex::kNone;
  }
  return r;
}

OpResult Partition::Move(MoveOp& op, WallNanos wall_now,
                         SteadyTime steady_now) {
  OpResult result;
  const std::uint32_t r =
      FindExpected(op.ns, op.key, op.expected_version, &result.status);
  if (r == KeyIndex::kNone) return result;
  Record& rec = records_[r];
  rec.fire_time = op.fire_time;
  rec.version = next_version_++;
  wheel_.wheel().Reschedule(rec.handle,
                            Deadline(op.fire_time, wall_now, steady_now));
  wheel_.Scheduled(rec.handle);
  result.version = rec.version;
  result.fire_time = rec.fire_time;
  return result;
}

OpResult Partition::Remove(RemoveOp& op) {
  OpResult result;
  const std::uint32_t r =
      FindExpected(op.ns, op.key, op.expected_version, &result.status);
  if (r == KeyIndex::kNone) return result;
  Record& rec = records_[r];
  result.version = rec.version;
  result.fire_time = rec.fire_time;
  wheel_.wheel().Cancel(rec.handle);
  Forget(r);
  return result;
}

void Partition::Forget(std::uint32_t r) {
  Record& rec = records_[r];
  keys_.Erase(Hash(rec.ns(), rec.blob.key()), r);
  rec.blob = Blob();
  free_records_.push_back(r);
  counters_.pending.fetch_sub(1);
}

void Partition::OnExpired(std::vector<StrandWheel::Expired>& due) {
  // Never early by the wall clock either: if it reads earlier than a fire
  // time (it stepped back), wait out the difference.
  const WallNanos wall_now = WallNow();
  const SteadyTime steady_now = std::chrono::steady_clock::now();
  std::vector<std::uint32_t> fire;
  fire.reserve(due.size());
  for (const auto& e : due) {
    Record& rec = records_[e.cookie];
    if (rec.fire_time > wall_now) {
      rec.handle = wheel_.wheel().Schedule(
          Deadline(rec.fire_time, wall_now, steady_now), e.cookie);
    } else {
      fire.push_back(e.cookie);
    }
  }
  FireRecords(fire, Reason::kExpired);
}

void Partition::FireRecords(const std::vector<std::uint32_t>& records,
                            Reason reason) {
  if (records.empty()) return;
  const WallNanos fired_at = WallNow();
  // Events go to their namespace's dispatcher in firing order.
  std::unordered_map<NamespaceId, std::vector<Event>> by_ns;
  for (std::uint32_t r : records) {
    Record& rec = records_[r];
    Event e{};
    e.id = (next_event_seq_++ << 10) | partition_;
    e.ns = rec.ns();
    e.blob = std::move(rec.blob);
    e.version = rec.version;
    e.fire_time = rec.fire_time;
    e.fired_at = fired_at;
    e.reason = reason;
    keys_.Erase(Hash(e.ns, e.blob.key()), r);
    free_records_.push_back(r);
    by_ns[e.ns].push_back(std::move(e));
  }
  counters_.pending.fetch_sub(records.size());
  counters_.fired.fetch_add(records.size());
  for (auto& [ns, events] : by_ns) publish_(ns, std::move(events));
}

std::uint64_t Partition::Drain(NamespaceId ns) {
  assert(strand_.running_in_this_thread());
  std::vector<std::uint32_t> fire;
  for (std::uint32_t r = 0; r < records_.size(); ++r) {
    if (records_[r].blob && records_[r].ns() == ns) fire.push_back(r);
  }
  std::sort(fire.begin(), fire.end(), [this](std::uint32_t a, std::uint32_t b) {
    return records_[a].fire_time != records_[b].fire_time
               ? records_[a].fire_time < records_[b].fire_time
               : records_[a].version < records_[b].version;
  });
  for (std::uint32_t r : fire) wheel_.wheel().Cancel(records_[r].handle);
  FireRecords(fire, Reason::kDrained);
  return fire.size();
}

std::optional<TimerInfo> Partition::Get(NamespaceId ns,
                                        std::string_view key) const {
  const std::uint32_t r = Find(ns, key, Hash(ns, key));
  if (r == KeyIndex::kNone) return std::nullopt;
  const Record& rec = records_[r];
  return TimerInfo{ns, std::string(rec.blob.key()),
                   std::string(rec.blob.payload()), rec.fire_time, rec.version};
}

std::optional<std::uint32_t> Partition::List(
    NamespaceId ns, std::string_view prefix, std::uint32_t cursor,
    std::size_t limit, std::vector<TimerInfo>& out) const {
  std::size_t taken = 0;
  for (std::uint32_t r = cursor; r < records_.size(); ++r) {
    const Record& rec = records_[r];
    if (!rec.blob || rec.ns() != ns || !rec.blob.key().starts_with(prefix)) {
      continue;
    }
    if (taken == limit) return r;
    out.push_back(TimerInfo{ns, std::string(rec.blob.key()),
                            std::string(rec.blob.payload()), rec.fire_time,
                            rec.version});
    ++taken;
  }
  return std::nullopt;
}

}  // namespace delayd
