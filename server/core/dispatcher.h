// Delivery of one namespace's events to its subscribers.
//
// Partitions publish fired events here. A dispatcher keeps every event that
// is not yet acknowledged: ready (waiting for a worker) or in flight (sent to
// a worker, with an ack deadline on a timing wheel) or retrying (failed,
// waiting on the same wheel for its retry time). Each ready event goes to
// one worker with room under its max_in_flight, round robin. A delivery
// fails when its worker nacks it or its ack deadline passes: the event
// retries after the given time or the backoff for its attempt (retry.h),
// then is ready again (front of the queue). An event whose worker goes away
// is ready again at once. Each delivery has attempt + 1; once the policy's
// max_attempts have been made, the next failure (or the worker's leaving)
// makes it a dead letter, kept apart (dispatcher_dead.cc). A worker's room
// counts what it has not yet been written too (events and bytes), so a worker
// that stops reading holds at most max_in_flight events, however often they
// time out and go to others. With a store, payloads are read back when events
// are sent; an event whose payload cannot be read is held and tried again,
// never sent without it.
//
// Reads: the payloads of the events a Pump gives out are read on the read
// pool (scheduler.h), off the strand, one read at a time per dispatcher (so
// events still go out in order); the events wait, counted against their
// worker's room, and are sent when the read is back (FinishRead). Meanwhile
// the strand goes on with acks, timeouts and publishing. When nothing else
// is ready, a read of at most kStrandRead payloads that the store holds in
// memory (recent ones, nearly always) runs on the strand instead, without
// I/O, and its events go out at once. Watchers' copies and dead-letter listings
// are read on the pool too (StartWatchRead, ReadDeadLetters).
//
// Watchers get a copy of each event published while they are there, 32
// events at a time; a watcher whose unwritten backlog passes the limit
// (events or bytes) is ended with RESOURCE_EXHAUSTED before the next 32, so
// that it never slows anyone and holds at most one such chunk beyond its
// limit.
//
// Thread safety: a dispatcher is confined to its strand. Public methods may
// be called from any thread: they post to the strand, where all its state
// lives (GUARDED_BY on_strand_, checked by clang's analysis; see strand.h),
// and run nothing of it on the caller's thread. Its completions (`done`)
// run on the strand, or on the read pool where a method says so; answers
// that wait for the store run on the store's completion executor.
#ifndef DELAYD_SERVER_CORE_DISPATCHER_H_
#define DELAYD_SERVER_CORE_DISPATCHER_H_

#include <asio.hpp>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "server/common/metrics.h"
#include "server/common/policy.h"
#include "server/common/retry.h"
#include "server/common/status.h"
#include "server/common/types.h"
#include "server/core/alarm_wheel.h"
#include "server/core/counters.h"
#include "server/core/inline_first.h"
#include "server/core/namespace_refs.h"
#include "server/core/strand.h"
#include "server/core/subscriber.h"
#include "server/core/token_bucket.h"
#include "server/store/store.h"

namespace delayd {

class Dispatcher {
 public:
  // `store` may be null (state in memory only). With a store, events carry
  // payload ids; payloads are read when an event is sent. The namespace's
  // count in `refs` is released for each acknowledged event (once durable)
  // and each subscriber that leaves (the scheduler adds those).
  // Its strand runs on `pool`; its timers wait on `timers` (loop_executor.h).
  // Payload reads run on `reads`.
  Dispatcher(LoopExecutor pool, asio::any_io_executor timers,
             asio::any_io_executor reads, const Clock& clock, std::string name,
             NamespaceId id, Counters& counters, Metrics& metrics,
             const Limits& limits, Store* store, NamespaceRefs* refs);
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Told, on the dispatcher's strand, when an event under a schedule's run
  // key (schedule_record.h) is acknowledged or becomes a dead letter: the
  // run is closed. Set once, before the dispatcher is used.
  void SetRunClosed(std::function<void(NamespaceId, std::string_view)> f) {
    run_closed_ = std::move(f);
  }
  // Told, once their acknowledgement is durable and while they still count
  // in the namespace, the keys and versions of events acknowledged while
  // the policy has a dedup window (its window then counts from now). Set
  // once, before the dispatcher is used.
  using Settled = std::function<void(
      NamespaceId, std::vector<std::pair<std::string, std::uint64_t>>)>;
  void SetSettled(Settled f) { settled_ = std::move(f); }
  // Whether an ack's write is made by the pool thread that takes it
  // (Store::CommitDeferred) rather than by the store's writer. Only while
  // another pool thread remains: a write the disk holds up holds that
  // thread too, and what is in memory must still go out meanwhile. Set
  // once, before the dispatcher is used.
  void SetWriteAcksHere(bool on) { write_acks_here_ = on; }
  // With a store whose partitions are shared (Store::SharedPartitions): the
  // partition of a key, so that each batch says which it touches. Set once,
  // before the dispatcher is used.
  void SetPartitionOf(
      std::function<std::uint32_t(NamespaceId, std::string_view)> f) {
    partition_of_ = std::move(f);
  }

