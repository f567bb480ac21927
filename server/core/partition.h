// One partition of the scheduler: the timers whose (namespace, key) hash to
// it, a key index, and a timing wheel armed on the partition's strand.
//
// Every state change of a timer goes through Apply() (set, move, remove) or
// FireRecords() (expiry, drain) here. With a store, each adds its changes to
// a store batch that the caller queues for the store's writer (store.h); a
// fired event is published once its batch is written (see FireRecords), and
// payloads live in the store, not in memory.
//
// A timer's fire time is a wall-clock instant (what clients see); the wheel
// runs on steady time, so each operation maps the fire time to a steady
// deadline at the moment it is applied, and Rederive() maps them all anew
// when the clock's offset moves (clock.h). Before firing, the wall clock is
// checked too: a timer is never delivered before its fire time, even if the
// wall clock stepped back and nothing re-derived yet.
//
// Thread safety: as scheduler.h states. Post() runs work on the partition's
// strand, holding it; Run() runs work at once on the calling thread when the
// partition is free, else as Post() does; Read() runs work holding it and
// then its continuation, without it, on the read pool. Every other method runs
// from such work, except the recovery methods (before any) and
// ReadPayloads() (from a continuation).
#ifndef DELAYD_SERVER_CORE_PARTITION_H_
#define DELAYD_SERVER_CORE_PARTITION_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "server/common/types.h"
#include "server/core/clock.h"
#include "server/core/dispatcher.h"
#include "server/core/key_index.h"
#include "server/core/namespace_refs.h"
#include "server/core/strand_wheel.h"
#include "server/store/store.h"

namespace delayd {

class Partition {
 public:
  // Hands fired events of namespace `ns` to its dispatcher.
  using Publish = std::function<void(NamespaceId ns, std::vector<Event>)>;

  // `index` < 1024 becomes the low bits of every version and event id: the
  // high 54 bits count per partition, so both are unique daemon-wide, and a
  // key's versions (always in the same partition) increase. `store` may be
  // null (state in memory only). A new timer counts in `refs` for its
  // namespace (and stays counted as an event once fired); a removed one
  // is released by the caller once durable (OpResult::removed).
  // Payload reads run on `reads` (see Read).
  Partition(asio::io_context& io, asio::any_io_executor reads,
            std::uint32_t index, const Clock& clock,
            std::chrono::nanoseconds tick, SteadyTime epoch,
            const Limits& limits, Counters& counters, Store* store,
            NamespaceRefs* refs, Publish publish);

  // Runs `f()` on the partition's strand, holding the partition.
  template <typename F>
  void Post(F f) {
    asio::post(strand_, [this, f = std::move(f)]() mutable {
      std::lock_guard lock(exclusive_);
      f();
    });
  }
  // Runs `f()` on the calling thread if nothing holds the partition, else as
  // Post() does. Never waits. Work may then overtake work posted earlier that
  // has not run yet: only calls in flight together are reordered, and those
  // have no order.
  template <typename F>
  void Run(F f) {
    if (exclusive_.try_lock()) {
      std::lock_guard lock(exclusive_, std::adopt_lock);
      f();
      return;
    }
    Post(std::move(f));
  }

  // Runs `f()` on the partition's strand, holding the partition; then the
  // continuation it returns on the read pool, without the partition (reads
  // from the store go there).
  template <typename F>
  void Read(F f) {
    Post([this, f = std::move(f)]() mutable { asio::post(reads_, f()); });
  }

  // Whether StopTimers() has run: shutdown has passed this partition, so work
  // that arrives now must not change it.
  bool stopped() const { return wheel_.stopped(); }

  // Applies one operation at the given instant, adding its changes to
  // `batch` (null without a store).
  OpResult Apply(Op& op, WallNanos wall_now, SteadyTime steady_now,
                 Store::Batch* batch);
  // Starts loading what an operation on (ns, key) looks up first: the key's
  // index slot. Changes nothing.
  void Prefetch(NamespaceId ns, std::string_view key) const {
    keys_.Prefetch(Hash(ns, key));
  }
  // Fires every pending timer of `ns` now (reason DRAINED), in fire-time
  // order. `done` gets how many, once that is durable, or the store's error
  // (the firing is then retried: see FireRecords).
  void Drain(NamespaceId ns, std::function<void(Status, std::uint64_t)> done);

  // Stops firing (shutdown): timers stay pending.
  void StopTimers() { wheel_.Stop(); }

  // After the clock's offset moved (clock.h): derives every pending timer's
  // deadline anew from its fire time. Call Wake() after.
  void Rederive();
  // Fires what is due now and re-arms (after a change of the clock).
  void Wake() { wheel_.Fire(); }

  // Recovery, before the strand runs: each stored timer, then the counters
  // (past every version and event id stored in any partition), then
  // FireOverdue(), which fires those whose time passed while the daemon was
  // down and returns their events in fire-time order (unpublished);
  // `durable` runs once that firing is on disk.
  // RestoreCounters() reserves the first ids (a synced write).
  Status RestoreCounters(std::uint64_t next_version,
                         std::uint64_t next_event_seq);
  void Restore(const StoredTimer& timer, WallNanos wall_now,
               SteadyTime steady_now);
  std::vector<Event> FireOverdue(std::function<void(Status)> durable);

