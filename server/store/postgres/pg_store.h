// The PostgreSQL store: delayd's state in a database the operator runs with
// replication and fail-over, so that losing delayd's machine or disk loses
// nothing acknowledged (see the README on the settings that make it so).
//
// Rows (pg_schema.h): a timer is a row of delayd_jobs keyed by its payload
// id, with its namespace's name, key, fire time, version and payload; when
// it fires the same row becomes its event; failures write its fate there.
// Every row carries its logical partition (a stable hash of namespace and
// key, over the schema's partitions).
//
// Writes (pg_writer.cc): Commit() queues a batch (batch.h); one writer
// thread, on a connection of its own in libpq's pipeline mode, writes each
// group of queued batches as one transaction: the changes as a few
// statements over arrays (pg_group.h: a run of the same change in one
// statement), a record of the group's id in delayd_commits, COMMIT. A group
// with firings in it (or a large one) is sent without waiting for the
// answers of those before it (up to kMaxInFlight groups; MayFormGroup),
// with no sync point between them: if one fails, the server skips all sent
// after it, so groups commit in the order sent, or not at all from the
// first that failed. A group is answered only once its
// COMMIT returned. If the connection is lost, or a statement fails, the
// writer connects again and reads the last group id delayd_commits holds
// for this daemon: the groups up to it committed and are answered, the rest
// are sent again in order; so a group is never answered OK when unsure, nor
// applied twice. While the database cannot be reached or takes no writes (a
// fail-over, a read-only primary), Writable() is false, new changes are
// refused (UNAVAILABLE, through Backlogged), what was queued waits, and the
// writer reconnects with backoff.
//
// Reads (pg_read.cc): payloads by id, on connections of a small pool, with
// the queued batches seen through a View; the payloads of recent writes are
// kept in a bounded cache (ReadCached).
//
// One daemon per database, unless it is `shared`: the writer holds a
// session advisory lock (and lets go of it on Close); a second delayd on the
// same database waits lock_wait for it, then is refused. Shared, each
// node's writes are fenced by its partition leases instead (SetLeases).
//
// Locking: mu_ guards the queue (with how much of it the writer has taken
// into groups, and whether it polls), the views' batches, the leases held
// and the closing state; the groups formed and in flight, and the writer's
// connection, are the writer thread's alone; cache_mu_ the payload cache;
// readers_mu_ the pool of read connections; busy_mu_ the running database
// operations. None is held across a call to the database, and none is taken
// under another.
#ifndef DELAYD_SERVER_STORE_POSTGRES_PG_STORE_H_
#define DELAYD_SERVER_STORE_POSTGRES_PG_STORE_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/common/mutex.h"
#include "server/store/postgres/pg_lease.h"
#include "server/store/postgres/pg_schema.h"
#include "server/store/postgres/pg_wire.h"
#include "server/store/store.h"

namespace delayd {

struct PgOptions {
  // A libpq connection string or URL: host lists and target_session_attrs
  // for fail-over, sslmode, PGPASSFILE and the PG* variables all work as
  // they do for psql.
  std::string conninfo;
  // Names this daemon's commit record (delayd_commits), and with `shared`
  // its leases: unique among the daemons on one database.
  std::string node = "delayd";
  // Whether the database's partitions are shared by several delayd nodes
  // (a cluster), each owning some through a lease (pg_lease.h). Then no
  // node takes the database for itself; the core partitions keys as the
  // database does (SharedPartitions); every write transaction is fenced by
  // the leases SetLeases gave; and a node reads a partition's records when
  // it takes it (LoadPartition).
  bool shared = false;
  // Logical partitions, when the schema is created (1..1024).
  int partitions = 64;
  // How long a connection waits for another delayd to let go of the
  // database before it is refused.
  std::chrono::milliseconds lock_wait{10000};
  // Queued bytes beyond which Backlogged() is true.
  std::size_t max_backlog_bytes = 64 << 20;
  // Payloads of recent writes kept for ReadCached, in bytes.
  std::size_t cache_bytes = 8 << 20;
  // Read connections at most (reads beyond wait for one).
  int readers = 4;
  // Waits between reconnection attempts: from the first, doubling to the
  // last.
  std::chrono::milliseconds reconnect_first{100};
  std::chrono::milliseconds reconnect_last{5000};
  // Tests: called on the writer thread once a group's transaction is sent
  // (all of it, COMMIT included) and before its results are read, with the
  // connection; a test may cut the connection there.
  std::function<void(PGconn*)> after_group_sent;
  // Tests: called before payloads are read from the database (not from
  // the queue or the cache), on the reading thread.
  std::function<void()> before_payload_read;
};

// Opens a PgStore with `options` for whoever calls it (a scheduler).
StoreOpener PgStoreOpener(PgOptions options);

// Returns once the database takes a connection that can write (a primary),
// trying again with the reconnection backoff for as long as it does not;
// `note` is told each new reason it could not (a reason repeated is told
// once). Blocks: for a daemon's start, before it serves.
void WaitForPostgres(const PgOptions& options,
                     const std::function<void(const std::string&)>& note);

// Connects and brings the database's schema up to date, alone (delayd
// migrate). `report` says what it found and did.
Status MigratePostgres(const PgOptions& options, std::string* report);

class PgStore final : public Store {
 public:
  // Connects, migrates the schema, takes the database for this daemon
  // (refused if another delayd holds it) and starts the writer.
  static Status Open(const PgOptions& options, StoreHooks hooks,
                     std::unique_ptr<PgStore>* out);
  ~PgStore() override;  // Close().

