// The store under the scheduler: what the core needs kept so that a restart
// (and, with a replicated database, the loss of a machine) loses nothing
// acknowledged. Every pending timer and its payload, every fired event not
// yet acknowledged, the fates of failed deliveries, namespace names and
// policies, and the limits below which versions and event ids are handed
// out. Two backends implement it: RocksDB, embedded (rocksdb/), and
// PostgreSQL (postgres/); memory/ holds a fake for the core's unit tests.
// The core sees only this interface.
//
// Writes: Commit() queues a batch (batch.h) in the caller's order and
// returns at once; the store writes queued batches in that order, many in
// one group, and runs each batch's completion once it is durable (under the
// backend's durability setting). Completions run on the executor given by
// SetExecutor (the scheduler's completion strand), or, while
// SetInlineCompletions is on and the backend chooses to, on the store's own
// thread that finished their group; never on the caller's thread inside
// Commit: a caller may commit while holding its own lock. A batch that
// cannot be queued (the store failed, or is closing) is not written, and its
// completion runs with the error like any other, through the executor
// (before SetExecutor, during recovery, on the caller's thread).
//
// Reads: payloads are read by id, after the fact, through a View taken when
// the caller found the ids (under its own lock): a payload deleted since
// the view reads as gone, not as damage, and one still queued is read from
// the queue.
//
// Thread safety: every method may be called from any thread.
#ifndef DELAYD_SERVER_STORE_STORE_H_
#define DELAYD_SERVER_STORE_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "server/common/metrics.h"
#include "server/common/status.h"
#include "server/common/types.h"
#include "server/store/batch.h"

namespace delayd {

// What the scheduler gives every store it opens.
struct StoreHooks {
  // Told of every failed read or write after opening (for the daemon's log).
  std::function<void(const Status&)> on_error;
  // Told once when a write fails in a way the store cannot go on from (it
  // then refuses every later write); the daemon stops for its supervisor.
  std::function<void(const Status& why)> on_write_failure;
  // Where the store's own figures go (none: not measured).
  Metrics* metrics = nullptr;
};

class Store;
// Opens a store for the scheduler, with its hooks (the daemon picks the
// backend and its options; the core calls this and sees only Store).
using StoreOpener =
    std::function<Status(StoreHooks hooks, std::unique_ptr<Store>* out)>;

class Store {
 public:
  using Done = std::function<void(Status)>;

  virtual ~Store() = default;

  // Where the store is, for messages: "store in DIR", "PostgreSQL HOST/DB".
  virtual const std::string& where() const = 0;
  // 0: the core partitions keys as it likes. Otherwise the store's
  // partitions are shared with other daemons (pg_lease.h): the core uses
  // exactly this many, each key in StablePartition(ns, key, n)
  // (server/common/stable_hash.h), and tells the store which partitions
  // each batch changes (Batch::Touch).
  virtual std::uint32_t SharedPartitions() const { return 0; }
  // What LoadPartition visits. Namespaces are named (ids are each node's
  // own): the records' `ns` fields are not set.
  struct PartitionVisitor {
    std::function<void(std::string_view ns, const StoredTimer&)> timer;
    // `fate`: null if the event has none.
    std::function<void(std::string_view ns, const StoredEvent&,
                       const StoredFate* fate)>
        event;
    std::function<void(std::string_view ns, std::string_view key,
                       std::string_view encoded)>
        schedule;
    // Keys' fates in the dedup window, as kPutDedup stored them.
    std::function<void(std::string_view ns, std::string_view key,
                       std::string_view encoded)>
        dedup;
  };
  // With shared partitions: the partitions this node holds now, by
  // partition, with the epochs of their leases (pg_lease.h). The store
  // writes no batch that touches another, and fences what it writes by
  // these epochs.
  using Held = std::map<std::uint32_t, std::int64_t>;
  virtual void SetHeld(const Held& held) { (void)held; }
  // With shared partitions: visits partition `part`'s records (schedules
  // first, then timers, then events), and gives
  // the limits below which its versions and event sequence numbers were
  // handed out (for a node that has just taken the partition; the scans
  // of recovery visit none of a shared store's records). Blocks.
  virtual Status LoadPartition(std::uint32_t part, std::uint64_t* version_limit,
                               std::uint64_t* event_seq_limit,
                               const PartitionVisitor& visit) {
    (void)part, (void)version_limit, (void)event_seq_limit, (void)visit;
    return Status::FailedPrecondition(where() +
                                      " does not share its partitions");
  }

