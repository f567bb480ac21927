// An exact hierarchical timing wheel.
//
// The wheel maps handles to absolute deadlines. It has no clock, no thread and
// no lock: its owner passes the current time to Advance() and asks
// NextDeadline() when Advance() must next be called.
//
// Time is a std::chrono::nanoseconds offset from an epoch the owner chooses
// (e.g. the steady_clock instant the owner started). The wheel counts in ticks
// of a length fixed at construction. A deadline is rounded UP to a whole tick
// and `now` is rounded DOWN, so a timer is never visited before its deadline
// and is visited in the first Advance() whose `now` reaches its deadline tick:
// at most one tick after the deadline.
//
// Structure: kLevels levels of 64 slots; level L slot j holds timers whose
// deadline tick shares all bits above level L with the wheel's current tick
// and has j in bits [6L, 6L+6). A 64-bit occupancy bitmap per level finds the
// next slot in O(1). A slot is four intrusive doubly linked FIFO lists (lanes,
// picked by the tick's low bits) of nodes in a chunked slab addressed by 32-bit
// indices, so schedule, cancel and reschedule are O(1) and allocate nothing
// once the slab has grown to the high-water mark.
// When time reaches a slot above level 0, its timers cascade to finer levels,
// so a timer a year away fires as precisely as one a millisecond away.
//
// Ordering: Advance() visits due timers in non-decreasing deadline tick;
// timers with the same tick are visited in the order they were (re)scheduled.
//
// Thread safety: none. One owner calls every method (the daemon confines each
// wheel to one Asio strand).
#ifndef DELAYD_WHEEL_TIMING_WHEEL_H_
#define DELAYD_WHEEL_TIMING_WHEEL_H_

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

// Forces inlining of Schedule, Cancel and Reschedule into their callers, and
// of the few helpers they are made of, which the compiler's heuristics would
// otherwise leave as calls (they are used from several places). A call's
// register saves and reloads of the wheel's fields cost about an eighth of a
// schedule + cancel pair, more than any other part of it. So these are
// defined in this header, below the class.
#if defined(__GNUC__)
#define DELAYD_WHEEL_HOT [[gnu::always_inline]] inline
#else
#define DELAYD_WHEEL_HOT inline
#endif

namespace delayd::wheel {

class TimingWheel {
 public:
  using Time = std::chrono::nanoseconds;

  // Identifies one scheduled timer until it fires or is cancelled. A handle
  // of a timer that has fired or been cancelled is stale: every method treats
  // it as "not pending", even after its slab node is reused. Never 0.
  using Handle = std::uint64_t;
  static constexpr Handle kNoHandle = 0;

  // Deadlines beyond this many ticks are clamped to it, or to the last tick
  // whose time a Time can hold if that is sooner (Time::max() is 292 years
  // of nanoseconds).
  static constexpr std::uint64_t kMaxTick = (std::uint64_t{1} << 56) - 1;

  // What Advance() hands to its visitor for each due timer.
  struct Expired {
    Handle handle;
    // The caller's value given to Schedule().
    std::uint32_t cookie;
    // The tick the timer was due in, as a time: its deadline rounded up to the
    // tick, or the wheel's time when it was scheduled if that was later.
    Time due;
  };

  // `tick` must be positive.
  explicit TimingWheel(Time tick);
  TimingWheel(const TimingWheel&) = delete;
  TimingWheel& operator=(const TimingWheel&) = delete;

  // Schedules a timer due at `deadline` carrying `cookie`. A deadline at or
  // before the wheel's current time makes the timer due at once: it is
  // visited by the next Advance(). Returns its handle.
  DELAYD_WHEEL_HOT Handle Schedule(Time deadline, std::uint32_t cookie);

  // Cancels a pending timer. Returns false (and changes nothing) if `handle`
  // is not pending: already fired, already cancelled, or never issued.
  DELAYD_WHEEL_HOT bool Cancel(Handle handle);

  // Moves a pending timer to a new deadline, as if it were cancelled and
  // scheduled again (it keeps its handle and cookie). Returns false (and
  // changes nothing) if `handle` is not pending.
  DELAYD_WHEEL_HOT bool Reschedule(Handle handle, Time deadline);

  // Whether `handle` is pending.
  bool IsPending(Handle handle) const;