  // Timers found holding the partition, their payloads read after, without
  // it (ReadPayloads).
  struct Found {
    std::vector<TimerInfo> timers;
    // With a store and payloads wanted: each timer's payload id.
    std::vector<std::uint64_t> payload_ids;
    std::vector<std::uint32_t> records;  // Each timer's record (a cursor).
    std::optional<Store::View> view;     // What the store held then.
    std::optional<std::uint32_t> next;   // Where ReadPayloads stopped.
  };
  // The pending timer `key`, if any, added to `out`.
  void Get(NamespaceId ns, std::string_view key, Found& out) const;
  // Adds timers of `ns` whose key starts with `prefix` to `out`, scanning
  // records from `cursor`, while `out` holds fewer than `max_timers`;
  // payloads are left empty unless `payloads`. Returns the cursor to
  // continue from, or nullopt when the partition is exhausted.
  std::optional<std::uint32_t> List(NamespaceId ns, std::string_view prefix,
                                    std::uint32_t cursor,
                                    std::size_t max_timers, bool payloads,
                                    Found& out) const;
  // Fills in the payloads of `found` from the store, as its view saw them,
  // dropping timers gone since. Stops at the first timer that would take
  // the page (`bytes_before` plus ListCost of each) past `max_bytes`, unless
  // the page would be empty: `next` is then its record. False (with `error`
  // set) if a payload cannot be read: a timer is never shown without it.
  bool ReadPayloads(Found& found, Status* error,
                    std::size_t max_bytes = SIZE_MAX,
                    std::size_t bytes_before = 0) const;

 private:
  // 64 bytes, with a short key and payload inline in `blob` and the
  // namespace id in its tag.
  struct Record {
    WallNanos fire_time;
    std::uint64_t version;
    wheel::TimingWheel::Handle handle;
    Blob blob;  // Empty when the record is free.
    NamespaceId ns() const { return blob.tag(); }
  };
  static_assert(sizeof(Record) == 64);

  static std::uint32_t Hash(NamespaceId ns, std::string_view key);
  std::uint32_t Find(NamespaceId ns, std::string_view key,
                     std::uint32_t hash) const;
  // The pending timer `key`, if its version is `expected_version` (0: any);
  // else kNone, with NOT_FOUND or ABORTED in `error`.
  std::uint32_t FindExpected(NamespaceId ns, const std::string& key,
                             std::uint64_t expected_version,
                             Status* error) const;
  wheel::TimingWheel::Time Deadline(WallNanos fire_time, WallNanos wall_now,
                                    SteadyTime steady_now) const;
  OpResult Set(SetOp& op, WallNanos wall_now, SteadyTime steady_now,
               Store::Batch* batch);
  OpResult Move(MoveOp& op, WallNanos wall_now, SteadyTime steady_now,
                Store::Batch* batch);
  OpResult Remove(RemoveOp& op, Store::Batch* batch);
  // Stores a new payload for `rec` (version already assigned) and keeps
  // only the key and the payload's id in memory.
  void StorePayload(Record& rec, NamespaceId ns, const Blob& blob,
                    Store::Batch& batch);
  // Adds record `r` to `out` (its payload too if in memory).
  void AddFound(std::uint32_t r, bool payload, Found& out) const;
  std::uint32_t NewRecord();
  // Removes record `r` from the index and frees it.
  void Forget(std::uint32_t r);
  void OnExpired(std::vector<StrandWheel::Expired>& due);
  // Turns records into events, removing them and recording that in `batch`
  // (if any).
  std::vector<Event> TakeEvents(const std::vector<std::uint32_t>& records,
                                Reason reason, Store::Batch* batch);
  // Turns records into events (removing them) and publishes them once
  // their firing is written; `done` (if any) gets the outcome once durable.
  // If ids cannot be had yet (ReserveIds), nothing changes and the records
  // are tried again after kRetryIds (never before their fire time).
  void FireRecords(const std::vector<std::uint32_t>& records, Reason reason,
                   std::function<void(Status)> done = nullptr);
  static constexpr std::chrono::milliseconds kRetryIds{10};

  // Whether `versions` versions and `events` event ids can be handed out
  // under limits that are durable, so that none repeats after any crash.
  // A new block is reserved (a synced store write, through the writer) once
  // half the current one is used, so it is durable before it is needed;
  // until then a request beyond the current block gets UNAVAILABLE (or
  // RESOURCE_EXHAUSTED once 2^54 ran out). Never waits.
  Status ReserveIds(std::uint64_t versions, std::uint64_t events);
  void ReserveAhead(std::uint64_t versions, std::uint64_t events);
  std::uint64_t NewVersion() { return (next_version_++ << 10) | partition_; }
  static constexpr std::uint64_t kIdBlock = 1 << 20;

  const std::uint32_t partition_;
  const Clock& clock_;
  const Limits& limits_;
  Counters& counters_;
  Store* const store_;
  NamespaceRefs* const refs_;
  Publish publish_;
  asio::io_context& io_;
  Strand strand_;
  Exclusive exclusive_;
  // A deque: growing never copies records or leaves a freed array behind.
  std::deque<Record> records_;
  std::vector<std::uint32_t> free_records_;
  KeyIndex keys_;
  StrandWheel wheel_;
  // Sequence numbers (the high bits of versions and event ids): the next to
  // use, and the limits durable in the store (ReserveIds).
  std::uint64_t next_version_ = 1;
  std::uint64_t next_event_seq_ = 1;
  std::uint64_t version_limit_ = 0;
  std::uint64_t event_seq_limit_ = 0;
  bool reserving_ = false;              // A block is being written.
  std::vector<std::uint32_t> overdue_;  // During recovery.
  // Below the fields firing uses (their layout is as before it came).
  asio::any_io_executor reads_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_PARTITION_H_