  // --- Recovery, before any write. ---
  // Namespace names by id (ids are dense from 0; an empty name is a freed
  // id).
  virtual Status LoadNamespaces(std::vector<std::string>* names) = 0;
  // The highest version and event-sequence limits of any partition (the
  // next numbers to use after a restart).
  virtual Status LoadCounters(std::uint64_t* next_version,
                              std::uint64_t* next_event_seq) = 0;
  // The first version sequence number (a version's bits above its
  // partition's 10) whose firing takes the version itself as its event id:
  // a timer fired again after a crash (its firing not yet written) then
  // comes with the id it had, and its event may be published as soon as
  // its firing is queued (Partition::FireRecords). Timers with earlier
  // versions take ids from the partitions' event counters, which stay below
  // this number (ids of the two kinds never meet). kNoFixedEventIds (the
  // default; RocksDB without --fixed-event-ids; PostgreSQL, whose fence may
  // refuse a firing after it is sent): every event takes a counter's id,
  // which grows in firing order, and is published only once written.
  // A store that fixes ids writes its batches in the order they are queued
  // and, once one fails, none after it (as every store here does).
  static constexpr std::uint64_t kNoFixedEventIds = ~std::uint64_t{0};
  virtual std::uint64_t FixedEventIdsFrom() const { return kNoFixedEventIds; }
  // Visits every pending timer / unacknowledged event / event fate.
  virtual Status ForEachTimer(
      const std::function<void(const StoredTimer&)>& visit) = 0;
  virtual Status ForEachEvent(
      const std::function<void(const StoredEvent&)>& visit) = 0;
  virtual Status ForEachFate(
      const std::function<void(std::uint64_t, const StoredFate&)>& visit) = 0;
  // Namespace policies by name, as kPutPolicy stored them.
  virtual Status LoadPolicies(
      std::vector<std::pair<std::string, std::string>>* policies) = 0;
  // Visits every recurring schedule as kPutSchedule stored it: its
  // namespace, key and encoding.
  virtual Status ForEachSchedule(
      const std::function<void(NamespaceId, std::string_view key,
                               std::string_view encoded)>& visit) = 0;
  // Visits every key's fate kept for the dedup window, as kPutDedup
  // stored it.
  virtual Status ForEachDedup(
      const std::function<void(NamespaceId, std::string_view key,
                               std::string_view encoded)>& visit) = 0;
  // What opening had to say to the operator beyond errors (a salvage's
  // copy and losses), one line each.
  virtual std::vector<std::string> OpenNotes() const { return {}; }