  // When a pending timer is due (its deadline rounded up to the tick, or the
  // wheel's time if that is later); nullopt if `handle` is not pending.
  std::optional<Time> Due(Handle handle) const;

  // Advances the wheel's time to `now` and calls `visit(const Expired&)` for
  // every timer due by then, removing each before its visit. `visit` may call
  // Schedule, Cancel and Reschedule: a timer it cancels that is due in this
  // same Advance is not visited; one it schedules due at or before `now` is
  // visited in this Advance, after those already due at that tick. `visit`
  // must not call Advance. Time never goes backwards: a `now` before the
  // wheel's time is treated as the wheel's time. Returns the number visited.
  template <typename Visitor>
  std::size_t Advance(Time now, Visitor&& visit);

  // The earliest time at which Advance() will visit a timer, or nullopt when
  // nothing is pending. Exact: a timer is due at that time, so an owner that
  // sleeps until then never wakes for nothing. May be at or before the
  // wheel's current time (then something is due now).
  std::optional<Time> NextDeadline() const;

  // The number of pending timers.
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The wheel's current time: the last Advance()'s `now`, rounded down to the
  // tick.
  Time now() const { return ToTime(elapsed_); }
  Time tick() const { return tick_; }

  // Grows the slab so that `n` timers in all can be pending without
  // allocating.
  void Reserve(std::size_t n);

  // Bytes of memory the wheel holds (slab, chunk table and slot arrays).
  std::size_t MemoryUsage() const;

 private:
  static constexpr int kBitsPerLevel = 6;
  static constexpr int kSlots = 1 << kBitsPerLevel;
  static constexpr int kLevels = 10;  // 60 bits >= the 56 bits of kMaxTick.
  static constexpr std::uint32_t kNil = 0xFFFFFFFFu;
  static constexpr int kChunkBits = 12;  // 4096 nodes (96 KiB) per chunk.
  static constexpr std::uint32_t kChunkSize = 1u << kChunkBits;

  // A free node's tick: above kMaxTick, so no pending timer has it.
  static constexpr std::uint64_t kFreeTick = ~std::uint64_t{0};

  // A timer's slot-list links. Kept apart from the other fields so that
  // walking a slot's list (a cascade) touches 8 bytes per timer: the walk is
  // a chain of dependent loads, and a compact array keeps it in cache and in
  // the TLB, while the loads of the timers' ticks it finds run in parallel.
  struct Link {
    std::uint32_t prev;
    std::uint32_t next;  // Also links the free list.
  };

  // The slab: chunks of kChunkSize nodes, each field in an array of its own.
  // 24 bytes per timer in all. No field shares a word with another, so no
  // store is a partial write of a word read soon after (which would stall
  // store forwarding).
  struct Chunk {
    std::uint64_t tick[kChunkSize];  // Effective deadline tick; kFreeTick.
    Link link[kChunkSize];
    std::uint32_t generation[kChunkSize];
    std::uint32_t cookie[kChunkSize];
  };
  static_assert(sizeof(Chunk) == 24 * kChunkSize);

  // A slot is kLanes lists; a timer goes in the lane its tick's low bits
  // pick. Timers with the same tick share a lane, so each lane's FIFO order is
  // all the ordering a slot must keep, and a cascade can walk the lanes
  // interleaved: kLanes independent chains of loads in flight instead of one.
  static constexpr int kLanes = 4;
  struct List {
    std::uint32_t head = kNil;
    std::uint32_t tail = kNil;
  };
  struct SlotLists {
    List lane[kLanes];
    bool empty() const {
      for (const List& l : lane) {
        if (l.head != kNil) return false;
      }
      return true;
    }
  };
  static int LaneOf(std::uint64_t tick) {
    return static_cast<int>(tick & (kLanes - 1));
  }

  struct Slot {
    int level;
    int index;
    std::uint64_t start;  // First tick the slot covers.
  };

