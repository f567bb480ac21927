// The schedules of one partition, packed so that a pending schedule costs
// less than twice a pending one-shot timer (tests/bench/README.md):
//   - a fixed slot of the fields every wake-up reads or writes;
//   - one heap block per schedule with its key, its payload and the fields
//     read only to build a full record (created_at, start, end, ...), only
//     those present;
//   - cron specs parsed once per distinct (expression, zone) and shared,
//     counted by the schedules that use them (schedules mostly repeat a few
//     expressions: the bench's million share 48 per partition);
//   - a hash index (KeyIndex, 8 B a slot) to find one by namespace and key,
//     and a B-tree of slot numbers (4 B each) for listing in key order.
//
// A slot's number is its id while it lives; a removed slot's number is used
// again. ScheduleRecord (schedule_record.h) is what goes in and comes out.
//
// Thread safety: none (the partition's mutex guards it).
#ifndef DELAYD_SERVER_CORE_SCHEDULE_SET_H_
#define DELAYD_SERVER_CORE_SCHEDULE_SET_H_

#include <absl/container/btree_set.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "server/common/status.h"
#include "server/common/types.h"
#include "server/core/key_index.h"
#include "server/core/schedule_record.h"
#include "server/schedule/spec.h"
#include "wheel/timing_wheel.h"

namespace delayd {

class ScheduleSet {
 public:
  static constexpr std::uint32_t kNone = KeyIndex::kNone;
  static constexpr WallNanos kNoWake = INT64_MIN;

  // What a wake-up reads and writes; the rest is in the heap block.
  struct Slot {
    std::unique_ptr<char[]> data;  // null: a free slot
    WallNanos wake = kNoWake;      // the instant it is armed for
    WallNanos last_instant = 0;    // schedule::State
    std::uint64_t runs = 0;        // schedule::State
    // The number of its last run while that run's event may be open (set,
    // pending, or delivered and not acknowledged); 0 when closed. Not
    // stored: recovery finds open runs among the pending timers and events.
    std::uint64_t open_run = 0;
    std::uint64_t version = 0;
    wheel::TimingWheel::Handle handle = wheel::TimingWheel::kNoHandle;
    std::uint32_t spec = kNone;  // its cron spec; kNone for an interval
    NamespaceId ns = 0;
    std::uint16_t flags = 0;  // kPaused, kFinished, and which fields the
                              // block holds
  };

  // A schedule read out: its record, spec and policies.
  struct Loaded {
    ScheduleRecord rec;
    schedule::Policies policies;
    const schedule::Spec& spec() const { return cron ? *cron : every; }
    const schedule::Spec* cron = nullptr;  // shared; lives while `id` does
    schedule::Spec every;
  };

  ScheduleSet() = default;
  // (The B-tree's order refers to this set.)
  ScheduleSet(const ScheduleSet&) = delete;
  ScheduleSet& operator=(const ScheduleSet&) = delete;

  std::size_t size() const { return order_.size(); }

  // Schedule `id`'s cron spec (shared; lives while `id` does), or null for
  // an interval.
  const schedule::Spec* cron(std::uint32_t id) const;
  // The memo of schedule `id`'s cron spec (shared likewise), or null for an
  // interval (whose Next is arithmetic).
  schedule::NextMemo* memo(std::uint32_t id);
  // Schedule `key` of `ns`, or kNone.
  std::uint32_t Find(NamespaceId ns, std::string_view key) const;
  // Adds schedule `key` of `ns` (absent) as `rec`; its id in `*id`. An
  // error (nothing added) if its spec does not parse.
  Status Add(NamespaceId ns, std::string_view key, const ScheduleRecord& rec,
             std::uint32_t* id);
  // Recovery adds many schedules before any is looked up: between these two
  // calls, Add leaves them out of the hash index, and the second puts them
  // all in at once, in the index's own order (a sequential pass over it, not
  // one cache miss per schedule). Find does not see them until then.
  void DeferIndexing() { defer_ = true; }
  void IndexDeferred();
  // Removes schedule `id` (its wheel handle is the caller's to cancel).
  void Remove(std::uint32_t id);

  Slot& slot(std::uint32_t id) { return slots_[id]; }
  const Slot& slot(std::uint32_t id) const { return slots_[id]; }
  std::string_view key(std::uint32_t id) const;
  std::string_view payload(std::uint32_t id) const;
  Loaded Load(std::uint32_t id) const {
    Loaded out;
    Load(id, &out);
    return out;
  }
  // The same into `*out`, whose strings' buffers are used again.
  void Load(std::uint32_t id, Loaded* out) const;
  // Writes `state` as schedule `id`'s.
  void SetState(std::uint32_t id, const schedule::State& state);

  // Appends to `keys` the first `limit` keys of `ns`, in order, that start
  // with `prefix` and come after `after`.
  void List(NamespaceId ns, std::string_view prefix, const std::string& after,
            std::size_t limit, std::vector<std::string>* keys) const;
  // Ids are below capacity(); live(id) if schedule `id` exists.
  std::uint32_t capacity() const {
    return static_cast<std::uint32_t>(slots_.size());
  }
  bool live(std::uint32_t id) const {
    return id < slots_.size() && slots_[id].data != nullptr;
  }
  // Whether schedule `id` holds a run back (buffer-one).
  bool holds_run(std::uint32_t id) const;
  // Distinct cron specs held (for tests).
  std::size_t shared_specs() const { return spec_ids_.size(); }

 private:
  // Orders slot numbers by (namespace, key); finds by a Probe too.
  struct Probe {
    NamespaceId ns;
    std::string_view key;
  };
  struct Order {
    using is_transparent = void;
    explicit Order(const ScheduleSet* s) : set(s) {}
    const ScheduleSet* set;
    Probe Of(std::uint32_t id) const {
      return {set->slots_[id].ns, set->key(id)};
    }
    static bool Less(const Probe& a, const Probe& b) {
      return a.ns != b.ns ? a.ns < b.ns : a.key < b.key;
    }
    bool operator()(std::uint32_t a, std::uint32_t b) const {
      return Less(Of(a), Of(b));
    }
    bool operator()(std::uint32_t a, const Probe& b) const {
      return Less(Of(a), b);
    }
    bool operator()(const Probe& a, std::uint32_t b) const {
      return Less(a, Of(b));
    }
  };
  struct CronSpec {
    std::string cron, zone;
    schedule::Spec spec;
    std::uint32_t refs = 0;
    schedule::NextMemo memo;
  };

  // The spec id for `rec`'s cron, parsed if new (one more reference).
  Status InternCron(const ScheduleRecord& rec, std::uint32_t* spec);
  void ReleaseCron(std::uint32_t spec);
  // Fills slot `id`'s block and flags from `rec`, with `key`.
  void Pack(std::uint32_t id, std::string_view key, const ScheduleRecord& rec);

  std::deque<Slot> slots_;
  std::vector<std::uint32_t> free_;
  KeyIndex keys_;
  absl::btree_set<std::uint32_t, Order> order_{Order{this}};
  std::deque<CronSpec> specs_;
  std::vector<std::uint32_t> free_specs_;
  std::unordered_map<std::string, std::uint32_t> spec_ids_;
  std::string spec_name_;  // the spec table's key, built (scratch)
  bool defer_ = false;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> deferred_;  // hash, id
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_SCHEDULE_SET_H_
