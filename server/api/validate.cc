#include "server/api/validate.h"

#include <google/protobuf/stubs/common.h>

#include <charconv>
#include <limits>
#include <string>

namespace delayd {
namespace {

constexpr std::int64_t kNanosPerSecond = 1'000'000'000;

// A Duration field within [min, max] (0 also when `zero_ok`), as
// nanoseconds; `range` is the message's wording of the bounds.
Status DurationIn(const google::protobuf::Duration& d, const char* field,
                  std::int64_t min, std::int64_t max, bool zero_ok,
                  const char* range, std::chrono::nanoseconds* out) {
  const Status bad =
      Status::InvalidArgument(std::string(field) + ": must be " + range);
  // (Range first: seconds * 1e9 must not overflow.)
  if (d.seconds() < 0 || d.nanos() < 0 || d.nanos() >= kNanosPerSecond ||
      d.seconds() > max / kNanosPerSecond) {
    return bad;
  }
  const std::int64_t total = d.seconds() * kNanosPerSecond + d.nanos();
  if (total == 0 && zero_ok) {
    *out = std::chrono::nanoseconds(0);
    return Status::Ok();
  }
  if (total < min || total > max) return bad;
  *out = std::chrono::nanoseconds(total);
  return Status::Ok();
}

constexpr std::int64_t kHour = 3600 * kNanosPerSecond;

// A Timestamp field as nanoseconds since 1970, within what WallNanos holds.
Status TimestampIn(const google::protobuf::Timestamp& t, const char* field,
                   WallNanos* out) {
  constexpr std::int64_t kMaxSeconds =
      std::numeric_limits<WallNanos>::max() / kNanosPerSecond - 1;
  if (t.seconds() < 0 || t.seconds() > kMaxSeconds || t.nanos() < 0 ||
      t.nanos() >= kNanosPerSecond) {
    return Status::InvalidArgument(std::string(field) +
                                   ": must be between 1970 and 2262");
  }
  *out = t.seconds() * kNanosPerSecond + t.nanos();
  return Status::Ok();
}

// The event ids of an Ack, Nack or ExtendLease.
template <typename Ids>
Status EventIds(const Ids& ids) {
  if (ids.empty()) return Status::InvalidArgument("event_ids: empty");
  if (ids.size() > Validator::kMaxAckIds) {
    return Status::InvalidArgument("event_ids: more than " +
                                   std::to_string(Validator::kMaxAckIds));
  }
  return Status::Ok();
}

}  // namespace

Status Validator::NamespaceName(std::string_view name) const {
  const std::string_view ns = name.empty() ? "default" : name;
  if (ns.size() > limits_.max_namespace_bytes) {
    return Status::InvalidArgument("namespace: longer than " +
                                   std::to_string(limits_.max_namespace_bytes) +
                                   " bytes");
  }
  for (char c : ns) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                    c == '-' || c == ':' || c == '/';
    if (!ok) {
      return Status::InvalidArgument(
          "namespace: only letters, digits and . _ - : / are allowed");
    }
  }
  return Status::Ok();
}

Status Validator::Key(std::string_view key) const {
  if (key.empty()) return Status::InvalidArgument("key: must not be empty");
  if (key.size() > limits_.max_key_bytes) {
    return Status::InvalidArgument(
        "key: longer than " + std::to_string(limits_.max_key_bytes) + " bytes");
  }
  if (key.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("key: must not contain NUL bytes");
  }
  // A key is a protobuf string: UTF-8, so that it reads back into every
  // language and prints as JSON. (protobuf's own check, as its parser's.)
  if (!google::protobuf::internal::IsStructurallyValidUTF8(
          key.data(), static_cast<int>(key.size()))) {
    return Status::InvalidArgument("key: must be UTF-8");
  }
  return Status::Ok();
}

