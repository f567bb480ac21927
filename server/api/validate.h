// Validation of requests: functions of the request, the limits, the time and
// the partition count only. No side effects, no lookups: a request that
// fails here changes nothing, and a fuzzer can drive every one
// (tests/fuzz/).
#ifndef DELAYD_SERVER_API_VALIDATE_H_
#define DELAYD_SERVER_API_VALIDATE_H_

#include <chrono>
#include <optional>
#include <string_view>

#include "delayd/v1/delayd.pb.h"
#include "server/api/batch_wire.h"
#include "server/common/policy.h"
#include "server/common/status.h"
#include "server/common/types.h"
#include "server/core/dispatcher.h"
#include "server/core/schedule_record.h"
#include "server/core/scheduler.h"
#include "server/schedule/planner.h"
#include "server/schedule/spec.h"

namespace delayd {

// The jitter of an operation Validator::Operation accepted, in nanoseconds
// (0 if none).
std::int64_t JitterNanos(const OpFields& f);

class Validator {
 public:
  Validator(const Limits& limits, std::uint32_t partitions)
      : limits_(limits), partitions_(partitions) {}

  // A namespace name (empty: "default").
  Status NamespaceName(std::string_view name) const;
  Status Key(std::string_view key) const;
  // The fire time from a delay or an absolute time, checked against
  // max-delay.
  Status FireTime(const WireTime& delay, const WireTime& at, WallNanos now,
                  WallNanos* fire_time) const;
  // A set, move or remove, every field (but whether its namespace exists);
  // the fire time of a set or move.
  Status Operation(const OpFields& f, WallNanos now,
                   WallNanos* fire_time) const;
  Status Subscribe(const v1::SubscribeRequest& req,
                   SubscribeOptions* options) const;
  Status List(const v1::ListTimersRequest& req, Scheduler::ListLimits* limits,
              Scheduler::ListCursor* cursor) const;
  Status Ack(const v1::AckRequest& req) const;
  // `retry_after`: unset when the request has none (the backoff applies).
  Status Nack(const v1::NackRequest& req,
              std::optional<std::chrono::nanoseconds>* retry_after) const;
  Status ExtendLease(const v1::ExtendLeaseRequest& req,
                     std::chrono::nanoseconds* extension) const;
  // A ListDeadLetters page: its size and the id it starts from.
  Status DeadLetterPage(const v1::ListDeadLettersRequest& req,
                        std::size_t* limit, std::uint64_t* from) const;
  // Requeue or Purge: ids, or all (then `ids` is left empty).
  Status DeadLetterIds(const v1::DeadLettersRequest& req,
                       std::vector<std::uint64_t>* ids) const;
  // A policy, unset fields taking their defaults.
  Status PolicyFields(const v1::Policy& in, Policy* out) const;

  // A schedule spec into its instants (`*spec`) and bounds (`*bounds`);
  // `now` anchors an `every` given no start_time.
  Status Schedule(const v1::ScheduleSpec& in, WallNanos now,
                  schedule::Spec* spec, schedule::Policies* bounds) const;
  // A PreviewSchedule: instants after `*after` (the request's, or `now`),
  // `*count` of them at most (max_runs counted).
  struct Preview {
    WallNanos after = 0;
    std::uint64_t count = 0;
    schedule::Spec spec;
    schedule::Policies bounds;
  };
  Status PreviewSchedule(const v1::PreviewScheduleRequest& req, WallNanos now,
                         Preview* out) const;
  // A SetSchedule's key, payload, spec and policies into `*out` (its
  // client fields); `now` anchors an `every` given no start_time.
  Status SetSchedule(const v1::SetScheduleRequest& req, WallNanos now,
                     ScheduleRecord* out) const;

  // Ack, Nack and ExtendLease take at most this many ids per call.
  static constexpr int kMaxAckIds = 10'000;
  // A cron expression and a time zone name take at most these many bytes.
  static constexpr std::size_t kMaxCronBytes = 256;
  static constexpr std::size_t kMaxTimeZoneBytes = 64;
  // PreviewSchedule gives this many instants unless asked, at most kMax.
  static constexpr std::uint32_t kDefaultPreview = 10;
  static constexpr std::uint32_t kMaxPreview = 1000;

 private:
  const Limits& limits_;
  const std::uint32_t partitions_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_VALIDATE_H_