  // --- Writes. ---
  // Queues `batch` (taking its contents) for the writer; `done` (may be
  // null) runs once it is durable, or with the store's error. An empty
  // batch is queued too: its completion comes after every earlier batch's.
  // A batch without `done` may be made durable later than it would with one
  // (RocksDB under --fsync always: with the next write that has one, or
  // after the fsync interval), but never after a later batch.
  virtual void Commit(Batch& batch, Done done) = 0;
  // As Commit(), for a firing; `written` (may be null) runs on the store's
  // writer once the batch is written (RocksDB: in its log; PostgreSQL: its
  // transaction sent), before it is durable (it must not block): what it
  // makes visible is undone by nothing but a loss of the machine or
  // database, or a write the store fails on (Failed(): the daemon stops),
  // each of which undoes everything written after it too. Not run if the
  // batch is not written.
  virtual void Write(Batch& batch, std::function<void()> written,
                     Done durable) = 0;
  // As Write(), for a caller that calls WriteHere() next, once it holds no
  // lock: the store may leave the batch to be written by that call, on the
  // caller's thread, instead of waking its writer (a thread hand-over less
  // for a firing; RocksDB does). `written` then runs on whichever thread
  // writes it.
  virtual void WriteDeferred(Batch& batch, std::function<void()> written,
                             Done durable) {
    Write(batch, std::move(written), std::move(durable));
  }
  // As Commit(), for a caller that then calls WriteHere(), once it holds no
  // lock, if this returns true: the store may then write the batch, and run
  // `done`, on the caller's thread (RocksDB does while its queue is short,
  // but under --fsync always). False: the store's writer has it, and
  // WriteHere would find nothing left for the caller.
  virtual bool CommitDeferred(Batch& batch, Done done) {
    Commit(batch, std::move(done));
    return false;
  }
  // Writes what WriteDeferred or CommitDeferred left queued, here; or
  // leaves it to the writer, which the store then wakes if need be (another
  // thread is writing, or the queue is long). Takes the store's lock: call it
  // holding none that a completion or `written` takes.
  virtual void WriteHere() {}
  // As Commit(), durable whatever the durability setting (id reservations,
  // policies).
  virtual void CommitSynced(Batch& batch, Done done) = 0;
  // Writes and syncs `batch` before returning (recovery, before anything is
  // served; on a cluster node, a partition it takes, loaded on one of the
  // executor's threads: so the answer never waits for the executor).
  virtual Status WriteNow(Batch& batch) = 0;
  // The error later writes get, if the store failed (else OK).
  virtual Status Failed() const = 0;
  // From now on, completions are handed to `executor`; until then (during
  // recovery) the store's own thread runs them.
  virtual void SetExecutor(
      std::function<void(std::function<void()>)> executor) = 0;
  // While `on`, the completions of written batches may run on the store's
  // own thread that finished their group, rather than through the
  // executor: a thread hand-over less per group (a backend chooses when,
  // e.g. only while that thread has nothing else waiting). Either way one
  // group's run at a time, in the order the store finished them. A
  // completion must then not wait for the store (Sync, WriteNow). A backend
  // that does not support it keeps using the executor.
  virtual void SetInlineCompletions(bool /*on*/) {}
  // Whether so much waits to be written that callers should refuse new
  // changes (UNAVAILABLE) instead of queueing them; `why` says so.
  virtual bool Backlogged(std::string* why) const = 0;
  // How long the oldest operation on the disk or database still running
  // has run; zero if none. A store that hangs instead of failing shows
  // here: the daemon reports NOT_SERVING past its --store-stall-limit.
  virtual std::chrono::nanoseconds Busy() const = 0;
  // Whether the store can take writes now (a database may be unreachable
  // or read-only for a while and come back); `why` says why not.
  virtual bool Writable(std::string* why) const {
    (void)why;
    return true;
  }
  // Runs `done` (through the executor) once every batch queued before is
  // durable and its completion was handed to the executor.
  virtual void Flush(std::function<void()> done) = 0;
  // Waits until everything queued is durable and its completions ran.
  virtual void Sync() = 0;
  // Writes what is queued, then closes. Commits after Close() fail.
  virtual void Close() = 0;

  // --- Reads. ---
  class View {
   public:
    virtual ~View() = default;
  };
  // What the store holds at this instant, queued batches included. Taken
  // without I/O (so under a caller's lock), read through after.
  virtual std::shared_ptr<const View> NewView() = 0;
  // Payloads by id, in order. One that cannot be read (damage; a missing
  // one counts as damage) is marked false in `readable` and the others are
  // still read; the first error is returned. Without a view, only what is
  // written is read.
  virtual Status GetPayloads(std::span<const std::uint64_t> ids,
                             std::vector<std::string>* payloads,
                             std::vector<bool>* readable) = 0;
  // As above, as `view` saw them; one deleted since the view is marked true
  // in `gone`, not as damage.
  virtual Status GetPayloads(std::span<const std::uint64_t> ids,
                             const View& view,
                             std::vector<std::string>* payloads,
                             std::vector<bool>* readable,
                             std::vector<bool>* gone) = 0;
  // As the first GetPayloads, but only from memory, never waiting: true if
  // every payload was there, false (and nothing read) if any was not.
  virtual bool ReadCached(std::span<const std::uint64_t> ids,
                          std::vector<std::string>* payloads,
                          std::vector<bool>* readable) {
    (void)ids;
    (void)payloads;
    (void)readable;
    return false;
  }

  // --- Operations. ---
  // Writes a consistent copy of the store into `dir`, which must not exist;
  // every change acknowledged before is in it. Blocks: run it off the
  // threads that serve. FAILED_PRECONDITION where the backend has its own
  // way (the message names it).
  virtual Status Backup(const std::string& dir) = 0;
  // The store's own gauges, for the metrics endpoint.
  struct Gauge {
    std::string name;  // A full metric name, such as delayd_store_...
    std::string help;
    double value;
  };
  virtual std::vector<Gauge> Gauges() { return {}; }
};

}  // namespace delayd

#endif  // DELAYD_SERVER_STORE_STORE_H_
