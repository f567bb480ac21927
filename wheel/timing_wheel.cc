#include "wheel/timing_wheel.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <utility>

namespace delayd::wheel {
namespace {

// l = ceil(log2(tick_ns)) for DivTick(); a tick is at least 1 ns.
int TickShift(std::uint64_t tick_ns) {
  return std::bit_width(std::max<std::uint64_t>(tick_ns, 1) - 1);
}

// m = ceil(2^(63+l) / tick_ns) for DivTick(); below 2^64 because 2^(l-1) <
// tick_ns.
std::uint64_t TickMagic(std::uint64_t tick_ns, int shift) {
  const std::uint64_t d = std::max<std::uint64_t>(tick_ns, 1);
  const unsigned __int128 power = static_cast<unsigned __int128>(1)
                                  << (63 + shift);
  return static_cast<std::uint64_t>(power / d + (power % d != 0 ? 1 : 0));
}

}  // namespace

TimingWheel::TimingWheel(Time tick)
    : tick_(tick),
      tick_ns_(static_cast<std::uint64_t>(tick.count())),
      tick_shift_(TickShift(tick_ns_)),
      tick_magic_(TickMagic(tick_ns_, tick_shift_)),
      max_tick_(std::min<std::uint64_t>(
          kMaxTick, static_cast<std::uint64_t>(Time::max().count()) /
                        static_cast<std::uint64_t>(
                            std::max<std::int64_t>(1, tick.count())))) {
  assert(tick.count() > 0);
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

void TimingWheel::Reserve(std::size_t n) {
  while (capacity_ < n) Grow();
}

std::size_t TimingWheel::MemoryUsage() const {
  return sizeof(*this) + chunks_.capacity() * sizeof(chunks_[0]) +
         chunks_.size() * sizeof(Chunk);
}

bool TimingWheel::IsPending(Handle handle) const {
  return Find(handle) != kNil;
}

std::optional<TimingWheel::Time> TimingWheel::Due(Handle handle) const {
  const std::uint32_t i = Find(handle);
  if (i == kNil) return std::nullopt;
  return ToTime(tick_of(i));
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