Status Validator::FireTime(const WireTime& delay, const WireTime& at,
                           WallNanos now, WallNanos* fire_time) const {
  // now + max_ns fits: --max-delay is at most kMaxDelayLimit.
  const std::int64_t max_ns = limits_.max_delay.count();
  if (delay.present) {
    if (delay.seconds < 0 || delay.nanos < 0) {
      return Status::InvalidArgument("delay: must not be negative");
    }
    if (delay.nanos >= kNanosPerSecond) {
      return Status::InvalidArgument("delay: nanos out of range");
    }
    if (delay.seconds > max_ns / kNanosPerSecond ||
        delay.seconds * kNanosPerSecond + delay.nanos > max_ns) {
      return Status::InvalidArgument("delay: more than the max-delay limit");
    }
    *fire_time = now + delay.seconds * kNanosPerSecond + delay.nanos;
    return Status::Ok();
  }
  if (at.present) {
    if (at.nanos < 0 || at.nanos >= kNanosPerSecond) {
      return Status::InvalidArgument("fire_time: nanos out of range");
    }
    if (at.seconds < 0) {
      return Status::InvalidArgument("fire_time: before 1970");
    }
    if (at.seconds > (now + max_ns) / kNanosPerSecond + 1 ||
        at.seconds * kNanosPerSecond + at.nanos > now + max_ns) {
      return Status::InvalidArgument(
          "fire_time: further ahead than the max-delay limit");
    }
    // A time in the past fires at once.
    *fire_time = at.seconds * kNanosPerSecond + at.nanos;
    return Status::Ok();
  }
  return Status::InvalidArgument("delay or fire_time: one is required");
}

Status Validator::Operation(const OpFields& f, WallNanos now,
                            WallNanos* fire_time) const {
  using Kind = OpFields::Kind;
  if (f.kind == Kind::kNone) {
    return Status::InvalidArgument(
        "op: one of set, move or remove is required");
  }
  if (Status s = NamespaceName(f.ns); !s.ok()) return s;
  if (Status s = Key(f.key); !s.ok()) return s;
  if (f.kind == Kind::kSet && f.payload.size() > limits_.max_payload_bytes) {
    return Status::InvalidArgument("payload: larger than " +
                                   std::to_string(limits_.max_payload_bytes) +
                                   " bytes");
  }
  *fire_time = 0;
  if (f.kind == Kind::kRemove) return Status::Ok();
  if (Status s = FireTime(f.delay, f.fire_time, now, fire_time); !s.ok()) {
    return s;
  }
  if (!f.jitter.present) return Status::Ok();
  const WireTime& j = f.jitter;
  if (j.seconds < 0 || j.nanos < 0 || j.nanos >= kNanosPerSecond ||
      j.seconds > 24 * 3600) {
    return Status::InvalidArgument("jitter: must be between 0 and 24h");
  }
  const std::int64_t jitter = j.seconds * kNanosPerSecond + j.nanos;
  if (jitter > 24 * kHour) {
    return Status::InvalidArgument("jitter: must be between 0 and 24h");
  }
  // The latest it may fire must be within max-delay too.
  if (*fire_time > now + limits_.max_delay.count() - jitter) {
    return Status::InvalidArgument(
        "jitter: the fire time plus jitter is beyond the max-delay limit");
  }
  return Status::Ok();
}

std::int64_t JitterNanos(const OpFields& f) {
  if (!f.jitter.present) return 0;
  return f.jitter.seconds * 1'000'000'000 + f.jitter.nanos;
}

Status Validator::Subscribe(const v1::SubscribeRequest& req,
                            SubscribeOptions* options) const {
  if (Status s = NamespaceName(req.namespace_()); !s.ok()) return s;
  *options = SubscribeOptions();
  options->watcher = req.mode() == v1::SubscribeRequest::WATCHER;
  if (options->watcher) return Status::Ok();
  if (req.max_in_flight() > 10000) {
    return Status::InvalidArgument("max_in_flight: at most 10000");
  }
  if (req.max_in_flight() != 0) options->max_in_flight = req.max_in_flight();
  options->max_events = req.max_events();
  options->keep_leases = req.keep_leases();
  if (req.has_ack_timeout()) {
    std::chrono::nanoseconds t;
    if (Status s =
            DurationIn(req.ack_timeout(), "ack_timeout", 100'000'000, kHour,
                       /*zero_ok=*/true, "between 100ms and 1h", &t);
        !s.ok()) {
      return s;
    }
    if (t.count() != 0) options->ack_timeout = t;
  }
  return Status::Ok();
}