  const std::string& where() const override { return where_; }
  std::uint32_t SharedPartitions() const override {
    return options_.shared ? static_cast<std::uint32_t>(schema_.partitions) : 0;
  }
  // With `shared` (pg_lease_keeper.h tells the leases). A batch that
  // touches a partition not held is not written:
  // its completion gets UNAVAILABLE. Each transaction starts with
  // delayd_fence over the partitions its batches touch, so a lease lost
  // meanwhile fails it in the database (DL001): then the writer drops the
  // leases the database no longer says are this node's and sends that
  // group and those behind it again, the batches that touch a partition
  // lost refused (UNAVAILABLE), the others written.
  void SetHeld(const Held& held) override EXCLUDES(mu_);
  Status LoadPartition(std::uint32_t part, std::uint64_t* version_limit,
                       std::uint64_t* event_seq_limit,
                       const PartitionVisitor& visit) override;
  Status LoadNamespaces(std::vector<std::string>* names) override;
  Status LoadCounters(std::uint64_t* next_version,
                      std::uint64_t* next_event_seq) override;
  Status ForEachTimer(
      const std::function<void(const StoredTimer&)>& visit) override;
  Status ForEachEvent(
      const std::function<void(const StoredEvent&)>& visit) override;
  Status ForEachFate(
      const std::function<void(std::uint64_t, const StoredFate&)>& visit)
      override;
  Status LoadPolicies(
      std::vector<std::pair<std::string, std::string>>* policies) override;
  Status ForEachSchedule(
      const std::function<void(NamespaceId, std::string_view,
                               std::string_view)>& visit) override;
  Status ForEachDedup(
      const std::function<void(NamespaceId, std::string_view,
                               std::string_view)>& visit) override;

  void Commit(Batch& batch, Done done) override;
  // With `shared`, `written` runs once the group committed (just before
  // `durable`), not once it was sent (PgStore::SendNext says why).
  void Write(Batch& batch, std::function<void()> written,
             Done durable) override;
  void CommitSynced(Batch& batch, Done done) override;
  Status WriteNow(Batch& batch) override;
  Status Failed() const override;
  void SetExecutor(
      std::function<void(std::function<void()>)> executor) override;
  bool Backlogged(std::string* why) const override;
  std::chrono::nanoseconds Busy() const override;
  bool Writable(std::string* why) const override;
  void Flush(std::function<void()> done) override;
  void Sync() override;
  void Close() override;

  std::shared_ptr<const View> NewView() override;
  Status GetPayloads(std::span<const std::uint64_t> ids,
                     std::vector<std::string>* payloads,
                     std::vector<bool>* readable) override;
  Status GetPayloads(std::span<const std::uint64_t> ids, const View& view,
                     std::vector<std::string>* payloads,
                     std::vector<bool>* readable,
                     std::vector<bool>* gone) override;
  bool ReadCached(std::span<const std::uint64_t> ids,
                  std::vector<std::string>* payloads,
                  std::vector<bool>* readable) override;

  // FAILED_PRECONDITION, naming PostgreSQL's own ways.
  Status Backup(const std::string& dir) override;
  std::vector<Gauge> Gauges() override;
  // What the database's durability settings mean (a warning when they do
  // not keep every acknowledged write through the loss of a machine).
  std::vector<std::string> OpenNotes() const override { return notes_; }

  const pg::Schema& schema() const { return schema_; }

 private:
  class PgView;
  PgStore(PgOptions options, StoreHooks hooks);

