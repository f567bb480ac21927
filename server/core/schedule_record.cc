#include "server/core/schedule_record.h"

#include <charconv>

#include "server/common/record_codec.h"

namespace delayd {
namespace {

// The record's layouts. Format 2 is written; format 1 is still read.
//
// Format 1, fixed-width: format (1), flags (1), cron and zone (each a 4-byte
// size and the bytes), every, anchor, start, end, max runs, jitter (8 each),
// catch-up (1), catch-up limit (4), overlap (1), version, created at, last
// instant, runs, buffered instant (8 each), payload (4-byte size, bytes).
//
// Format 2 keeps only what is set, in varints where values are small: format
// (1), flags (varint, below), cron and zone (each a varint size and the
// bytes), then for an interval every (varint) and anchor (8), start and end
// (8 each, if flagged), max runs, jitter and a non-default catch-up limit
// (varints, if flagged), version (varint), created at (8), last instant (8)
// and runs (varint) if either is set, the buffered instant (8, if flagged),
// and the payload to the end. About 60 B where format 1 took 150 for the
// same schedule, which start-up reads once per schedule.
constexpr std::uint8_t kFormat1 = 1;
constexpr std::uint8_t kFormat2 = 2;

// Flags of both formats.
constexpr std::uint32_t kHasStart = 1;
constexpr std::uint32_t kHasEnd = 2;
constexpr std::uint32_t kPaused = 4;
constexpr std::uint32_t kFinished = 8;
constexpr std::uint32_t kHasBuffered = 16;
constexpr std::uint32_t kFormat1Flags = 31;
// Format 2's: optional fields present, and the policies' values.
constexpr std::uint32_t kHasMaxRuns = 1 << 5;
constexpr std::uint32_t kHasJitter = 1 << 6;
constexpr std::uint32_t kHasCatchUpLimit = 1 << 7;
constexpr std::uint32_t kHasProgress = 1 << 8;  // last instant and runs
constexpr int kCatchUpShift = 9;                // 2 bits
constexpr int kOverlapShift = 11;               // 2 bits
constexpr std::uint32_t kFormat2Flags = (1 << 13) - 1;

// Varints as protobuf lays them out (7 bits a byte, low first). Written here
// rather than through protobuf's CodedInputStream: a record is a dozen
// fields, and a stream object per record would cost more than the fields.
void AppendVarint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void AppendShortString(std::string& out, std::string_view s) {
  AppendVarint(out, s.size());
  out.append(s);
}

// Reads within [p, end); false once past it.
class Reader {
 public:
  Reader(std::string_view bytes)
      : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}
  template <typename T>
  bool Raw(T* out) {
    if (end_ - p_ < static_cast<std::ptrdiff_t>(sizeof(T))) return false;
    *out = record::ReadRaw<T>(p_);
    return true;
  }
  template <typename T>
  bool Varint(T* out) {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64 && p_ < end_; shift += 7) {
      const auto byte = static_cast<std::uint8_t>(*p_++);
      v |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if (byte < 0x80) {
        *out = static_cast<T>(v);
        return static_cast<std::uint64_t>(*out) == v;
      }
    }
    return false;
  }
  bool String(std::string* out) {
    std::uint32_t n = 0;
    return Raw(&n) && Bytes(n, out);
  }
  bool ShortString(std::string* out) {
    std::uint32_t n = 0;
    return Varint(&n) && Bytes(n, out);
  }
  // The rest of the record.
  void Rest(std::string* out) {
    out->assign(p_, end_ - p_);
    p_ = end_;
  }
  bool done() const { return p_ == end_; }

 private:
  bool Bytes(std::uint32_t n, std::string* out) {
    if (end_ - p_ < static_cast<std::ptrdiff_t>(n)) return false;
    out->assign(p_, n);
    p_ += n;
    return true;
  }

  const char* p_;
  const char* end_;
};

// The flags both formats share.
std::uint32_t CommonFlags(const ScheduleRecord& r) {
  std::uint32_t flags = 0;
  if (r.start) flags |= kHasStart;
  if (r.end) flags |= kHasEnd;
  if (r.state.paused) flags |= kPaused;
  if (r.state.finished) flags |= kFinished;
  if (r.state.buffered) flags |= kHasBuffered;
  return flags;
}