Status Validator::List(const v1::ListTimersRequest& req,
                       Scheduler::ListLimits* limits,
                       Scheduler::ListCursor* cursor) const {
  if (Status s = NamespaceName(req.namespace_()); !s.ok()) return s;
  if (req.page_size() > 1000) {
    return Status::InvalidArgument("page_size: at most 1000");
  }
  *limits = Scheduler::ListLimits();
  limits->timers = req.page_size() == 0 ? 100 : req.page_size();
  limits->payloads = !req.without_payloads();
  *cursor = Scheduler::ListCursor();
  if (req.page_token().empty()) return Status::Ok();
  // The token is "<partition>.<record>".
  const std::string& t = req.page_token();
  const auto dot = t.find('.');
  if (dot == std::string::npos) {
    return Status::InvalidArgument("page_token: malformed");
  }
  auto p = std::from_chars(t.data(), t.data() + dot, cursor->partition);
  auto r =
      std::from_chars(t.data() + dot + 1, t.data() + t.size(), cursor->record);
  if (p.ec != std::errc() || r.ec != std::errc() || p.ptr != t.data() + dot ||
      r.ptr != t.data() + t.size() || cursor->partition >= partitions_) {
    return Status::InvalidArgument("page_token: malformed");
  }
  return Status::Ok();
}

Status Validator::Ack(const v1::AckRequest& req) const {
  if (Status s = NamespaceName(req.namespace_()); !s.ok()) return s;
  return EventIds(req.event_ids());
}

Status Validator::Nack(
    const v1::NackRequest& req,
    std::optional<std::chrono::nanoseconds>* retry_after) const {
  if (Status s = NamespaceName(req.namespace_()); !s.ok()) return s;
  if (Status s = EventIds(req.event_ids()); !s.ok()) return s;
  if (req.error().size() > 1024) {
    return Status::InvalidArgument("error: longer than 1024 bytes");
  }
  retry_after->reset();
  if (!req.has_retry_after()) return Status::Ok();
  std::chrono::nanoseconds t;
  if (Status s = DurationIn(req.retry_after(), "retry_after", 0, 24 * kHour,
                            /*zero_ok=*/true, "between 0 and 24h", &t);
      !s.ok()) {
    return s;
  }
  *retry_after = t;
  return Status::Ok();
}

Status Validator::ExtendLease(const v1::ExtendLeaseRequest& req,
                              std::chrono::nanoseconds* extension) const {
  if (Status s = NamespaceName(req.namespace_()); !s.ok()) return s;
  if (Status s = EventIds(req.event_ids()); !s.ok()) return s;
  return DurationIn(req.extension(), "extension", 100'000'000, kHour,
                    /*zero_ok=*/false, "between 100ms and 1h", extension);
}

Status Validator::DeadLetterPage(const v1::ListDeadLettersRequest& req,
                                 std::size_t* limit,
                                 std::uint64_t* from) const {
  if (Status s = NamespaceName(req.namespace_()); !s.ok()) return s;
  if (req.page_size() > 1000) {
    return Status::InvalidArgument("page_size: at most 1000");
  }
  *limit = req.page_size() == 0 ? 100 : req.page_size();
  *from = 0;
  const std::string& t = req.page_token();
  if (t.empty()) return Status::Ok();
  auto r = std::from_chars(t.data(), t.data() + t.size(), *from);
  if (r.ec != std::errc() || r.ptr != t.data() + t.size()) {
    return Status::InvalidArgument("page_token: malformed");
  }
  return Status::Ok();
}

Status Validator::DeadLetterIds(const v1::DeadLettersRequest& req,
                                std::vector<std::uint64_t>* ids) const {
  if (Status s = NamespaceName(req.namespace_()); !s.ok()) return s;
  if (req.all() == (req.event_ids_size() > 0)) {
    return Status::InvalidArgument("give event_ids or all, not both");
  }
  if (req.event_ids_size() > kMaxAckIds) {
    return Status::InvalidArgument("event_ids: more than " +
                                   std::to_string(kMaxAckIds));
  }
  ids->assign(req.event_ids().begin(), req.event_ids().end());
  return Status::Ok();
}