  struct Queued {
    std::shared_ptr<const Batch> batch;  // Null: a Flush marker.
    std::function<void()> written;
    Done done;
    // Not OK: not written (a partition not held); `done` gets this.
    Status refused;
    // `done` runs on the writer's thread, not through the executor
    // (WriteNow: its caller may be one of the executor's threads).
    bool direct = false;
  };
  class Op;
  // A run of queued batches written as one transaction (pg_writer.cc).
  struct Group {
    std::vector<Queued> batches;
    std::int64_t id = 0;       // Set when first sent; kept when sent again.
    std::size_t queries = 0;   // Answers the transaction sent awaits.
    std::size_t answered = 0;  // Of them, read.
    bool announced = false;    // Its `written` callbacks ran.
    bool unknown = false;      // Sent on a connection since lost.
    std::unique_ptr<Op> op;    // While sent, for Busy().
  };
  // Groups sent and not yet answered, at most.
  static constexpr std::size_t kMaxInFlight = 4;

  // Opening (pg_store.cc).
  Status Connect(pg::Conn* out, bool writer, std::string* why);
  Status Prepare(PGconn* conn);
  Status TakeDatabase(PGconn* conn);
  // Lets the next delayd take the database (Close, the writer stopped).
  void ReleaseDatabase();
  std::vector<std::string> DurabilityNotes(const std::string& where);

  // Writing (pg_writer.cc), on the writer thread but for Enqueue and Wake.
  // A `firing` (Write) may go out while other groups are in flight: its
  // events wait for it to be sent or committed.
  void Enqueue(Batch& batch, std::function<void()> written, Done done,
               bool direct = false, bool firing = false) EXCLUDES(mu_);
  // Wakes the writer from its poll.
  void Wake();
  void WriterLoop() EXCLUDES(mu_);
  // Whether what is queued and not in a group may form one now.
  bool MayFormGroup() const REQUIRES(mu_);
  // Waits for something to do, forming what is queued into a group when a
  // group can be sent; false once closing with everything written.
  bool TakeQueued() EXCLUDES(mu_);
  // Sends the next unsent group (connecting and resolving first).
  void SendNext() EXCLUDES(mu_);
  // After a lost connection: answers the unsent groups that had committed.
  bool Resolve() EXCLUDES(mu_);
  // Sends `group`'s transaction, without waiting for its answers.
  bool Send(PGconn* conn, Group& group, std::string* error) EXCLUDES(mu_);
  // With `shared` (pg_fence.cc): refuses the group's batches that touch a
  // partition not held, and gives the fence over the partitions the others
  // touch (none: false).
  bool FenceOf(Group& group, pg::Params* fence) EXCLUDES(mu_);
  // The database failed the first group in flight by its fence: answers it
  // (UNAVAILABLE), and sends those behind it again on a new connection.
  void Fenced(const std::string& error) EXCLUDES(mu_);
  // Keeps of leases_ only what the database says this node holds.
  Status CheckLeases(PGconn* conn) EXCLUDES(mu_);

  // Reads the answers that have arrived, or waits for answers or for new
  // batches.
  void Await() EXCLUDES(mu_);
  bool ReadAnswers() EXCLUDES(mu_);
  // What was in flight goes back in line, to be resolved and sent again on
  // a new connection.
  void SendAgain();
  // The connection failed or the database refused a statement: what was in
  // flight is sent again (or, if `rejected`, the store fails).
  void Trouble(const std::string& error, bool rejected) EXCLUDES(mu_);
  // Answers the first group in flight (or else the first unsent one).
  void Complete(const Status& status) EXCLUDES(mu_);
  void FinishAll(const Status& status) EXCLUDES(mu_);
  // The group's payloads into the cache, and its `written` callbacks run.
  void GroupSent(std::vector<Queued>& group);
  // Runs `sql` on the writer's connection, in pipeline mode, alone; its
  // rows (in `format`) to `out`. UNAVAILABLE if it fails.
  Status QueryOnWriter(PGconn* conn, const char* sql, pg::Params& params,
                       int format, pg::Result* out);
  // The id of the last group of this daemon's node that committed.
  Status LastCommitted(PGconn* conn, std::int64_t* last);
  // Connects the writer (if it is not), with backoff, until it is or the
  // store closes; keeps `writable_` and the log up to date.
  bool EnsureWriter() EXCLUDES(mu_);
  // Waits `d`, or until Close(); false once closing.
  bool Pause(std::chrono::milliseconds d) EXCLUDES(mu_);
  // Whether the writer's connection answers a query.
  bool Probe();
  static constexpr std::chrono::seconds kProbeInterval{1};
  void NoteUnwritable(const std::string& why) EXCLUDES(mu_);
  void NoteWritable() EXCLUDES(mu_);
  void RunDone(std::vector<Done> done, const Status& status) REQUIRES(mu_);
  // The writer thread's own.
  std::deque<Group> unsent_;      // Formed, not sent (or to send again).
  std::deque<Group> in_flight_;   // Sent, in order.
  bool between_results_ = false;  // A query's result read, its end not.
  std::chrono::milliseconds backoff_{0};
  bool check_leases_ = false;  // A fence failed: CheckLeases before sending.
  // Namespace names by id as the batches written so far say (the writer's).
  std::vector<std::string> names_;
  std::uint32_t PartitionOf(std::string_view ns, std::string_view key) const;