// Sets the optional fields from the flags both formats share.
void ApplyFlags(std::uint32_t flags, WallNanos start, WallNanos end,
                WallNanos buffered, ScheduleRecord& r) {
  if (flags & kHasStart) r.start = start;
  if (flags & kHasEnd) r.end = end;
  if (flags & kHasBuffered) r.state.buffered = buffered;
  r.state.paused = (flags & kPaused) != 0;
  r.state.finished = (flags & kFinished) != 0;
}

// What a decoded record must be, whichever its format.
bool Valid(const ScheduleRecord& r, std::uint32_t catch_up,
           std::uint32_t overlap) {
  return catch_up <= static_cast<std::uint32_t>(schedule::CatchUp::kAll) &&
         overlap <= static_cast<std::uint32_t>(schedule::Overlap::kBufferOne) &&
         r.every >= 0 && r.jitter >= 0 && r.cron.empty() != (r.every == 0);
}

bool DecodeFormat1(Reader& in, ScheduleRecord& r) {
  std::uint8_t flags = 0, catch_up = 0, overlap = 0;
  WallNanos start = 0, end = 0, buffered = 0;
  if (!in.Raw(&flags) || !in.String(&r.cron) || !in.String(&r.zone) ||
      !in.Raw(&r.every) || !in.Raw(&r.anchor) || !in.Raw(&start) ||
      !in.Raw(&end) || !in.Raw(&r.max_runs) || !in.Raw(&r.jitter) ||
      !in.Raw(&catch_up) || !in.Raw(&r.catch_up_limit) || !in.Raw(&overlap) ||
      !in.Raw(&r.version) || !in.Raw(&r.created_at) ||
      !in.Raw(&r.state.last_instant) || !in.Raw(&r.state.runs) ||
      !in.Raw(&buffered) || !in.String(&r.payload) || !in.done() ||
      flags > kFormat1Flags || !Valid(r, catch_up, overlap)) {
    return false;
  }
  r.catch_up = static_cast<schedule::CatchUp>(catch_up);
  r.overlap = static_cast<schedule::Overlap>(overlap);
  ApplyFlags(flags, start, end, buffered, r);
  return true;
}

bool DecodeFormat2(Reader& in, ScheduleRecord& r) {
  std::uint32_t flags = 0;
  if (!in.Varint(&flags) || flags > kFormat2Flags || !in.ShortString(&r.cron) ||
      !in.ShortString(&r.zone)) {
    return false;
  }
  r.every = r.anchor = 0;
  if (r.cron.empty() && (!in.Varint(&r.every) || !in.Raw(&r.anchor))) {
    return false;
  }
  WallNanos start = 0, end = 0, buffered = 0;
  r.max_runs = 0;
  r.jitter = 0;
  r.catch_up_limit = kDefaultCatchUpLimit;
  r.state.last_instant = 0;
  r.state.runs = 0;
  auto when = [&](std::uint32_t flag, auto read) {
    return (flags & flag) == 0 || read();
  };
  if (!when(kHasStart, [&] { return in.Raw(&start); }) ||
      !when(kHasEnd, [&] { return in.Raw(&end); }) ||
      !when(kHasMaxRuns, [&] { return in.Varint(&r.max_runs); }) ||
      !when(kHasJitter, [&] { return in.Varint(&r.jitter); }) ||
      !when(kHasCatchUpLimit, [&] { return in.Varint(&r.catch_up_limit); }) ||
      !in.Varint(&r.version) || !in.Raw(&r.created_at) ||
      !when(kHasProgress,
            [&] {
              return in.Raw(&r.state.last_instant) && in.Varint(&r.state.runs);
            }) ||
      !when(kHasBuffered, [&] { return in.Raw(&buffered); })) {
    return false;
  }
  in.Rest(&r.payload);
  const std::uint32_t catch_up = (flags >> kCatchUpShift) & 3;
  const std::uint32_t overlap = (flags >> kOverlapShift) & 3;
  if (!Valid(r, catch_up, overlap)) return false;
  r.catch_up = static_cast<schedule::CatchUp>(catch_up);
  r.overlap = static_cast<schedule::Overlap>(overlap);
  ApplyFlags(flags, start, end, buffered, r);
  return true;
}

}  // namespace