  // The namespace's name; empty while its id is free. Changed only by the
  // scheduler under its namespace lock, while nothing uses the namespace
  // (so read without one by whoever holds a pin on it).
  const std::string& name() const { return name_; }
  void Rename(std::string name) { name_ = std::move(name); }

  // Applies a new policy: to events ready or in flight now (pause, rate,
  // in-flight cap) and to failures from now on (backoff); in-flight events
  // keep their ack deadlines.
  void SetPolicy(const Policy& policy);
  // Acts on a change of the clock other than time passing: ack deadlines,
  // retry times and the dispatch rate are checked against the clock now.
  // `done` runs after, on the dispatcher's strand.
  void Wake(std::function<void()> done);

  // Takes fired events for delivery.
  void Publish(std::vector<Event> events);

  // Registers a subscriber under `id` (unique daemon-wide). `done` runs on
  // the strand once it is registered, before anything is delivered to it.
  void Subscribe(std::uint64_t id, std::shared_ptr<Subscriber> subscriber,
                 SubscribeOptions options, std::function<void()> done);
  // Forgets a subscriber (its stream ended); its unacknowledged events are
  // ready again, or dead letters if that was their last attempt.
  void Unsubscribe(std::uint64_t id);

  // Retires acknowledged events; `done` runs once that is durable. Called
  // from a thread running no strand's turn (gRPC's, taking the call), the
  // turn runs on that thread if the strand is free, and under `--fsync 1s`
  // or `never` the ack is written there too (inline_first.h): the caller
  // must hold no lock.
  void Ack(std::vector<std::uint64_t> ids, std::function<void(AckResult)> done);
  // Fails the deliveries of the events of `ids` in flight: each retries
  // after `retry_after`, or when unset after the backoff for its attempt.
  // `error`: the worker's word on it, kept with a dead letter.
  void Nack(std::vector<std::uint64_t> ids,
            std::optional<std::chrono::nanoseconds> retry_after,
            std::string error, std::function<void(LeaseResult)> done);
  // Fails the deliveries of the events of `ids` in flight for good: each
  // becomes a dead letter at once, whatever attempts it has left (a push
  // target's answer that no retry would change).
  void Reject(std::vector<std::uint64_t> ids, std::string error,
              std::function<void(LeaseResult)> done);
  // Takes back the events of `ids` in flight whose worker never got them
  // (a cluster node relaying them to its worker: relay.h): each is ready
  // again at once, at the front of the queue, its attempt not counted.
  void Release(std::vector<std::uint64_t> ids,
               std::function<void(LeaseResult)> done);
  // Moves the ack deadline of each event of `ids` in flight to now +
  // `extension`.
  void ExtendLease(std::vector<std::uint64_t> ids,
                   std::chrono::nanoseconds extension,
                   std::function<void(LeaseResult)> done);

  // Recovery (before anything else reaches the dispatcher), or the taking
  // of a shared partition, hands back events waiting for their retry time
  // (ids the dispatcher does not hold): each is ready again at its retry
  // time (dispatcher_retry.cc).
  void RestoreRetrying(std::vector<RetryingEvent> events);

