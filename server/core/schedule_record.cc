#include "server/core/schedule_record.h"

#include <charconv>

#include "server/common/record_codec.h"

namespace delayd {
namespace {

// The record's layout version: a reader refuses any other.
constexpr std::uint8_t kFormat = 1;

// Flags of the optional fields.
constexpr std::uint8_t kHasStart = 1;
constexpr std::uint8_t kHasEnd = 2;
constexpr std::uint8_t kPaused = 4;
constexpr std::uint8_t kFinished = 8;
constexpr std::uint8_t kHasBuffered = 16;

void AppendString(std::string& out, std::string_view s) {
  record::AppendRaw(out, static_cast<std::uint32_t>(s.size()));
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
  bool String(std::string* out) {
    std::uint32_t n = 0;
    if (!Raw(&n) || end_ - p_ < static_cast<std::ptrdiff_t>(n)) return false;
    out->assign(p_, n);
    p_ += n;
    return true;
  }
  bool done() const { return p_ == end_; }

 private:
  const char* p_;
  const char* end_;
};

}  // namespace

std::string EncodeSchedule(const ScheduleRecord& r) {
  std::string out;
  record::AppendRaw(out, kFormat);
  std::uint8_t flags = 0;
  if (r.start) flags |= kHasStart;
  if (r.end) flags |= kHasEnd;
  if (r.state.paused) flags |= kPaused;
  if (r.state.finished) flags |= kFinished;
  if (r.state.buffered) flags |= kHasBuffered;
  record::AppendRaw(out, flags);
  AppendString(out, r.cron);
  AppendString(out, r.zone);
  record::AppendRaw(out, r.every);
  record::AppendRaw(out, r.anchor);
  record::AppendRaw(out, r.start.value_or(0));
  record::AppendRaw(out, r.end.value_or(0));
  record::AppendRaw(out, r.max_runs);
  record::AppendRaw(out, r.jitter);
  record::AppendRaw(out, static_cast<std::uint8_t>(r.catch_up));
  record::AppendRaw(out, r.catch_up_limit);
  record::AppendRaw(out, static_cast<std::uint8_t>(r.overlap));
  record::AppendRaw(out, r.version);
  record::AppendRaw(out, r.created_at);
  record::AppendRaw(out, r.state.last_instant);
  record::AppendRaw(out, r.state.runs);
  record::AppendRaw(out, r.state.buffered.value_or(0));
  AppendString(out, r.payload);
  return out;
}

bool DecodeSchedule(std::string_view bytes, ScheduleRecord* out) {
  Reader in(bytes);
  ScheduleRecord& r = *out;  // (its strings' buffers are used again)
  r.start = r.end = r.state.buffered = std::nullopt;
  std::uint8_t format = 0, flags = 0, catch_up = 0, overlap = 0;
  WallNanos start = 0, end = 0, buffered = 0;
  if (!in.Raw(&format) || format != kFormat || !in.Raw(&flags) ||
      !in.String(&r.cron) || !in.String(&r.zone) || !in.Raw(&r.every) ||
      !in.Raw(&r.anchor) || !in.Raw(&start) || !in.Raw(&end) ||
      !in.Raw(&r.max_runs) || !in.Raw(&r.jitter) || !in.Raw(&catch_up) ||
      !in.Raw(&r.catch_up_limit) || !in.Raw(&overlap) || !in.Raw(&r.version) ||
      !in.Raw(&r.created_at) || !in.Raw(&r.state.last_instant) ||
      !in.Raw(&r.state.runs) || !in.Raw(&buffered) || !in.String(&r.payload) ||
      !in.done() || catch_up > static_cast<int>(schedule::CatchUp::kAll) ||
      overlap > static_cast<int>(schedule::Overlap::kBufferOne) ||
      flags >= 32 || r.every < 0 || r.jitter < 0 ||
      (r.cron.empty() == (r.every == 0))) {
    return false;
  }
  r.catch_up = static_cast<schedule::CatchUp>(catch_up);
  r.overlap = static_cast<schedule::Overlap>(overlap);
  if (flags & kHasStart) r.start = start;
  if (flags & kHasEnd) r.end = end;
  if (flags & kHasBuffered) r.state.buffered = buffered;
  r.state.paused = (flags & kPaused) != 0;
  r.state.finished = (flags & kFinished) != 0;
  return true;
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

Status SpecOf(const ScheduleRecord& r, schedule::Spec* spec,
              schedule::Policies* policies) {
  const Status s =
      r.cron.empty()
          ? schedule::Spec::Every(std::chrono::nanoseconds(r.every), r.anchor,
                                  std::chrono::nanoseconds(1), spec)
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