std::string EncodeSchedule(const ScheduleRecord& r) {
  std::uint32_t flags = CommonFlags(r);
  if (r.max_runs != 0) flags |= kHasMaxRuns;
  if (r.jitter != 0) flags |= kHasJitter;
  if (r.catch_up_limit != kDefaultCatchUpLimit) flags |= kHasCatchUpLimit;
  const bool progress = r.state.last_instant != 0 || r.state.runs != 0;
  if (progress) flags |= kHasProgress;
  flags |= static_cast<std::uint32_t>(r.catch_up) << kCatchUpShift;
  flags |= static_cast<std::uint32_t>(r.overlap) << kOverlapShift;
  std::string out;
  out.reserve(48 + r.cron.size() + r.zone.size() + r.payload.size());
  record::AppendRaw(out, kFormat2);
  AppendVarint(out, flags);
  AppendShortString(out, r.cron);
  AppendShortString(out, r.zone);
  if (r.cron.empty()) {
    AppendVarint(out, static_cast<std::uint64_t>(r.every));
    record::AppendRaw(out, r.anchor);
  }
  if (r.start) record::AppendRaw(out, *r.start);
  if (r.end) record::AppendRaw(out, *r.end);
  if (flags & kHasMaxRuns) AppendVarint(out, r.max_runs);
  if (flags & kHasJitter)
    AppendVarint(out, static_cast<std::uint64_t>(r.jitter));
  if (flags & kHasCatchUpLimit) AppendVarint(out, r.catch_up_limit);
  AppendVarint(out, r.version);
  record::AppendRaw(out, r.created_at);
  if (progress) {
    record::AppendRaw(out, r.state.last_instant);
    AppendVarint(out, r.state.runs);
  }
  if (r.state.buffered) record::AppendRaw(out, *r.state.buffered);
  out.append(r.payload);
  return out;
}

bool DecodeSchedule(std::string_view bytes, ScheduleRecord* out) {
  Reader in(bytes);
  ScheduleRecord& r = *out;  // (its strings' buffers are used again)
  r.start = r.end = r.state.buffered = std::nullopt;
  std::uint8_t format = 0;
  if (!in.Raw(&format)) return false;
  if (format == kFormat2) return DecodeFormat2(in, r);
  return format == kFormat1 && DecodeFormat1(in, r);
}

schedule::Policies PoliciesOf(const ScheduleRecord& r) {
  schedule::Policies p;
  p.start = r.start;
  p.end = r.end;
  p.max_runs = r.max_runs;
  p.jitter = std::chrono::nanoseconds(r.jitter);
  p.seed = r.version;
  p.catch_up = r.catch_up;
  p.catch_up_limit = r.catch_up_limit;
  p.overlap = r.overlap;
  return p;
}

Status IntervalOf(const ScheduleRecord& r, schedule::Spec* spec) {
  return schedule::Spec::Every(std::chrono::nanoseconds(r.every), r.anchor,
                               std::chrono::nanoseconds(1), spec);
}

Status SpecOf(const ScheduleRecord& r, schedule::Spec* spec,
              schedule::Policies* policies) {
  const Status s = r.cron.empty() ? IntervalOf(r, spec)
                                  : schedule::Spec::Cron(r.cron, r.zone, spec);
  if (!s.ok()) return s;
  *policies = PoliciesOf(r);
  return Status::Ok();
}

std::string RunKey(std::string_view key, std::uint64_t version,
                   std::uint64_t run) {
  std::string out(1, '\0');
  out.append(key);
  out.push_back('\0');
  out.append(std::to_string(version));
  out.push_back('.');
  out.append(std::to_string(run));
  return out;
}

bool SplitRunKey(std::string_view run_key, std::string_view* key,
                 std::uint64_t* run) {
  if (run_key.empty() || run_key[0] != '\0') return false;
  const auto nul = run_key.find('\0', 1);
  const auto dot = run_key.rfind('.');
  if (nul == std::string_view::npos || dot == std::string_view::npos ||
      dot < nul) {
    return false;
  }
  std::uint64_t n = 0;
  const char* first = run_key.data() + dot + 1;
  const char* last = run_key.data() + run_key.size();
  const auto [ptr, ec] = std::from_chars(first, last, n);
  if (ec != std::errc() || ptr != last) return false;
  *key = run_key.substr(1, nul - 1);
  *run = n;
  return true;
}

}  // namespace delayd