  // Dead letters (dispatcher_dead.cc). Recovery, or the taking of a shared
  // partition, hands back those the store kept (ids the dispatcher does not
  // hold).
  void RestoreDeadLetters(std::vector<DeadLetter> letters);
  // Up to `limit` dead letters with ids from `from`, in id order, and about
  // `max_bytes` of keys, payloads and errors at most (at least one); a
  // payload the store cannot read fails the page (INTERNAL, naming it).
  // With a store the payloads are read on the read pool, and `done` runs
  // there.
  void ListDeadLetters(std::uint64_t from, std::size_t limit,
                       std::size_t max_bytes,
                       std::function<void(DeadLetterPage)> done);
  // Makes dead letters ready again, attempts from zero (`ids` empty: all);
  // `done` once that is durable.
  void RequeueDeadLetters(std::vector<std::uint64_t> ids,
                          std::function<void(Status, LeaseResult)> done);
  // Deletes dead letters (`ids` empty: all); `done` once that is durable.
  void PurgeDeadLetters(std::vector<std::uint64_t> ids,
                        std::function<void(Status, LeaseResult)> done);

  // Forgets the events of partition `part` (see SetPartitionOf), whatever
  // their state: another node owns them now and delivers them again (an
  // ack of one from now on reads as unknown). `done` gets how many, on the
  // strand.
  void DropPartition(std::uint32_t part,
                     std::function<void(std::uint64_t)> done);

  // Ends every stream with `status` and stops the ack timer. `done` runs on
  // the strand afterwards.
  void Close(const Status& status, std::function<void()> done);

 private:
  struct Worker {
    std::uint64_t id;
    std::shared_ptr<Subscriber> sink;
    std::uint32_t max_in_flight;
    std::chrono::nanoseconds ack_timeout;
    // Events it may still be given (SubscribeOptions::max_events).
    std::uint64_t events_left;
    // Its events in flight (at most max_in_flight): what goes back to the
    // queue when it leaves, without a scan of every outstanding event.
    std::unordered_set<std::uint64_t> in_flight;
    // Events given to it whose payloads are being read.
    std::size_t reading = 0;
    bool keep_leases = false;
  };
  // One per event in memory, up to millions: its fields are ordered to
  // leave no padding, and the rare error text is kept in errors_ (why: see
  // there).
  struct Outstanding {
    Event event;
    std::uint64_t worker = 0;  // 0: ready or retrying, not in flight.
    // The ack deadline (in flight) or the retry time (retrying).
    wheel::TimingWheel::Handle ack_timer = wheel::TimingWheel::kNoHandle;
    SteadyTime delivered_at{};  // The last delivery.
    std::uint32_t ack_cookie = 0;
    bool retrying = false;
    bool dead = false;
    // The store holds its fate (see StoredFate): deleted with the event.
    bool fate_stored = false;
    // errors_ holds its last Nack's text (so an ack of an event without
    // one does not look there).
    bool has_error = false;
  };

  // A watcher's copy waiting for its payload: the event (its blob holds the
  // payload's id), the largest watcher id there was at its publish, and the
  // store as it was then (a payload deleted since, its event acknowledged,
  // reads as gone, not as damage).
  struct WatchCopy {
    Event event;
    std::uint64_t watchers_upto;
    std::shared_ptr<const Store::View> view;
  };
  // One chunk of them, of one publish, being read.
  struct WatchRead {
    std::uint64_t upto = 0;
    std::shared_ptr<const Store::View> view;
    std::vector<Event> events;
    std::vector<std::uint64_t> payload_ids;
    std::vector<std::string> payloads;
    std::vector<bool> readable;
    std::vector<bool> gone;
  };

  // The events one Pump gave out, by worker, and their payloads once read.
  struct Read {
    struct Part {
      std::uint64_t worker = 0;
      std::vector<std::uint64_t> events;
    };
    std::vector<Part> parts;
    std::vector<std::uint64_t> payload_ids;  // All parts', in order.
    std::vector<std::string> payloads;
    std::vector<bool> readable;
    Status status;
  };

  // Everything below runs on the strand (REQUIRES(on_strand_)) but for the
  // reads StartRead, StartWatchRead and ListDeadLetters post to the pool,
  // which touch nothing but the store and what they were given.
  void Pump() REQUIRES(on_strand_);
  // Counts a worker or watcher (`watcher`) that joined or left in the
  // gauges, unless it is relayed.
  void Count(const Subscriber& s, bool watcher, bool joined)
      REQUIRES(on_strand_);