  // Reading (pg_read.cc).
  // A read connection from the pool (or a new one), given back to the pool
  // when the Reader goes (if it is idle and well; else closed).
  class Reader {
   public:
    Reader() = default;
    ~Reader();
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;
    PGconn* conn() const { return conn_.get(); }

   private:
    friend class PgStore;
    PgStore* store_ = nullptr;
    pg::Conn conn_;
  };
  Status TakeReader(Reader* out) EXCLUDES(readers_mu_);
  void ReturnReader(pg::Conn conn) EXCLUDES(readers_mu_);
  // Runs `query` on a read connection; again on a new one if the
  // connection died meanwhile.
  Status OnReader(const std::function<void(PGconn*)>& query);
  // A query on a read connection (`format`: 1 for binary results).
  Status Query(const char* sql, int format, pg::Result* out);
  Status ReadRows(std::span<const std::uint64_t> ids,
                  std::unordered_map<std::uint64_t, std::string>* found);
  Status Copy(const std::string& query, int fields,
              const std::function<void(const std::vector<std::string_view>&,
                                       const std::vector<bool>&)>& row);
  void CacheWritten(const std::vector<Queued>& group) EXCLUDES(cache_mu_);

  // One database operation, for Busy().
  class Op {
   public:
    explicit Op(const PgStore& store);
    ~Op();

   private:
    const PgStore& store_;
    std::multiset<std::chrono::steady_clock::time_point>::iterator at_;
  };
  Status Error(const std::string& what) const;
  // A failed read: UNAVAILABLE, not reported, if the database could not
  // answer (`result` says so: pg::IsUnavailable, or `conn` is lost);
  // else Error(what).
  Status ReadError(PGconn* conn, const PGresult* result,
                   const std::string& what) const;

  const PgOptions options_;
  const StoreHooks hooks_;
  // Set once by Open, before the writer starts.
  std::string where_;
  pg::Schema schema_;
  std::vector<std::string> notes_;  // Set by Open.
  // The writer's connection (the writer thread's alone once it runs).
  pg::Conn writer_conn_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> writable_{true};
  std::atomic<std::size_t> queued_bytes_{0};
  std::atomic<std::int64_t> next_group_{0};

  Mutex mu_;
  CondVar cv_;
  CondVar idle_cv_;
  CondVar close_wait_;  // Pause() waits here; Close() wakes it.
  std::deque<Queued> queue_ GUARDED_BY(mu_);
  // Entries at the queue's front that the writer has taken into groups.
  std::size_t taken_ GUARDED_BY(mu_) = 0;
  bool polling_ GUARDED_BY(mu_) = false;  // The writer waits in poll().
  // Queued batches not in a group yet that publish once sent (`written`).
  std::size_t firings_queued_ GUARDED_BY(mu_) = 0;
  // Their bytes, and how many let them go out while others are in flight.
  std::size_t untaken_bytes_ GUARDED_BY(mu_) = 0;
  static constexpr std::size_t kEarlyGroupBytes = 64 << 10;
  bool closing_ GUARDED_BY(mu_) = false;
  int running_ GUARDED_BY(mu_) = 0;
  std::string unwritable_why_ GUARDED_BY(mu_);
  std::function<void(std::function<void()>)> executor_ GUARDED_BY(mu_);
  // With `shared`: the epoch of each partition held, by partition.
  Held leases_ GUARDED_BY(mu_);
  std::thread writer_;
  int wake_fd_ = -1;  // An eventfd (Wake); closed by the destructor.

  Mutex cache_mu_;
  std::unordered_map<std::uint64_t, std::string> cache_ GUARDED_BY(cache_mu_);
  std::deque<std::uint64_t> cache_order_ GUARDED_BY(cache_mu_);
  std::size_t cache_size_ GUARDED_BY(cache_mu_) = 0;

  Mutex readers_mu_;
  CondVar reader_free_;
  std::vector<pg::Conn> readers_ GUARDED_BY(readers_mu_);
  int readers_out_ GUARDED_BY(readers_mu_) = 0;

  mutable Mutex busy_mu_;
  std::multiset<std::chrono::steady_clock::time_point> busy_
      GUARDED_BY(busy_mu_);
};

}  // namespace delayd

#endif  // DELAYD_SERVER_STORE_POSTGRES_PG_STORE_H_
