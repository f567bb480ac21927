// Scheduler: recovery of recurring schedules. They are read from the store on
// the calling thread and restored on one thread per partition, under each
// partition's own lock: decoding a schedule, finding its shared spec and
// arming it for its next instant cost about twice what reading it does, and
// partitions share nothing (1 M schedules: tests/bench/README.md).
#include <deque>
#include <thread>

#include "server/common/mutex.h"
#include "server/common/record_codec.h"
#include "server/core/scheduler.h"

namespace delayd {
namespace {

// One partition's schedules on their way to it, and the thread restoring
// them. Chunks are bounded in size and number, so memory stays bounded
// whatever the store holds.
class Lane {
 public:
  Lane(Partition& p, WallNanos wall_now, SteadyTime steady_now)
      : partition_(p),
        thread_([this, wall_now, steady_now] { Run(wall_now, steady_now); }) {}

  // Queues a schedule (may wait for the thread to catch up).
  void Add(NamespaceId ns, std::string_view key, std::string_view encoded) {
    record::AppendRaw(filling_, ns);
    record::AppendRaw(filling_, static_cast<std::uint32_t>(key.size()));
    filling_.append(key);
    record::AppendRaw(filling_, static_cast<std::uint32_t>(encoded.size()));
    filling_.append(encoded);
    if (filling_.size() >= kChunkBytes) Push();
  }
  // Restores what is queued and stops the thread; the first error, if any.
  Status Finish(std::uint64_t* max_version) {
    Push();
    {
      MutexLock lock(&mu_);
      closed_ = true;
    }
    cv_.SignalAll();
    thread_.join();
    *max_version = std::max(*max_version, max_version_);
    return error_;
  }

 private:
  static constexpr std::size_t kChunkBytes = 64 * 1024;
  static constexpr std::size_t kMaxChunks = 8;

  void Push() {
    if (filling_.empty()) return;
    MutexLock lock(&mu_);
    while (queue_.size() >= kMaxChunks) cv_.Wait(&mu_);
    queue_.push_back(std::move(filling_));
    filling_.clear();
    // A restored chunk's buffer again, if there is one: its pages are
    // already there.
    if (!spare_.empty()) {
      filling_ = std::move(spare_.back());
      spare_.pop_back();
    }
    cv_.SignalAll();
  }
  void Run(WallNanos wall_now, SteadyTime steady_now) {
    partition_.BeginScheduleRestore();
    for (;;) {
      std::string chunk;
      {
        MutexLock lock(&mu_);
        while (queue_.empty() && !closed_) cv_.Wait(&mu_);
        if (queue_.empty()) break;
        chunk = std::move(queue_.front());
        queue_.pop_front();
      }
      cv_.SignalAll();
      Restore(chunk, wall_now, steady_now);
      chunk.clear();
      MutexLock lock(&mu_);
      if (spare_.size() < kMaxChunks) spare_.push_back(std::move(chunk));
    }
    partition_.EndScheduleRestore();
  }
  void Restore(std::string_view chunk, WallNanos wall_now,
               SteadyTime steady_now) {
    const char* p = chunk.data();
    const char* const end = p + chunk.size();
    while (p < end) {
      const auto ns = record::ReadRaw<NamespaceId>(p);
      const auto key_size = record::ReadRaw<std::uint32_t>(p);
      const std::string_view key(p, key_size);
      p += key_size;
      const auto size = record::ReadRaw<std::uint32_t>(p);
      const std::string_view encoded(p, size);
      p += size;
      std::uint64_t version = 0;
      Status s = partition_.RestoreSchedule(ns, key, encoded, wall_now,
                                            steady_now, &version);
      if (!s.ok() && error_.ok()) error_ = std::move(s);
      max_version_ = std::max(max_version_, version);
    }
  }

  Partition& partition_;
  std::string filling_;  // the chunk being filled (the reading thread's)
  Mutex mu_;
  CondVar cv_;
  std::deque<std::string> queue_ GUARDED_BY(mu_);
  std::vector<std::string> spare_ GUARDED_BY(mu_);  // emptied chunks
  bool closed_ GUARDED_BY(mu_) = false;
  // The restoring thread's until joined.
  std::uint64_t max_version_ = 0;
  Status error_;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace

Status Scheduler::RecoverSchedules(std::size_t ids, WallNanos wall_now,
                                   SteadyTime steady_now,
                                   std::uint64_t* max_version,
                                   bool* bad_namespace) {
  std::vector<std::unique_ptr<Lane>> lanes;
  for (auto& p : partitions_) {
    lanes.push_back(std::make_unique<Lane>(*p, wall_now, steady_now));
  }
  const Status read = store_->ForEachSchedule(
      [&](NamespaceId ns, std::string_view key, std::string_view encoded) {
        if (ns >= ids || dispatchers_[ns]->name().empty()) {
          *bad_namespace = true;
          return;
        }
        lanes[PartitionOf(ns, key)]->Add(ns, key, encoded);
      });
  Status restored;
  for (auto& lane : lanes) {
    Status s = lane->Finish(max_version);
    if (!s.ok() && restored.ok()) restored = std::move(s);
  }
  if (!read.ok()) return read;
  if (!restored.ok()) {
    return Status::Internal(store_->where() + ": " + restored.message());
  }
  return Status::Ok();
}

}  // namespace delayd