  // How many events a turn of Pump may give the next worker under the
  // namespace's own limits (dispatch rate, in-flight cap), shared fairly
  // among `with_room` workers; 0 (and the rate timer armed) if none now.
  std::size_t NamespaceRoom(SteadyTime now, std::size_t taken,
                            std::size_t with_room) REQUIRES(on_strand_);
  // The events worker `w` has room for now, by its own limits.
  std::size_t WorkerRoom(const Worker& w) const REQUIRES(on_strand_);
  // Sends `batch` (from ready_) to `w`: in flight, attempt + 1, ack timer.
  // With a store, `full` holds the events with their payloads, in order.
  void Deliver(Worker& w, std::vector<const Event*>& batch,
               std::vector<Event>* full) REQUIRES(on_strand_);
  // Sends `read`'s events at once if the store holds their payloads in
  // memory (Store::ReadCached); else reads them on the read pool, then
  // FinishRead on the strand.
  void StartRead(std::shared_ptr<Read> read) REQUIRES(on_strand_);
  // The most payloads read on the strand at once.
  static constexpr std::size_t kStrandRead = 16;
  // Send, then Pump again.
  void FinishRead(Read& read) REQUIRES(on_strand_);
  // Sends what was read to the workers still there; events of a worker
  // that left (or if paused or closed since) are ready again, unattempted.
  void Send(Read& read) REQUIRES(on_strand_);
  // Pumps again once the next token of the dispatch rate is there.
  void ArmRateTimer(SteadyTime at) REQUIRES(on_strand_);
  std::chrono::nanoseconds BackoffFor(const Outstanding& o)
      REQUIRES(on_strand_);
  // Ends `o`'s time in flight: its ack timer cancelled, counted out (the
  // caller says where it goes).
  void LeaveFlight(Outstanding& o) REQUIRES(on_strand_);
  // Takes `o` (not a dead letter) out of its state, in flight, retrying or
  // ready, as an ack or a drop does (the caller forgets it); true if it was
  // in flight.
  bool LeaveState(std::uint64_t event_id, Outstanding& o) REQUIRES(on_strand_);
  // Tells each worker's subscriber the events of (worker id, event id)
  // pairs it acked or nacked (Subscriber::Acked).
  void TellAcked(std::vector<std::pair<std::uint64_t, std::uint64_t>>& acked)
      REQUIRES(on_strand_);
  void Requeue(std::uint64_t event_id, Outstanding& o) REQUIRES(on_strand_);
  // Undoes `o`'s delivery, which its worker never got: ready again, at the
  // front, its attempt not counted.
  void TakeBack(std::uint64_t event_id, Outstanding& o) REQUIRES(on_strand_);
  // Ends `o`'s delivery as failed: it retries after `wait` (at once if 0),
  // or becomes a dead letter after its last attempt. Its fate goes to
  // fates_ (written by WriteFates).
  void Fail(std::uint64_t event_id, Outstanding& o,
            std::chrono::nanoseconds wait) REQUIRES(on_strand_);
  // Makes `o` wait `wait` on the ack wheel, then be ready again.
  void Retry(std::uint64_t event_id, Outstanding& o,
             std::chrono::nanoseconds wait) REQUIRES(on_strand_);
  void Bury(std::uint64_t event_id, Outstanding& o) REQUIRES(on_strand_);
  // Calls f(id, o) for each of `ids` in flight (Nack, Reject, Release,
  // ExtendLease); the others are the result's unknown ids. (`f` begins
  // with on_strand_.Enter(): clang's analysis checks a lambda apart.)
  template <typename F>
  LeaseResult EachInFlight(const std::vector<std::uint64_t>& ids, F f)
      REQUIRES(on_strand_) {
    LeaseResult result;
    for (std::uint64_t id : ids) {
      auto it = outstanding_.find(id);
      if (it == outstanding_.end() || it->second.worker == 0) {
        result.unknown.push_back(id);
        continue;
      }
      f(id, it->second);
      ++result.done;
    }
    return result;
  }
  // Tells run_closed_ if `o` is a schedule's run.
  void CloseRun(const Outstanding& o) REQUIRES(on_strand_);
  // A RequeueDeadLetters or PurgeDeadLetters call (dispatcher_dead.cc).
  // "All" goes through the dead letters in id order, kDeadChunk at a time,
  // each chunk one strand handler and one store batch, the next posted once
  // the last is durable: with millions of them, the strand is held for one
  // chunk at a time, and no batch grows past a chunk.
  struct DeadLetterCall;
  static constexpr std::size_t kDeadChunk = 4096;
  void StartDeadLetters(bool purge, std::vector<std::uint64_t> ids,
                        std::function<void(Status, LeaseResult)> done);
  void NextDeadLetters(std::shared_ptr<DeadLetterCall> call)
      REQUIRES(on_strand_);
  // Requeues or purges the dead letters among `ids` (in memory), counting
  // into `result`; `then` gets the store's answer once that is durable.
  void RequeueOrPurge(bool purge, const std::vector<std::uint64_t>& ids,
                      LeaseResult& result, std::function<void(Status)> then)
      REQUIRES(on_strand_);
  void WriteFates() REQUIRES(on_strand_);
  // The page of `candidates` (dead letters without payloads, in id order),
  // their payloads read as `view` saw the store; on the read pool, touching
  // no state but the store (dispatcher_dead.cc). `next`: the id after them.
  DeadLetterPage ReadDeadLetters(std::vector<DeadLetter> candidates,
                                 std::optional<std::uint64_t> next,
                                 std::size_t max_bytes,
                                 const Store::View& view) const;
  // Sends copies of `events` to the watchers, kWatchChunk at a time. With a
  // store their payloads are read on the read pool first (StartWatchRead), in
  // publish order, one read at a time, so that a slow or stalled store never
  // holds the strand; the copies wait in watch_queue_, at most
  // watcher_backlog of them (more, and every watcher is behind: ended).
  void ToWatchers(std::span<const Event* const> events) REQUIRES(on_strand_);
  // Delivers `view` to the watchers with ids up to `upto` (those there when
  // it was published); ends those too far behind.
  void DeliverToWatchers(std::span<const Event* const> view, std::uint64_t upto)
      REQUIRES(on_strand_);
  void StartWatchRead() REQUIRES(on_strand_);
  void FinishWatchRead(WatchRead& read) REQUIRES(on_strand_);
  // Keeps `payload`, read for a worker, for the watchers' copy of event
  // `id` if they still wait for it; past watcher_backlog_bytes of such
  // payloads, every watcher is behind (ended).
  void StashForWatchers(std::uint64_t id, const std::string& payload)
      REQUIRES(on_strand_);
  // Forgets every copy watchers wait for.
  void ClearWatchQueue() REQUIRES(on_strand_);
  Status WatchersBehind() const;
  // By subscriber id.
  using Watchers =
      std::vector<std::pair<std::uint64_t, std::shared_ptr<Subscriber>>>;
  // Forgets a watcher (ended or gone): the one after it.
  Watchers::iterator DropWatcher(Watchers::iterator it) REQUIRES(on_strand_);
  // Ends every watcher with `status`, logged as the backlog limit's.
  void EndWatchers(const Status& status) REQUIRES(on_strand_);
  static constexpr std::size_t kWatchChunk = 32;
  Worker* FindWorker(std::uint64_t id) REQUIRES(on_strand_);
  // The ack wheel's alarm for wheel time `at` went off (on the strand).
  void OnAckAlarm(AlarmWheel::Time at) REQUIRES(on_strand_);
  // Acts on every ack deadline and retry time that has passed, and
  // re-arms.
  void TakeAckTimeouts() REQUIRES(on_strand_);
  void StartAckTimer(std::uint64_t event_id, Outstanding& o,
                     std::chrono::nanoseconds timeout) REQUIRES(on_strand_);
  void CancelAckTimer(Outstanding& o) REQUIRES(on_strand_);
  // Event `id`'s last Nack error text ("" if none), and setting it ("" to
  // clear); `o` is its record.
  const std::string& ErrorOf(std::uint64_t id, const Outstanding& o) const
      REQUIRES(on_strand_);
  void SetError(std::uint64_t id, Outstanding& o, std::string text)
      REQUIRES(on_strand_);
  // Drops event `it`'s record, and its error text.
  void Forget(std::unordered_map<std::uint64_t, Outstanding>::iterator it)
      REQUIRES(on_strand_);
  // Logs that `e`'s payload cannot be read (why: `s`); it is held.
  void LogUnreadable(const Event& e, const Status& s) const;
  // Ready events whose payloads could not be read wait in held_ and are
  // ready again after kRetryRead.
  void Hold(const std::vector<std::uint64_t>& ids) REQUIRES(on_strand_);
  static constexpr std::chrono::seconds kRetryRead{1};