  Chunk& chunk(std::uint32_t i) { return *chunks_[i >> kChunkBits]; }
  const Chunk& chunk(std::uint32_t i) const {
    return *chunks_[i >> kChunkBits];
  }
  static std::uint32_t Offset(std::uint32_t i) { return i & (kChunkSize - 1); }
  std::uint64_t& tick_of(std::uint32_t i) { return chunk(i).tick[Offset(i)]; }
  std::uint64_t tick_of(std::uint32_t i) const {
    return chunk(i).tick[Offset(i)];
  }
  Link& link(std::uint32_t i) { return chunk(i).link[Offset(i)]; }
  const Link& link(std::uint32_t i) const { return chunk(i).link[Offset(i)]; }
  static Handle MakeHandle(std::uint32_t index, std::uint32_t generation) {
    return (Handle{generation} << 32) | index;
  }
  // The level of the slot a timer due at `tick` belongs in, relative to
  // elapsed_: that of the highest bit in which the two differ.
  int LevelOf(std::uint64_t tick) const {
    return kLevelOfWidth[std::bit_width(tick ^ elapsed_)];
  }
  // The level for a difference of each bit width (a lookup is quicker than
  // the division by kBitsPerLevel).
  static constexpr std::array<std::uint8_t, 65> kLevelOfWidth = [] {
    std::array<std::uint8_t, 65> levels{};
    for (int width = 1; width <= 64; ++width) {
      levels[width] = static_cast<std::uint8_t>((width - 1) / kBitsPerLevel);
    }
    return levels;
  }();
  static int IndexOf(std::uint64_t tick, int level) {
    return static_cast<int>((tick >> (level * kBitsPerLevel)) & (kSlots - 1));
  }
  // The node index of a pending handle, or kNil.
  DELAYD_WHEEL_HOT std::uint32_t Find(Handle handle) const;

  DELAYD_WHEEL_HOT std::uint64_t DeadlineTick(Time deadline) const;
  std::uint64_t NowTick(Time now) const {
    const std::int64_t ns = now.count();
    if (ns <= 0) return 0;
    return std::min(DivTick(static_cast<std::uint64_t>(ns)), max_tick_);
  }
  // floor(ns / tick) for 0 <= ns < 2^63, by one multiply and a shift (a
  // 64-bit division costs more than the rest of Schedule). With l =
  // ceil(log2(tick)) and m = ceil(2^(63+l) / tick), which is below 2^64,
  // ns * m / 2^(63+l) exceeds ns / tick by less than 2^63 * tick / (tick *
  // 2^(63+l)) = 2^-l <= 1 / tick, while ns / tick is at least 1 / tick below
  // the next integer: both have the same floor (Granlund and Montgomery,
  // "Division by invariant integers using multiplication", 1994, theorem
  // 4.2). (2 * ns) * m / 2^(64+l) is the same quotient, taken from the high
  // word of one 64x64-bit product.
  std::uint64_t DivTick(std::uint64_t ns) const {
    return static_cast<std::uint64_t>(
               (static_cast<unsigned __int128>(ns + ns) * tick_magic_) >> 64) >>
           tick_shift_;
  }
  Time ToTime(std::uint64_t tick) const { return tick_ * tick; }

  // Links node `i` at the tail of the slot its tick belongs to, relative to
  // elapsed_.
  DELAYD_WHEEL_HOT void Place(std::uint32_t i);
  // Unlinks pending node `i` from its slot. The slot is found from the tick
  // and elapsed_ alone. That holds between Advance() calls and while visitors
  // run: once elapsed_ reaches a slot's first tick, Advance cascades the slot
  // before anything else, so every pending timer sits at the level LevelOf()
  // gives for the current elapsed_.
  DELAYD_WHEEL_HOT void Unlink(std::uint32_t i);
  // Unlinks and returns the head of a non-empty level-0 list.
  std::uint32_t PopFront(int index, int lane) {
    List& list = slots_[0][index].lane[lane];
    const std::uint32_t i = list.head;
    list.head = link(i).next;
    if (list.head == kNil) {
      list.tail = kNil;
      if (slots_[0][index].empty()) {
        occupied_[0] &= ~(std::uint64_t{1} << index);
      }
    } else {
      link(list.head).prev = kNil;
    }
    return i;
  }
  // Moves every timer of a slot above level 0 to the finer slots that now
  // cover it (elapsed_ is the slot's first tick), keeping their order.
  void Cascade(int level, int index);
  // Returns node `i` to the free list, invalidating its handle.
  void Release(std::uint32_t i) {
    tick_of(i) = kFreeTick;
    link(i).next = free_head_;
    free_head_ = i;
  }
  // Adds one chunk of free nodes to the slab.
  void Grow();
  DELAYD_WHEEL_HOT std::uint32_t Allocate();
  // The earliest occupied slot, or nullopt if the wheel is empty.
  std::optional<Slot> FirstSlot() const;
  void NoteScheduled(std::uint64_t tick);
  void NoteRemoved(std::uint64_t tick);

