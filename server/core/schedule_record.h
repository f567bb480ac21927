// A recurring schedule as the core keeps it and the store holds it (one
// opaque record per namespace and key, kPutSchedule): what the client set,
// and where it stands.
//
// Each run of a schedule becomes a pending timer under a run key, which no
// client key can equal (client keys have no NUL byte): NUL, the schedule's
// key, NUL, its version and the run number. The timer then fires, is
// delivered, retried and dead-lettered like any other; what clients see of
// it (events, dead letters) carries the schedule's key and the run number.
// The run's timer and the schedule's new state are one store batch, so a
// crash keeps both or neither: a run is never fired twice nor lost.
//
// Thread safety: plain values.
#ifndef DELAYD_SERVER_CORE_SCHEDULE_RECORD_H_
#define DELAYD_SERVER_CORE_SCHEDULE_RECORD_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/common/status.h"
#include "server/common/types.h"
#include "server/schedule/planner.h"
#include "server/schedule/spec.h"

namespace delayd {

inline constexpr std::uint32_t kDefaultCatchUpLimit = 100;

struct ScheduleRecord {
  // When: a cron expression in `zone`, or every `every` from `anchor`.
  std::string cron;
  std::string zone;
  std::int64_t every = 0;  // nanoseconds; 0 for cron
  WallNanos anchor = 0;
  std::optional<WallNanos> start;
  std::optional<WallNanos> end;
  std::uint64_t max_runs = 0;
  std::int64_t jitter = 0;  // nanoseconds
  schedule::CatchUp catch_up = schedule::CatchUp::kLatest;
  std::uint32_t catch_up_limit = kDefaultCatchUpLimit;
  schedule::Overlap overlap = schedule::Overlap::kAllow;
  std::string payload;
  // Given anew by every set (as timers' versions are).
  std::uint64_t version = 0;
  WallNanos created_at = 0;
  schedule::State state;

  bool operator==(const ScheduleRecord&) const = default;
};

// The record's stored form, and back; false if `bytes` is not one (`*out`
// is then unspecified).
std::string EncodeSchedule(const ScheduleRecord& r);
bool DecodeSchedule(std::string_view bytes, ScheduleRecord* out);

// The spec and policies a record stands for (its fields were validated when
// it was set; a stored one that no longer parses, e.g. a zone gone from the
// tz database, is an error naming it).
Status SpecOf(const ScheduleRecord& r, schedule::Spec* spec,
              schedule::Policies* policies);
schedule::Policies PoliciesOf(const ScheduleRecord& r);
// The spec of an interval record (`every` > 0; the floor was checked when it
// was set).
Status IntervalOf(const ScheduleRecord& r, schedule::Spec* spec);

// The key of run `run` of version `version` of schedule `key`, and back:
// false for a key that is not a run key.
std::string RunKey(std::string_view key, std::uint64_t version,
                   std::uint64_t run);
bool SplitRunKey(std::string_view run_key, std::string_view* key,
                 std::uint64_t* run);

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_SCHEDULE_RECORD_H_