  std::string name_;
  std::function<void(NamespaceId, std::string_view)> run_closed_;
  Settled settled_;
  std::function<std::uint32_t(NamespaceId, std::string_view)> partition_of_;
  bool write_acks_here_ = false;
  // Records in `batch` that it changes the partition of `e`.
  void Touch(Batch& batch, const Event& e) const {
    if (partition_of_) batch.Touch(partition_of_(id_, e.blob.key()));
  }
  const NamespaceId id_;
  NamespaceRefs* const refs_;
  Counters& counters_;
  NamespaceCounters& mine_;  // counters_.of(id_)
  Metrics& metrics_;
  const Limits& limits_;
  const Clock& clock_;
  Store* const store_;
  asio::strand<InlineFirst> strand_;
  StrandRole on_strand_{strand_};
  Policy policy_ GUARDED_BY(on_strand_);
  // The namespace's dispatch rate (policy_), and the timer that pumps again
  // when the next token is there.
  TokenBucket bucket_ GUARDED_BY(on_strand_);
  asio::steady_timer rate_timer_ GUARDED_BY(on_strand_);
  bool rate_armed_ GUARDED_BY(on_strand_) = false;
  std::minstd_rand random_ GUARDED_BY(on_strand_);  // Backoff jitter.
  // Dead letters' ids, in id order (for paging).
  std::set<std::uint64_t> dead_ GUARDED_BY(on_strand_);
  // Fates of failed deliveries not yet written (one batch per handler).
  Batch fates_ GUARDED_BY(on_strand_);
  // Ack deadlines and retry times.
  AlarmWheel ack_wheel_ GUARDED_BY(on_strand_);
  std::vector<AlarmWheel::Expired> due_ GUARDED_BY(on_strand_);  // Reused.
  bool closed_ GUARDED_BY(on_strand_) = false;
  bool reading_ GUARDED_BY(on_strand_) = false;  // A StartRead is under way.
  std::deque<std::uint64_t> held_ GUARDED_BY(on_strand_);
  asio::steady_timer retry_timer_ GUARDED_BY(on_strand_);
  bool retry_armed_ GUARDED_BY(on_strand_) = false;
  std::unordered_map<std::uint64_t, Outstanding> outstanding_
      GUARDED_BY(on_strand_);
  // The last Nack's error text of the events given one, beside outstanding_
  // rather than in each record. That keeps a record at 120 bytes, as before
  // retries: at 128, its map node took the next allocation size up, and
  // firing cost about 3 % more CPU per event (tests/bench/README.md).
  std::unordered_map<std::uint64_t, std::string> errors_ GUARDED_BY(on_strand_);
  // Ids; stale (acked) ids are skipped.
  std::deque<std::uint64_t> ready_ GUARDED_BY(on_strand_);
  std::vector<Worker> workers_ GUARDED_BY(on_strand_);
  std::size_t next_worker_ GUARDED_BY(on_strand_) = 0;  // Round robin.
  Watchers watchers_ GUARDED_BY(on_strand_);
  // Ack-timer cookies -> event ids (the wheel carries 32-bit cookies).
  std::vector<std::uint64_t> cookie_ids_ GUARDED_BY(on_strand_);
  std::vector<std::uint32_t> free_cookies_ GUARDED_BY(on_strand_);
  // Latencies gathered for one histogram at a time, then added to it (each
  // use leaves it empty).
  Observations observed_ GUARDED_BY(on_strand_);
  // Below the fields firing uses (their layout is as before these came).
  asio::any_io_executor reads_;
  std::deque<WatchCopy> watch_queue_ GUARDED_BY(on_strand_);
  // A StartWatchRead is under way.
  bool watch_reading_ GUARDED_BY(on_strand_) = false;
  // Events whose copies watchers still wait for (queued or being read), and
  // the payloads a worker's read got for them first: a worker may
  // acknowledge an event, deleting its payload from the store, before the
  // watchers' read of it, which then finds it here (StashForWatchers).
  std::unordered_set<std::uint64_t> watch_pending_ GUARDED_BY(on_strand_);
  std::unordered_map<std::uint64_t, std::string> watch_payloads_
      GUARDED_BY(on_strand_);
  std::size_t watch_payload_bytes_ GUARDED_BY(on_strand_) = 0;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_DISPATCHER_H_
