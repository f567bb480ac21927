#include "wheel/timing_wheel.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

namespace delayd::wheel {

TimingWheel::TimingWheel(Time tick)
    : tick_(tick),
      tick_ns_(static_cast<std::uint64_t>(tick.count())),
      tick_reciprocal_(
          ~std::uint64_t{0} /
          static_cast<std::uint64_t>(std::max<std::int64_t>(1, tick.count()))),
      max_tick_(std::min<std::uint64_t>(
          kMaxTick, static_cast<std::uint64_t>(Time::max().count()) /
                        static_cast<std::uint64_t>(
                            std::max<std::int64_t>(1, tick.count())))) {
  assert(tick.count() > 0);
}

std::uint64_t TimingWheel::DeadlineTick(Time deadline) const {
  const std::int64_t ns = deadline.count();
  if (ns <= 0) return 0;
  // ceil(ns / tick) = floor((ns - 1) / tick) + 1 for ns >= 1.
  return std::min(DivTick(static_cast<std::uint64_t>(ns) - 1) + 1, max_tick_);
}

void TimingWheel::Grow() {
  assert(capacity_ <= std::numeric_limits<std::uint32_t>::max() - kChunkSize);
  auto c = std::make_unique<Chunk>();
  const std::uint32_t base = capacity_;
  // Thread the new nodes onto the free list in index order, so that a fresh
  // wheel fills its slab front to back.
  for (std::uint32_t k = 0; k < kChunkSize; ++k) {
    c->tick[k] = kFreeTick;
    c->generation[k] = 0;
    c->link[k].next = k + 1 < kChunkSize ? base + k + 1 : free_head_;
  }
  chunks_.push_back(std::move(c));
  capacity_ += kChunkSize;
  free_head_ = base;
}

std::uint32_t TimingWheel::Allocate() {
  if (free_head_ == kNil) Grow();
  const std::uint32_t i = free_head_;
  free_head_ = link(i).next;
  // Generations start at 1 and skip 0 on wrap, so no handle is ever 0.
  std::uint32_t& generation = chunk(i).generation[Offset(i)];
  generation = generation + 1 == 0 ? 1 : generation + 1;
  return i;
}

void TimingWheel::Reserve(std::size_t n) {
  while (capacity_ < n) Grow();
}

std::size_t TimingWheel::MemoryUsage() const {
  return sizeof(*this) + chunks_.capacity() * sizeof(chunks_[0]) +
         chunks_.size() * sizeof(Chunk);
}

std::uint32_t TimingWheel::Find(Handle handle) const {
  const auto index = static_cast<std::uint32_t>(handle);
  const auto generation = static_cast<std::uint32_t>(handle >> 32);
  if (index >= capacity_) return kNil;
  const Chunk& c = chunk(index);
  const std::uint32_t k = Offset(index);
  if (c.generation[k] != generation || c.tick[k] == kFreeTick) return kNil;
  return index;
}

bool TimingWheel::IsPending(Handle handle) const {
  return Find(handle) != kNil;
}

std::optional<TimingWheel::Time> TimingWheel::Due(Handle handle) const {
  const std::uint32_t i = Find(handle);
  if (i == kNil) return std::nullopt;
  return ToTime(tick_of(i));
}

void TimingWheel::Place(std::uint32_t i) {
  const std::uint64_t tick = tick_of(i);
  const int level = LevelOf(tick);
  const int index = IndexOf(tick, level);
  // The slot's first tick: the timer's tick with the digits below its level
  // cleared (above them it equals elapsed_, by the choice of level).
  const int shift = level * kBitsPerLevel;
  stop_ = std::min(stop_, tick >> shift << shift);
  List& list = slots_[level][index].lane[LaneOf(tick)];
  // One 8-byte store: Unlink reads the pair as one word, which a load can
  // take from a single store still in flight but not from two.
  const auto word = std::bit_cast<std::uint64_t>(Link{list.tail, kNil});
  std::memcpy(&link(i), &word, sizeof word);
  if (list.tail == kNil) {
    list.head = i;
    occupied_[level] |= std::uint64_t{1} << index;
  } else {
    link(list.tail).next = i;
  }
  list.tail = i;
}

void TimingWheel::Unlink(std::uint32_t i) {
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

void TimingWheel::Cascade(int level, int index) {
  // Detach the lanes, then place their timers, walking the lanes in turn so
  // that their chains of link loads overlap. Each lane keeps its order; the
  // order between lanes does not matter (no two lanes share a tick).
  std::uint32_t cursor[kLanes];
  for (int k = 0; k < kLanes; ++k) {
    cursor[k] = std::exchange(slots_[level][index].lane[k], List{}).head;
  }
  occupied_[level] &= ~(std::uint64_t{1} << index);
  for (;;) {
    bool any = false;
    for (std::uint32_t& i : cursor) {
      if (i == kNil) continue;
      any = true;
      const std::uint32_t next = link(i).next;
      Place(i);
      i = next;
    }
    if (!any) break;
  }
}

void TimingWheel::NoteScheduled(std::uint64_t tick) {
  if (next_tick_ != kNextUnknown && tick < next_tick_) next_tick_ = tick;
}

void TimingWheel::NoteRemoved(std::uint64_t tick) {
  if (tick == next_tick_) next_tick_ = kNextUnknown;
}

TimingWheel::Handle TimingWheel::Schedule(Time deadline, std::uint32_t cookie) {
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

bool TimingWheel::Cancel(Handle handle) {
  const std::uint32_t i = Find(handle);
  if (i == kNil) return false;
  NoteRemoved(tick_of(i));
  Unlink(i);
  Release(i);
  --size_;
  return true;
}

bool TimingWheel::Reschedule(Handle handle, Time deadline) {
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

std::optional<TimingWheel::Slot> TimingWheel::FirstSlot() const {
  // Every timer at level L is due before every timer at level L+1 (it shares
  // one more digit with the wheel's time), so the lowest occupied level holds
  // the earliest slot. Slots below the wheel's own digit are empty by
  // construction, so the first occupied bit at or above it is the next slot.
  for (int level = 0; level < kLevels; ++level) {
    const int shift = level * kBitsPerLevel;
    const int digit = static_cast<int>((elapsed_ >> shift) & (kSlots - 1));
    const std::uint64_t bits = occupied_[level] & (~std::uint64_t{0} << digit);
    assert(bits == occupied_[level]);
    if (bits == 0) continue;
    const int index = std::countr_zero(bits);
    const int span_bits = shift + kBitsPerLevel;
    const std::uint64_t prefix =
        span_bits >= 64 ? 0 : elapsed_ & ~((std::uint64_t{1} << span_bits) - 1);
    return Slot{level, index,
                prefix | (static_cast<std::uint64_t>(index) << shift)};
  }
  return std::nullopt;
}

std::optional<TimingWheel::Time> TimingWheel::NextDeadline() const {
  if (next_tick_ == kNextUnknown) {
    const std::optional<Slot> slot = FirstSlot();
    if (!slot) {
      next_tick_ = kNextEmpty;
    } else if (slot->level == 0) {
      next_tick_ = slot->start;
    } else {
      // A coarse slot spans many ticks: its earliest timer is the answer.
      // The scan is paid once per slot, like the cascade that follows it.
      std::uint64_t best = kMaxTick;
      for (const List& list : slots_[slot->level][slot->index].lane) {
        for (std::uint32_t i = list.head; i != kNil; i = link(i).next) {
          best = std::min<std::uint64_t>(best, tick_of(i));
        }
      }
      next_tick_ = best;
    }
  }
  if (next_tick_ == kNextEmpty) return std::nullopt;
  return ToTime(next_tick_);
}

}  // namespace delayd::wheel
