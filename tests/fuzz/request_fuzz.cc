// libFuzzer target: every request type through validation. The first byte
// picks the message; the rest is parsed as it. Validation must never crash
// or overflow, and what it accepts must keep its promises (a fire time
// within max-delay, options within their ranges).
#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <cstdlib>

#include "server/api/validate.h"
#include "server/api/validate_push.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

constexpr delayd::WallNanos kNow = 1'790'000'000'000'000'000;  // In 2026.

void CheckOperation(const delayd::Validator& v, const delayd::Limits& limits,
                    const delayd::OpFields& f) {
  delayd::WallNanos fire_time = -1;
  if (!v.Operation(f, kNow, &fire_time).ok()) return;
  Check(!f.key.empty() && f.key.size() <= limits.max_key_bytes);
  if (f.kind != delayd::OpFields::Kind::kRemove) {
    // The latest a jitter may move it to is within max-delay too.
    const std::int64_t jitter = delayd::JitterNanos(f);
    Check(jitter >= 0 && jitter <= 24 * 3600 * 1'000'000'000LL);
    Check(fire_time >= 0 &&
          fire_time + jitter <= kNow + limits.max_delay.count());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  // Protobuf's UTF-8 complaints are expected.
  static google::protobuf::LogSilencer quiet;
  if (size == 0) return 0;
  static const delayd::Limits limits;
  static const delayd::Validator v(limits, 4);
  const std::uint8_t kind = data[0] % 14;
  const void* body = data + 1;
  const int n = static_cast<int>(size - 1);
  using namespace delayd;
  switch (kind) {
    case 0: {
      v1::SetTimerRequest r;
      if (r.ParseFromArray(body, n)) CheckOperation(v, limits, FieldsOf(r));
      break;
    }
    case 1: {
      v1::MoveTimerRequest r;
      if (r.ParseFromArray(body, n)) CheckOperation(v, limits, FieldsOf(r));
      break;
    }
    case 2: {
      v1::RemoveTimerRequest r;
      if (r.ParseFromArray(body, n)) CheckOperation(v, limits, FieldsOf(r));
      break;
    }
    case 3: {
      v1::BatchRequest r;
      if (!r.ParseFromArray(body, n)) break;
      for (const auto& op : r.operations()) {
        CheckOperation(v, limits, FieldsOf(op));
      }
      break;
    }
    case 4: {
      v1::SubscribeRequest r;
      SubscribeOptions o;
      if (r.ParseFromArray(body, n) && v.Subscribe(r, &o).ok()) {
        Check(o.max_in_flight >= 1 && o.max_in_flight <= 10000);
        // (0: the namespace policy's.)
        Check(o.ack_timeout.count() == 0 ||
              (o.ack_timeout >= std::chrono::milliseconds(100) &&
               o.ack_timeout <= std::chrono::hours(1)));
      }
      break;
    }
    case 5: {
      v1::ListTimersRequest r;
      Scheduler::ListLimits l;
      Scheduler::ListCursor c;
      if (r.ParseFromArray(body, n) && v.List(r, &l, &c).ok()) {
        Check(l.timers >= 1 && l.timers <= 1000);
        Check(c.partition < 4);
      }
      break;
    }
    case 7: {
      v1::NackRequest r;
      std::optional<std::chrono::nanoseconds> retry_after;
      if (r.ParseFromArray(body, n) && v.Nack(r, &retry_after).ok()) {
        Check(r.event_ids_size() >= 1 &&
              r.event_ids_size() <= Validator::kMaxAckIds);
        Check(!retry_after || (retry_after->count() >= 0 &&
                               *retry_after <= std::chrono::hours(24)));
      }
      break;
    }
    case 8: {
      v1::ExtendLeaseRequest r;
      std::chrono::nanoseconds extension;
      if (r.ParseFromArray(body, n) && v.ExtendLease(r, &extension).ok()) {
        Check(r.event_ids_size() >= 1 &&
              r.event_ids_size() <= Validator::kMaxAckIds);
        Check(extension >= std::chrono::milliseconds(100) &&
              extension <= std::chrono::hours(1));
      }
      break;
    }
    case 9: {
      v1::Policy r;
      Policy p;
      if (r.ParseFromArray(body, n) && v.PolicyFields(r, &p).ok()) {
        Check(p.retry.initial_backoff.count() >= 0 &&
              p.retry.max_backoff >= p.retry.initial_backoff &&
              p.retry.max_backoff <= std::chrono::hours(24));
        Check(p.retry.multiplier >= 1 && p.retry.multiplier <= 100);
        Check(p.retry.jitter >= 0 && p.retry.jitter <= 1);
        Check(p.ack_timeout >= std::chrono::milliseconds(100) &&
              p.ack_timeout <= std::chrono::hours(1));
        Check(p.max_dispatch_rate >= 0 && p.max_dispatch_rate <= 1e6);
        // Its stored form reads back as itself.
        Check(DecodePolicy(EncodePolicy(p)) == p);
      }
      // The push target: what is accepted keeps its bounds, reads back
      // through the store's form, and a read written back is itself.
      static const delayd::push::PushOptions kPush = [] {
        delayd::push::PushOptions o;
        o.allow_http = true;
        return o;
      }();
      if (r.ParseFromArray(body, n) &&
          delayd::PushTargetFields(r.push(), &kPush, PushTarget(), &p.push)
              .ok()) {
        Check(p.push.empty() || p.push.url.size() <= 2048);
        Check(p.push.headers.size() <= 16 && p.push.secrets.size() <= 4);
        Check(p.push.timeout >= std::chrono::milliseconds(100) &&
              p.push.timeout <= std::chrono::minutes(5));
        Check(p.push.max_in_flight >= 1 && p.push.max_in_flight <= 1000);
        Check(DecodePolicy(EncodePolicy(p)) == p);
        v1::PushTarget read;
        delayd::PushTargetToProto(p.push, &read);
        PushTarget again;
        Check(delayd::PushTargetFields(read, &kPush, p.push, &again).ok());
        Check(again == p.push);
      }
      break;
    }
    case 10: {
      v1::ListDeadLettersRequest r;
      std::size_t limit = 0;
      std::uint64_t from = 0;
      if (r.ParseFromArray(body, n) &&
          v.DeadLetterPage(r, &limit, &from).ok()) {
        Check(limit >= 1 && limit <= 1000);
      }
      break;
    }
    case 11: {
      v1::DeadLettersRequest r;
      std::vector<std::uint64_t> ids;
      if (r.ParseFromArray(body, n) && v.DeadLetterIds(r, &ids).ok()) {
        // Ids or all, never both, never neither.
        Check(r.all() == ids.empty());
        Check(ids.size() <= static_cast<std::size_t>(Validator::kMaxAckIds));
      }
      break;
    }
    case 12: {
      v1::PreviewScheduleRequest r;
      Validator::Preview p;
      if (!r.ParseFromArray(body, n) || !v.PreviewSchedule(r, kNow, &p).ok()) {
        break;
      }
      Check(p.count >= 1 && p.count <= Validator::kMaxPreview);
      // Its instants come in order, after `after`, within the bounds.
      const std::vector<WallNanos> instants =
          schedule::Preview(p.spec, p.bounds, p.after, p.count);
      Check(instants.size() <= p.count);
      WallNanos last = p.after;
      for (const WallNanos at : instants) {
        Check(at > last);
        Check(!p.bounds.start || at >= *p.bounds.start);
        Check(!p.bounds.end || at <= *p.bounds.end);
        last = at;
      }
      break;
    }
    case 13: {
      v1::SetScheduleRequest r;
      ScheduleRecord rec;
      if (!r.ParseFromArray(body, n) || !v.SetSchedule(r, kNow, &rec).ok()) {
        break;
      }
      Check(rec.payload.size() <= limits.max_payload_bytes);
      Check(rec.jitter >= 0 && rec.jitter <= 3600 * 1'000'000'000LL);
      Check(rec.catch_up_limit >= 1 && rec.catch_up_limit <= 10'000);
      Check(rec.cron.empty() != (rec.every == 0));
      // What is stored reads back as itself, and still parses.
      ScheduleRecord back;
      Check(DecodeSchedule(EncodeSchedule(rec), &back));
      Check(EncodeSchedule(back) == EncodeSchedule(rec));
      schedule::Spec spec;
      schedule::Policies p;
      Check(SpecOf(back, &spec, &p).ok());
      break;
    }
    default: {
      v1::AckRequest r;
      if (r.ParseFromArray(body, n) && v.Ack(r).ok()) {
        Check(r.event_ids_size() >= 1 &&
              r.event_ids_size() <= Validator::kMaxAckIds);
      }
      break;
    }
  }
  return 0;
}