Status Validator::PolicyFields(const v1::Policy& in, Policy* out) const {
  *out = Policy();
  if (in.max_attempts() > 10'000) {
    return Status::InvalidArgument("max_attempts: at most 10000");
  }
  out->max_attempts = in.max_attempts();
  std::chrono::nanoseconds d;
  if (in.has_initial_backoff()) {
    if (Status s = DurationIn(in.initial_backoff(), "initial_backoff", 0,
                              24 * kHour, true, "between 0 and 24h", &d);
        !s.ok()) {
      return s;
    }
    out->retry.initial_backoff = d;
  }
  if (in.has_max_backoff()) {
    if (Status s = DurationIn(in.max_backoff(), "max_backoff", 0, 24 * kHour,
                              true, "between 0 and 24h", &d);
        !s.ok()) {
      return s;
    }
    out->retry.max_backoff = d;
  }
  if (out->retry.max_backoff < out->retry.initial_backoff) {
    return Status::InvalidArgument(
        "max_backoff: must not be less than initial_backoff");
  }
  // (Written so that NaN fails each test.)
  if (in.backoff_multiplier() != 0) {
    if (!(in.backoff_multiplier() >= 1 && in.backoff_multiplier() <= 100)) {
      return Status::InvalidArgument(
          "backoff_multiplier: must be between 1 and 100");
    }
    out->retry.multiplier = in.backoff_multiplier();
  }
  if (!(in.backoff_jitter() >= 0 && in.backoff_jitter() <= 1)) {
    return Status::InvalidArgument("backoff_jitter: must be between 0 and 1");
  }
  out->retry.jitter = in.backoff_jitter();
  if (in.has_ack_timeout()) {
    if (Status s = DurationIn(in.ack_timeout(), "ack_timeout", 100'000'000,
                              kHour, true, "between 100ms and 1h", &d);
        !s.ok()) {
      return s;
    }
    if (d.count() != 0) out->ack_timeout = d;
  }
  if (!(in.max_dispatch_rate() >= 0 && in.max_dispatch_rate() <= 1e6)) {
    return Status::InvalidArgument(
        "max_dispatch_rate: must be between 0 and 1000000");
  }
  out->max_dispatch_rate = in.max_dispatch_rate();
  if (in.dispatch_burst() > 1'000'000) {
    return Status::InvalidArgument("dispatch_burst: at most 1000000");
  }
  out->dispatch_burst = in.dispatch_burst();
  if (in.max_in_flight() > 1'000'000) {
    return Status::InvalidArgument("max_in_flight: at most 1000000");
  }
  out->max_in_flight = in.max_in_flight();
  out->paused = in.paused();
  if (in.has_dedup_window()) {
    if (Status s = DurationIn(in.dedup_window(), "dedup_window", 0,
                              30 * 24 * kHour, true, "between 0 and 720h", &d);
        !s.ok()) {
      return s;
    }
    out->dedup_window = d;
  }
  return Status::Ok();
}

Status Validator::Schedule(const v1::ScheduleSpec& in, WallNanos now,
                           schedule::Spec* spec,
                           schedule::Policies* bounds) const {
  schedule::Policies p;
  WallNanos t = 0;
  if (in.has_start_time()) {
    if (Status s = TimestampIn(in.start_time(), "spec.start_time", &t);
        !s.ok()) {
      return s;
    }
    p.start = t;
  }
  if (in.has_end_time()) {
    if (Status s = TimestampIn(in.end_time(), "spec.end_time", &t); !s.ok()) {
      return s;
    }
    p.end = t;
    if (p.start && *p.end <= *p.start) {
      return Status::InvalidArgument("spec.end_time: must be after start_time");
    }
  }
  p.max_runs = in.max_runs();
  schedule::Spec out;
  switch (in.kind_case()) {
    case v1::ScheduleSpec::kCron: {
      if (in.cron().size() > kMaxCronBytes) {
        return Status::InvalidArgument("spec.cron: longer than " +
                                       std::to_string(kMaxCronBytes) +
                                       " bytes");
      }
      if (in.time_zone().size() > kMaxTimeZoneBytes) {
        return Status::InvalidArgument("spec.time_zone: longer than " +
                                       std::to_string(kMaxTimeZoneBytes) +
                                       " bytes");
      }
      if (Status s = schedule::Spec::Cron(in.cron(), in.time_zone(), &out);
          !s.ok()) {
        return Status::InvalidArgument("spec." + s.message());
      }
      break;
    }
    case v1::ScheduleSpec::kEvery: {
      if (!in.time_zone().empty()) {
        return Status::InvalidArgument(
            "spec.time_zone: only with cron (an interval ignores zones)");
      }
      std::chrono::nanoseconds every;
      const std::string range =
          "at least --min-schedule-interval (" +
          std::to_string(limits_.min_schedule_interval.count()) +
          " ns) and at most --max-delay";
      if (Status s = DurationIn(
              in.every(), "spec.every", limits_.min_schedule_interval.count(),
              limits_.max_delay.count(), false, range.c_str(), &every);
          !s.ok()) {
        return s;
      }
      if (Status s = schedule::Spec::Every(every, p.start.value_or(now),
                                           limits_.min_schedule_interval, &out);
          !s.ok()) {
        return Status::InvalidArgument("spec." + s.message());
      }
      break;
    }
    case v1::ScheduleSpec::KIND_NOT_SET:
      return Status::InvalidArgument("spec: one of cron or every is required");
  }
  *spec = std::move(out);
  *bounds = p;
  return Status::Ok();
}