  const Time tick_;
  const std::uint64_t tick_ns_;
  const int tick_shift_;            // l = ceil(log2(tick_ns_)), see DivTick.
  const std::uint64_t tick_magic_;  // ceil(2^(63 + l) / tick_ns_)
  // The last tick a timer may have: kMaxTick, or sooner if its time would
  // not fit in a Time.
  const std::uint64_t max_tick_;
  std::uint64_t elapsed_ = 0;  // The wheel's current tick.
  std::size_t size_ = 0;
  std::vector<std::unique_ptr<Chunk>> chunks_;
  std::uint32_t capacity_ = 0;
  std::uint32_t free_head_ = kNil;
  std::array<std::uint64_t, kLevels> occupied_{};
  std::array<std::array<SlotLists, kSlots>, kLevels> slots_{};
  // No occupied slot starts before this tick (a lower bound: Place lowers
  // it, Advance recomputes it), so Advance up to it has nothing to do.
  static constexpr std::uint64_t kNoStop = ~std::uint64_t{0};
  std::uint64_t stop_ = kNoStop;
  // NextDeadline() memo, one word so that the checks on every schedule and
  // cancel are one compare: the earliest tick, kNextEmpty (nothing pending;
  // above every tick, so a schedule lowers it) or kNextUnknown.
  static constexpr std::uint64_t kNextEmpty = kMaxTick + 1;
  static constexpr std::uint64_t kNextUnknown = ~std::uint64_t{0};
  mutable std::uint64_t next_tick_ = kNextEmpty;
#ifndef NDEBUG
  bool advancing_ = false;
#endif
};

// ---- the hot operations, inline (see DELAYD_WHEEL_HOT) ----

inline std::uint64_t TimingWheel::DeadlineTick(Time deadline) const {
  const std::int64_t ns = deadline.count();
  if (ns <= 0) return 0;
  // ceil(ns / tick) = floor((ns - 1) / tick) + 1 for ns >= 1.
  return std::min(DivTick(static_cast<std::uint64_t>(ns) - 1) + 1, max_tick_);
}

inline std::uint32_t TimingWheel::Allocate() {
  if (free_head_ == kNil) Grow();
  const std::uint32_t i = free_head_;
  free_head_ = link(i).next;
  // Generations start at 1 and skip 0 on wrap, so no handle is ever 0.
  std::uint32_t& generation = chunk(i).generation[Offset(i)];
  generation = generation + 1 == 0 ? 1 : generation + 1;
  return i;
}

inline std::uint32_t TimingWheel::Find(Handle handle) const {
  const auto index = static_cast<std::uint32_t>(handle);
  const auto generation = static_cast<std::uint32_t>(handle >> 32);
  if (index >= capacity_) return kNil;
  const Chunk& c = chunk(index);
  const std::uint32_t k = Offset(index);
  if (c.generation[k] != generation || c.tick[k] == kFreeTick) return kNil;
  return index;
}

inline void TimingWheel::Place(std::uint32_t i) {
  const std::uint64_t tick = tick_of(i);
  const int level = LevelOf(tick);
  const int index = IndexOf(tick, level);
  List& list = slots_[level][index].lane[LaneOf(tick)];
  // One 8-byte store: Unlink reads the pair as one word, which a load can
  // take from a single store still in flight but not from two.
  const auto word = std::bit_cast<std::uint64_t>(Link{list.tail, kNil});
  std::memcpy(&link(i), &word, sizeof word);
  if (list.tail == kNil) {
    list.head = i;
    occupied_[level] |= std::uint64_t{1} << index;
    // stop_ is at or before the first tick of every occupied slot, so only
    // a lane that was empty (its slot perhaps too) can lower it. The slot's
    // first tick: the timer's tick with the digits below its level cleared
    // (above them it equals elapsed_, by the choice of level).
    const int shift = level * kBitsPerLevel;
    stop_ = std::min(stop_, tick >> shift << shift);
  } else {
    link(list.tail).next = i;
  }
  list.tail = i;
}

inline void TimingWheel::Unlink(std::uint32_t i) {
  const std::uint64_t tick = tick_of(i);
  const int level = LevelOf(tick);
  const int index = IndexOf(tick, level);
  List& list = slots_[level][index].lane[LaneOf(tick)];
  const Link l = link(i);
  assert(l.prev != kNil || list.head == i);
  assert(l.next != kNil || list.tail == i);
  if (l.prev == kNil) {
    list.head = l.next;
  } else {
    link(l.prev).next = l.next;
  }
  if (l.next == kNil) {
    list.tail = l.prev;
  } else {
    link(l.next).prev = l.prev;
  }
  if (list.head == kNil && slots_[level][index].empty()) {
    occupied_[level] &= ~(std::uint64_t{1} << index);
  }
}

inline void TimingWheel::NoteScheduled(std::uint64_t tick) {
  if (next_tick_ != kNextUnknown && tick < next_tick_) next_tick_ = tick;
}

inline void TimingWheel::NoteRemoved(std::uint64_t tick) {
  if (tick == next_tick_) next_tick_ = kNextUnknown;
}

inline TimingWheel::Handle TimingWheel::Schedule(Time deadline,
                                                 std::uint32_t cookie) {
  const std::uint32_t i = Allocate();
  Chunk& c = chunk(i);
  const std::uint32_t k = Offset(i);
  const std::uint64_t tick = std::max(DeadlineTick(deadline), elapsed_);
  c.tick[k] = tick;
  c.cookie[k] = cookie;
  Place(i);
  ++size_;
  NoteScheduled(tick);
  return MakeHandle(i, c.generation[k]);
}

inline bool TimingWheel::Cancel(Handle handle) {
  const std::uint32_t i = Find(handle);
  if (i == kNil) return false;
  NoteRemoved(tick_of(i));
  Unlink(i);
  Release(i);
  --size_;
  return true;
}

inline bool TimingWheel::Reschedule(Handle handle, Time deadline) {
  const std::uint32_t i = Find(handle);
  if (i == kNil) return false;
  NoteRemoved(tick_of(i));
  Unlink(i);
  const std::uint64_t tick = std::max(DeadlineTick(deadline), elapsed_);
  tick_of(i) = tick;
  Place(i);
  NoteScheduled(tick);
  return true;
}

template <typename Visitor>
std::size_t TimingWheel::Advance(Time now, Visitor&& visit) {
#ifndef NDEBUG
  assert(!advancing_ && "Advance() called from its own visitor");
  advancing_ = true;
#endif
  const std::uint64_t now_tick = std::max(NowTick(now), elapsed_);
  if (now_tick < stop_) {
    // No occupied slot starts by then: nothing to cascade or visit.
    elapsed_ = now_tick;
#ifndef NDEBUG
    advancing_ = false;
#endif
    return 0;
  }
  std::size_t visited = 0;
  next_tick_ = kNextUnknown;
  for (;;) {
    std::optional<Slot> slot = FirstSlot();
    if (!slot || slot->start > now_tick) break;
    elapsed_ = slot->start;
    if (slot->level > 0) {
      Cascade(slot->level, slot->index);
      continue;
    }
    // Level 0: every timer here is due at exactly elapsed_, so all are in
    // one lane. Visit them in FIFO order; timers the visitor schedules for
    // this tick join the tail.
    const int lane = LaneOf(elapsed_);
    while (slots_[0][slot->index].lane[lane].head != kNil) {
      const std::uint32_t i = PopFront(slot->index, lane);
      Chunk& c = chunk(i);
      const std::uint32_t k = Offset(i);
      const Expired expired{MakeHandle(i, c.generation[k]), c.cookie[k],
                            ToTime(c.tick[k])};
      Release(i);
      --size_;
      ++visited;
      next_tick_ = kNextUnknown;
      visit(static_cast<const Expired&>(expired));
    }
  }
  elapsed_ = std::max(elapsed_, now_tick);
  next_tick_ = kNextUnknown;
  const std::optional<Slot> first = FirstSlot();
  stop_ = first ? first->start : kNoStop;
#ifndef NDEBUG
  advancing_ = false;
#endif
  return visited;
}

}  // namespace delayd::wheel

#undef DELAYD_WHEEL_HOT

#endif  // DELAYD_WHEEL_TIMING_WHEEL_H_
