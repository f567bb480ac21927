#include "server/core/schedule_set.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "server/common/keyed_hash.h"

namespace delayd {
namespace {

// Slot::flags.
constexpr std::uint16_t kPaused = 1;
constexpr std::uint16_t kFinished = 2;
constexpr std::uint16_t kHasStart = 4;
constexpr std::uint16_t kHasEnd = 8;
constexpr std::uint16_t kHasMaxRuns = 16;
constexpr std::uint16_t kHasJitter = 32;
constexpr std::uint16_t kHasLimit = 64;  // not kDefaultCatchUpLimit
constexpr std::uint16_t kHasBuffered = 128;
constexpr std::uint16_t kEvery = 256;  // an interval: period and anchor
constexpr int kCatchUpShift = 9;       // 2 bits
constexpr int kOverlapShift = 11;      // 2 bits

// The block: key size (2 B), payload size (4 B), the key, the fields the
// flags name (in the order of Fields), the payload.
constexpr std::size_t kHeader = 6;

// Reads and writes the block's optional fields in one order, so that the
// two cannot disagree.
template <typename Io, typename Record>
void Fields(std::uint16_t flags, Io&& io, Record& r) {
  io(r.created_at);
  if (flags & kHasStart) io(*r.start);
  if (flags & kHasEnd) io(*r.end);
  if (flags & kHasMaxRuns) io(r.max_runs);
  if (flags & kHasJitter) io(r.jitter);
  if (flags & kHasLimit) io(r.catch_up_limit);
  if (flags & kHasBuffered) io(*r.state.buffered);
  if (flags & kEvery) {
    io(r.every);
    io(r.anchor);
  }
}

std::uint16_t FlagsOf(const ScheduleRecord& r) {
  std::uint16_t f = 0;
  if (r.state.paused) f |= kPaused;
  if (r.state.finished) f |= kFinished;
  if (r.start) f |= kHasStart;
  if (r.end) f |= kHasEnd;
  if (r.max_runs != 0) f |= kHasMaxRuns;
  if (r.jitter != 0) f |= kHasJitter;
  if (r.catch_up_limit != kDefaultCatchUpLimit) f |= kHasLimit;
  if (r.state.buffered) f |= kHasBuffered;
  if (r.cron.empty()) f |= kEvery;
  f |=
      static_cast<std::uint16_t>(static_cast<int>(r.catch_up) << kCatchUpShift);
  f |= static_cast<std::uint16_t>(static_cast<int>(r.overlap) << kOverlapShift);
  return f;
}

// The shared spec table's key for (cron, zone), in `*out`.
void SpecName(std::string_view cron, std::string_view zone, std::string* out) {
  out->assign(cron).push_back('\0');
  out->append(zone);
}

// A free number from `free`, or a new item at the end of `items`.
template <typename T>
std::uint32_t Allocate(std::vector<std::uint32_t>& free, std::deque<T>& items) {
  if (free.empty()) {
    items.emplace_back();
    return static_cast<std::uint32_t>(items.size() - 1);
  }
  const std::uint32_t at = free.back();
  free.pop_back();
  return at;
}

}  // namespace

std::uint32_t ScheduleSet::Find(NamespaceId ns, std::string_view key) const {
  return keys_.Find(KeyedHash32(ns, key), [&](std::uint32_t id) {
    return slots_[id].ns == ns && this->key(id) == key;
  });
}

std::string_view ScheduleSet::key(std::uint32_t id) const {
  const char* p = slots_[id].data.get();
  std::uint16_t n = 0;
  std::memcpy(&n, p, sizeof n);
  return {p + kHeader, n};
}

std::string_view ScheduleSet::payload(std::uint32_t id) const {
  const char* p = slots_[id].data.get();
  std::uint32_t n = 0;
  std::memcpy(&n, p + 2, sizeof n);
  // The payload ends the block, whose size the header does not keep: it
  // follows from the key's size, the flags and the payload's.
  std::size_t fields = 0;
  static const ScheduleRecord kAll = [] {
    ScheduleRecord r;
    r.start = r.end = r.state.buffered = 0;
    return r;
  }();
  Fields(
      slots_[id].flags, [&](const auto& v) { fields += sizeof v; }, kAll);
  return {p + kHeader + key(id).size() + fields, n};
}

Status ScheduleSet::InternCron(const ScheduleRecord& rec, std::uint32_t* spec) {
  std::string& name = spec_name_;  // (reused: no allocation per lookup)
  SpecName(rec.cron, rec.zone, &name);
  if (auto it = spec_ids_.find(name); it != spec_ids_.end()) {
    ++specs_[it->second].refs;
    *spec = it->second;
    return Status::Ok();
  }
  schedule::Spec parsed;
  if (Status s = schedule::Spec::Cron(rec.cron, rec.zone, &parsed); !s.ok()) {
    return s;
  }
  const std::uint32_t id = Allocate(free_specs_, specs_);
  specs_[id] = CronSpec{rec.cron, rec.zone, std::move(parsed), 1, {}};
  spec_ids_.emplace(name, id);
  *spec = id;
  return Status::Ok();
}

void ScheduleSet::ReleaseCron(std::uint32_t spec) {
  CronSpec& c = specs_[spec];
  if (--c.refs != 0) return;
  SpecName(c.cron, c.zone, &spec_name_);
  spec_ids_.erase(spec_name_);
  c = CronSpec{};
  free_specs_.push_back(spec);
}

void ScheduleSet::Pack(std::uint32_t id, std::string_view key,
                       const ScheduleRecord& rec) {
  Slot& s = slots_[id];
  s.flags = FlagsOf(rec);
  std::size_t size = kHeader + key.size() + rec.payload.size();
  Fields(
      s.flags, [&](const auto& v) { size += sizeof v; }, rec);
  // (Every byte is written below: no zeroing first.)
  std::unique_ptr<char[]> block(new char[size]);
  char* p = block.get();
  const auto key_size = static_cast<std::uint16_t>(key.size());
  const auto payload_size = static_cast<std::uint32_t>(rec.payload.size());
  std::memcpy(p, &key_size, 2);
  std::memcpy(p + 2, &payload_size, 4);
  p += kHeader;
  std::memcpy(p, key.data(), key.size());
  p += key.size();
  Fields(
      s.flags,
      [&](const auto& v) {
        std::memcpy(p, &v, sizeof v);
        p += sizeof v;
      },
      rec);
  if (!rec.payload.empty()) {
    std::memcpy(p, rec.payload.data(), rec.payload.size());
  }
  s.data = std::move(block);
}

Status ScheduleSet::Add(NamespaceId ns, std::string_view key,
                        const ScheduleRecord& rec, std::uint32_t* id) {
  std::uint32_t spec = kNone;
  if (!rec.cron.empty()) {
    if (Status s = InternCron(rec, &spec); !s.ok()) return s;
  } else if (rec.every <= 0) {
    return Status::InvalidArgument("an interval must be positive");
  }
  const std::uint32_t at = Allocate(free_, slots_);
  Slot& s = slots_[at];
  s = Slot{};
  s.ns = ns;
  s.spec = spec;
  s.version = rec.version;
  s.last_instant = rec.state.last_instant;
  s.runs = rec.state.runs;
  Pack(at, key, rec);
  if (defer_) {
    deferred_.emplace_back(KeyedHash32(ns, key), at);
  } else {
    keys_.Insert(KeyedHash32(ns, key), at);
  }
  // (Recovery adds in key order: the hint makes that a constant-time insert.)
  order_.insert(order_.end(), at);
  *id = at;
  return Status::Ok();
}

void ScheduleSet::IndexDeferred() {
  defer_ = false;
  keys_.Reserve(keys_.size() + deferred_.size());
  // One pass of a counting sort by the top 11 bits of each entry's home slot
  // inserts in 2048 runs, each within a few KiB of the slot array, which
  // stays in cache: a full sort by home slot took 3.6 % of start-up with 1 M
  // schedules, and inserting in slot order 13 %.
  constexpr int kBits = 11;
  const int shift = std::max(
      0, static_cast<int>(std::bit_width(keys_.capacity() - 1)) - kBits);
  std::vector<std::uint32_t> start((1u << kBits) + 1, 0);
  for (const auto& e : deferred_) ++start[(keys_.Home(e.first) >> shift) + 1];
  for (std::size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
  std::vector<std::pair<std::uint32_t, std::uint32_t>> sorted(deferred_.size());
  for (const auto& e : deferred_) {
    sorted[start[keys_.Home(e.first) >> shift]++] = e;
  }
  for (const auto& [hash, id] : sorted) keys_.Insert(hash, id);
  deferred_.clear();
  deferred_.shrink_to_fit();
}

void ScheduleSet::Remove(std::uint32_t id) {
  Slot& s = slots_[id];
  order_.erase(id);  // (while its key is still there to compare)
  keys_.Erase(KeyedHash32(s.ns, key(id)), id);
  if (s.spec != kNone) ReleaseCron(s.spec);
  s = Slot{};
  free_.push_back(id);
}

void ScheduleSet::Load(std::uint32_t id, Loaded* out) const {
  const Slot& s = slots_[id];
  ScheduleRecord& r = out->rec;
  r.start = r.end = r.state.buffered = std::nullopt;
  r.max_runs = 0;
  r.jitter = 0;
  r.catch_up_limit = kDefaultCatchUpLimit;
  r.every = r.anchor = 0;
  if (s.flags & kHasStart) r.start = 0;
  if (s.flags & kHasEnd) r.end = 0;
  if (s.flags & kHasBuffered) r.state.buffered = 0;
  const char* p = s.data.get() + kHeader + key(id).size();
  Fields(
      s.flags,
      [&](auto& v) {
        std::memcpy(&v, p, sizeof v);
        p += sizeof v;
      },
      r);
  r.payload.assign(payload(id));
  r.catch_up = static_cast<schedule::CatchUp>((s.flags >> kCatchUpShift) & 3);
  r.overlap = static_cast<schedule::Overlap>((s.flags >> kOverlapShift) & 3);
  r.version = s.version;
  r.state.last_instant = s.last_instant;
  r.state.runs = s.runs;
  r.state.paused = (s.flags & kPaused) != 0;
  r.state.finished = (s.flags & kFinished) != 0;
  if (s.spec != kNone) {
    const CronSpec& c = specs_[s.spec];
    r.cron.assign(c.cron);
    r.zone.assign(c.zone);
    out->cron = &c.spec;
  } else {
    r.cron.clear();
    r.zone.clear();
    out->cron = nullptr;
    // (Checked when added: an interval's spec always builds.)
    IntervalOf(r, &out->every);
  }
  out->policies = PoliciesOf(r);
}

const schedule::Spec* ScheduleSet::cron(std::uint32_t id) const {
  const std::uint32_t spec = slots_[id].spec;
  return spec == kNone ? nullptr : &specs_[spec].spec;
}

schedule::NextMemo* ScheduleSet::memo(std::uint32_t id) {
  const std::uint32_t spec = slots_[id].spec;
  return spec == kNone ? nullptr : &specs_[spec].memo;
}

void ScheduleSet::SetState(std::uint32_t id, const schedule::State& state) {
  Slot& s = slots_[id];
  s.last_instant = state.last_instant;
  s.runs = state.runs;
  s.flags = static_cast<std::uint16_t>((s.flags & ~(kPaused | kFinished)) |
                                       (state.paused ? kPaused : 0) |
                                       (state.finished ? kFinished : 0));
  // A held run (buffer-one) is in the block: rewritten when it changes.
  if (!(s.flags & kHasBuffered) && !state.buffered) return;
  Loaded now = Load(id);
  if (now.rec.state.buffered == state.buffered) return;
  now.rec.state.buffered = state.buffered;
  const std::string k(key(id));
  Pack(id, k, now.rec);
}

bool ScheduleSet::holds_run(std::uint32_t id) const {
  return (slots_[id].flags & kHasBuffered) != 0;
}

void ScheduleSet::List(NamespaceId ns, std::string_view prefix,
                       const std::string& after, std::size_t limit,
                       std::vector<std::string>* keys) const {
  auto it = after < prefix ? order_.lower_bound(Probe{ns, prefix})
                           : order_.upper_bound(Probe{ns, after});
  for (std::size_t n = 0; n < limit && it != order_.end(); ++it, ++n) {
    const std::uint32_t id = *it;
    if (slots_[id].ns != ns || !key(id).starts_with(prefix)) break;
    keys->emplace_back(key(id));
  }
}

}  // namespace delayd