Status Validator::PreviewSchedule(const v1::PreviewScheduleRequest& req,
                                  WallNanos now, Preview* out) const {
  if (req.count() > kMaxPreview) {
    return Status::InvalidArgument("count: at most " +
                                   std::to_string(kMaxPreview));
  }
  Preview p;
  p.after = now;
  if (req.has_after()) {
    if (Status s = TimestampIn(req.after(), "after", &p.after); !s.ok()) {
      return s;
    }
  }
  if (Status s = Schedule(req.spec(), p.after, &p.spec, &p.bounds); !s.ok()) {
    return s;
  }
  p.count = req.count() == 0 ? kDefaultPreview : req.count();
  if (p.bounds.max_runs != 0) p.count = std::min(p.count, p.bounds.max_runs);
  *out = std::move(p);
  return Status::Ok();
}

Status Validator::SetSchedule(const v1::SetScheduleRequest& req, WallNanos now,
                              ScheduleRecord* out) const {
  if (Status s = Key(req.key()); !s.ok()) return s;
  if (req.payload().size() > limits_.max_payload_bytes) {
    return Status::InvalidArgument("payload: longer than " +
                                   std::to_string(limits_.max_payload_bytes) +
                                   " bytes");
  }
  schedule::Spec spec;
  schedule::Policies bounds;
  if (Status s = Schedule(req.spec(), now, &spec, &bounds); !s.ok()) return s;
  ScheduleRecord r;
  const v1::ScheduleSpec& in = req.spec();
  if (in.kind_case() == v1::ScheduleSpec::kCron) {
    r.cron = in.cron();
    r.zone = in.time_zone().empty() ? "UTC" : in.time_zone();
  } else {
    r.every = in.every().seconds() * kNanosPerSecond + in.every().nanos();
    r.anchor = bounds.start.value_or(now);
  }
  r.start = bounds.start;
  r.end = bounds.end;
  r.max_runs = bounds.max_runs;
  switch (req.catch_up()) {
    case v1::CATCH_UP_LATEST:
      r.catch_up = schedule::CatchUp::kLatest;
      break;
    case v1::CATCH_UP_NONE:
      r.catch_up = schedule::CatchUp::kNone;
      break;
    case v1::CATCH_UP_ALL:
      r.catch_up = schedule::CatchUp::kAll;
      break;
    default:
      return Status::InvalidArgument("catch_up: unknown value " +
                                     std::to_string(req.catch_up()));
  }
  switch (req.overlap()) {
    case v1::OVERLAP_ALLOW:
      r.overlap = schedule::Overlap::kAllow;
      break;
    case v1::OVERLAP_SKIP:
      r.overlap = schedule::Overlap::kSkip;
      break;
    case v1::OVERLAP_BUFFER_ONE:
      r.overlap = schedule::Overlap::kBufferOne;
      break;
    default:
      return Status::InvalidArgument("overlap: unknown value " +
                                     std::to_string(req.overlap()));
  }
  if (req.catch_up_limit() > 10'000) {
    return Status::InvalidArgument("catch_up_limit: at most 10000");
  }
  r.catch_up_limit = req.catch_up_limit() == 0 ? 100 : req.catch_up_limit();
  std::chrono::nanoseconds jitter{0};
  if (Status s = DurationIn(req.jitter(), "jitter", 0, kHour, true,
                            "between 0 and 1h", &jitter);
      !s.ok()) {
    return s;
  }
  r.jitter = jitter.count();
  r.payload = req.payload();
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace delayd
