#include "wheel/timing_wheel.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace delayd::wheel {

TimingWheel::TimingWheel(Time tick)
    : tick_(tick),
      tick_ns_(static_cast<std::uint64_t>(tick.count())),
      tick_reciprocal_(
          ~std::uint64_t{0} /
          static_cast<std::uint64_t>(std::max<std::int64_t>(1, tick.count()))) {
  assert(tick.count() > 0);
  for (auto& level : head_) level.fill(kNil);
  for (auto& level : tail_) level.fill(kNil);
}

std::uint64_t TimingWheel::DeadlineTick(Time deadline) const {
  const std::int64_t ns = deadline.count();
  if (ns <= 0) return 0;
  const auto d = static_cast<std::uint64_t>(ns);
  const std::uint64_t q = DivTick(d);
  return std::min(q + (q * tick_ns_ != d ? 1 : 0), kMaxTick);
}

std::uint64_t TimingWheel::NowTick(Time now) const {
  const std::int64_t ns = now.count();
  if (ns <= 0) return 0;
  return std::min(DivTick(static_cast<std::uint64_t>(ns)), kMaxTick);
}

void TimingWheel::Grow() {
  assert(capacity_ <= std::numeric_limits<std::uint32_t>::max() - kChunkSize);
  chunks_.push_back(std::make_unique<Node[]>(kChunkSize));
  const std::uint32_t base = capacity_;
  capacity_ += kChunkSize;
  // Thread the new nodes onto the free list in index order, so that a fresh
  // wheel fills its slab front to back.
  for (std::uint32_t k = 0; k < kChunkSize; ++k) {
    Node& n = node(base + k);
    n.state = kFree;
    n.generation = 0;
    n.next = k + 1 < kChunkSize ? base + k + 1 : free_head_;
  }
  free_head_ = base;
}

std::uint32_t TimingWheel::Allocate() {
  if (free_head_ == kNil) Grow();
  const std::uint32_t i = free_head_;
  Node& n = node(i);
  free_head_ = n.next;
  // Generations start at 1 and skip 0 on wrap, so no handle is ever 0.
  n.generation = n.generation + 1 == 0 ? 1 : n.generation + 1;
  n.state = kPending;
  return i;
}

void TimingWheel::Release(std::uint32_t i) {
  Node& n = node(i);
  n.state = kFree;
  n.next = free_head_;
  free_head_ = i;
}

void TimingWheel::Reserve(std::size_t n) {
  while (capacity_ < n) Grow();
}

std::size_t TimingWheel::MemoryUsage() const {
  return sizeof(*this) + chunks_.capacity() * sizeof(chunks_[0]) +
         static_cast<std::size_t>(capacity_) * sizeof(Node);
}

std::uint32_t TimingWheel::Find(Handle handle) const {
  const auto index = static_cast<std::uint32_t>(handle);
  const auto generation = static_cast<std::uint32_t>(handle >> 32);
  if (index >= capacity_) return kNil;
  const Node& n = node(index);
  if (n.state != kPending || n.generation != generation) return kNil;
  return index;
}

bool TimingWheel::IsPending(Handle handle) const {
  return Find(handle) != kNil;
}

std::optional<TimingWheel::Time> TimingWheel::Due(Handle handle) const {
  const std::uint32_t i = Find(handle);
  if (i == kNil) return std::nullopt;
  return ToTime(node(i).tick);
}

void TimingWheel::Place(std::uint32_t i) {
  Node& n = node(i);
  // The level is that of the highest bit in which the deadline differs from
  // the wheel's time: below it the timer's slot is exact.
  const std::uint64_t diff = n.tick ^ elapsed_;
  const int level =
      diff == 0 ? 0 : (63 - std::countl_zero(diff)) / kBitsPerLevel;
  const int index =
      static_cast<int>((n.tick >> (level * kBitsPerLevel)) & (kSlots - 1));
  n.level = static_cast<std::uint64_t>(level);
  const int shift = level * kBitsPerLevel;
  const int span_bits = shift + kBitsPerLevel;
  const std::uint64_t prefix =
      span_bits >= 64 ? 0 : elapsed_ & ~((std::uint64_t{1} << span_bits) - 1);
  stop_ =
      std::min(stop_, prefix | (static_cast<std::uint64_t>(index) << shift));
  n.next = kNil;
  n.prev = tail_[level][index];
  if (n.prev == kNil) {
    head_[level][index] = i;
    occupied_[level] |= std::uint64_t{1} << index;
  } else {
    node(n.prev).next = i;
  }
  tail_[level][index] = i;
}

void TimingWheel::Unlink(std::uint32_t i) {
  Node& n = node(i);
  const int level = static_cast<int>(n.level);
  const int index =
      static_cast<int>((n.tick >> (level * kBitsPerLevel)) & (kSlots - 1));
  if (n.prev == kNil) {
    head_[level][index] = n.next;
  } else {
    node(n.prev).next = n.next;
  }
  if (n.next == kNil) {
    tail_[level][index] = n.prev;
  } else {
    node(n.next).prev = n.prev;
  }
  if (head_[level][index] == kNil) {
    occupied_[level] &= ~(std::uint64_t{1} << index);
  }
}

void TimingWheel::NoteScheduled(std::uint64_t tick) {
  if (next_valid_ && (!next_tick_ || tick < *next_tick_)) next_tick_ = tick;
}

void TimingWheel::NoteRemoved(std::uint64_t tick) {
  if (next_valid_ && next_tick_ && tick == *next_tick_) next_valid_ = false;
}

TimingWheel::Handle TimingWheel::Schedule(Time deadline, std::uint32_t cookie) {
  const std::uint32_t i = Allocate();
  Node& n = node(i);
  n.tick = std::max(DeadlineTick(deadline), elapsed_);
  n.cookie = cookie;
  Place(i);
  ++size_;
  NoteScheduled(n.tick);
  return MakeHandle(i, n.generation);
}

bool TimingWheel::Cancel(Handle handle) {
  const std::uint32_t i = Find(handle);
  if (i == kNil) return false;
  NoteRemoved(node(i).tick);
  Unlink(i);
  Release(i);
  --size_;
  return true;
}

bool TimingWheel::Reschedule(Handle handle, Time deadline) {
  const std::uint32_t i = Find(handle);
  if (i == kNil) return false;
  Node& n = node(i);
  NoteRemoved(n.tick);
  Unlink(i);
  n.tick = std::max(DeadlineTick(deadline), elapsed_);
  Place(i);
  NoteScheduled(n.tick);
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
  if (!next_valid_) {
    const std::optional<Slot> slot = FirstSlot();
    if (!slot) {
      next_tick_.reset();
    } else if (slot->level == 0) {
      next_tick_ = slot->start;
    } else {
      // A coarse slot spans many ticks: its earliest timer is the answer.
      // The scan is paid once per slot, like the cascade that follows it.
      std::uint64_t best = kMaxTick;
      for (std::uint32_t i = head_[slot->level][slot->index]; i != kNil;
           i = node(i).next) {
        best = std::min<std::uint64_t>(best, node(i).tick);
      }
      next_tick_ = best;
    }
    next_valid_ = true;
  }
  if (!next_tick_) return std::nullopt;
  return ToTime(*next_tick_);
}

}  // namespace delayd::wheel
