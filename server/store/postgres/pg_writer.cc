// PgStore's writes: the queue, the writer thread, a group as one pipelined
// transaction, and what happens when the connection is lost (pg_store.h,
// "Writes").
#include <spdlog/spdlog.h>

#include <unordered_map>
#include <utility>

#include "server/store/postgres/pg_store.h"

namespace delayd {
namespace {

// The statements of one group's transaction, in order. Consecutive changes
// of one kind become one statement over arrays; within such a run, a later
// change of the same row replaces an earlier one.
class GroupStatements {
 public:
  struct Statement {
    const char* name;
    pg::Params params;
  };

  GroupStatements(
      std::vector<std::string>& names,
      std::function<std::uint32_t(std::string_view, std::string_view)>
          partition_of)
      : names_(names), partition_of_(std::move(partition_of)) {}

  void Add(const Batch& batch) {
    Batch::Reader reader(batch);
    Batch::Change c;
    while (reader.Next(&c)) Add(c);
  }
  std::vector<Statement> Finish() {
    FlushRun();
    return std::move(out_);
  }

 private:
  enum class Run { kNone, kAdd, kMove, kRemove, kFire, kFate, kUnfate };

  const std::string& NameOf(NamespaceId ns) const {
    static const std::string kUnknown;
    return ns < names_.size() ? names_[ns] : kUnknown;
  }

  void Begin(Run run) {
    if (run_ == run) return;
    FlushRun();
    run_ = run;
    // The element types of the run's columns, as its statement casts them.
    switch (run) {
      case Run::kAdd:
        Columns({pg::kInt8, pg::kInt2, pg::kText, pg::kBytea, pg::kInt8,
                 pg::kInt8, pg::kBytea});
        break;
      case Run::kFire:
        Columns({pg::kInt8, pg::kInt8, pg::kInt8, pg::kInt2, pg::kInt8,
                 pg::kInt8, pg::kInt8});
        break;
      default:
        Columns({pg::kInt8, pg::kInt8, pg::kInt8, pg::kInt8, pg::kInt8,
                 pg::kInt8, pg::kInt8});
    }
  }
  void Columns(std::initializer_list<pg::Oid> types) {
    pg::Array* columns[] = {&a_, &b_, &c_, &d_, &e_, &f_, &g_};
    std::size_t i = 0;
    for (pg::Oid t : types) *columns[i++] = pg::Array(t);
  }

  void Add(const Batch::Change& c) {
    switch (c.kind) {
      case Batch::Kind::kAddTimer: {
        Begin(Run::kAdd);
        const std::string& ns = NameOf(c.timer.ns);
        a_.Int64(static_cast<std::int64_t>(c.timer.payload_id));
        b_.Int16(static_cast<std::int16_t>(partition_of_(ns, c.timer.key)));
        c_.Bytes(ns);
        d_.Bytes(c.timer.key);
        e_.Int64(c.timer.fire_time);
        f_.Int64(static_cast<std::int64_t>(c.timer.version));
        g_.Bytes(c.data);
        break;
      }
      case Batch::Kind::kMoveTimer:
        Begin(Run::kMove);
        moves_[c.timer.payload_id] = {
            c.timer.fire_time, static_cast<std::int64_t>(c.timer.version)};
        break;
      case Batch::Kind::kRemoveTimer:
      case Batch::Kind::kRemoveEvent:
        Begin(Run::kRemove);
        a_.Int64(static_cast<std::int64_t>(c.payload_id));
        break;
      case Batch::Kind::kFireTimer:
        Begin(Run::kFire);
        a_.Int64(static_cast<std::int64_t>(c.event.payload_id));
        b_.Int64(static_cast<std::int64_t>(c.event.id));
        c_.Int64(c.event.fired_at);
        d_.Int16(static_cast<std::int16_t>(c.event.reason));
        e_.Int64(c.event.fire_time);
        f_.Int64(static_cast<std::int64_t>(c.event.version));
        break;
      case Batch::Kind::kPutFate:
        Begin(Run::kFate);
        fates_[c.id] = {c.fate.attempts, c.fate.dead, std::string(c.fate.error),
                        c.fate.retry_at};
        break;
      case Batch::Kind::kRemoveFate:
        Begin(Run::kUnfate);
        a_.Int64(static_cast<std::int64_t>(c.id));
        break;
      case Batch::Kind::kReserveIds: {
        FlushRun();
        pg::Params p;
        p.Int32(static_cast<std::int32_t>(c.partition));
        p.Int64(static_cast<std::int64_t>(c.version_limit));
        p.Int64(static_cast<std::int64_t>(c.event_seq_limit));
        out_.push_back({"counters", std::move(p)});
        break;
      }
      case Batch::Kind::kPutNamespace:
        // Rows carry names, not ids: nothing to write, but later changes of
        // the id name this namespace.
        if (names_.size() <= c.id) names_.resize(c.id + 1);
        names_[c.id] = std::string(c.name);
        break;
      case Batch::Kind::kPutPolicy: {
        FlushRun();
        pg::Params p;
        p.Bytes(c.name);
        if (c.data.empty()) {
          out_.push_back({"unpolicy", std::move(p)});
        } else {
          p.Bytes(c.data);
          out_.push_back({"policy", std::move(p)});
        }
        break;
      }
    }
  }

  void FlushRun() {
    pg::Params p;
    switch (run_) {
      case Run::kNone:
        return;
      case Run::kAdd:
        for (pg::Array* a : {&a_, &b_, &c_, &d_, &e_, &f_, &g_}) {
          p.Add(a->Encode());
        }
        out_.push_back({"add", std::move(p)});
        break;
      case Run::kMove: {
        pg::Array ids(pg::kInt8), fire(pg::kInt8), version(pg::kInt8);
        for (const auto& [id, m] : moves_) {
          ids.Int64(static_cast<std::int64_t>(id));
          fire.Int64(m.first);
          version.Int64(m.second);
        }
        for (pg::Array* a : {&ids, &fire, &version}) p.Add(a->Encode());
        out_.push_back({"move", std::move(p)});
        break;
      }
      case Run::kRemove:
        p.Add(a_.Encode());
        out_.push_back({"remove", std::move(p)});
        break;
      case Run::kFire:
        for (pg::Array* a : {&a_, &b_, &c_, &d_, &e_, &f_}) p.Add(a->Encode());
        out_.push_back({"fire", std::move(p)});
        break;
      case Run::kFate: {
        pg::Array ids(pg::kInt8), attempts(pg::kInt4), dead(pg::kBool),
            error(pg::kBytea), retry_at(pg::kInt8);
        for (const auto& [id, f] : fates_) {
          ids.Int64(static_cast<std::int64_t>(id));
          attempts.Int32(static_cast<std::int32_t>(f.attempts));
          dead.Bool(f.dead);
          error.Bytes(f.error);
          if (f.retry_at != 0) {
            retry_at.Int64(f.retry_at);
          } else {
            retry_at.Null();
          }
        }
        for (pg::Array* a : {&ids, &attempts, &dead, &error, &retry_at}) {
          p.Add(a->Encode());
        }
        out_.push_back({"fate", std::move(p)});
        break;
      }
      case Run::kUnfate:
        p.Add(a_.Encode());
        out_.push_back({"unfate", std::move(p)});
        break;
    }
    run_ = Run::kNone;
    moves_.clear();
    fates_.clear();
  }

  struct Fate {
    std::uint32_t attempts;
    bool dead;
    std::string error;
    WallNanos retry_at;
  };

  std::vector<std::string>& names_;
  std::function<std::uint32_t(std::string_view, std::string_view)>
      partition_of_;
  std::vector<Statement> out_;
  Run run_ = Run::kNone;
  // The columns of the current run (their element types set by Begin).
  pg::Array a_{pg::kInt8}, b_{pg::kInt8}, c_{pg::kInt8}, d_{pg::kInt8},
      e_{pg::kInt8}, f_{pg::kInt8}, g_{pg::kBytea};
  std::map<std::uint64_t, std::pair<WallNanos, std::int64_t>> moves_;
  std::map<std::uint64_t, Fate> fates_;
};

}  // namespace

void PgStore::Enqueue(Batch& batch, std::function<void()> written, Done done) {
  Status refused = Failed();
  {
    MutexLock lock(&mu_);
    if (refused.ok() && closing_) {
      refused = Status::Unavailable(where_ + " is closed");
    }
    if (refused.ok()) {
      auto shared = std::make_shared<const Batch>(std::move(batch));
      queued_bytes_.fetch_add(shared->bytes(), std::memory_order_relaxed);
      queue_.push_back(
          Queued{std::move(shared), std::move(written), std::move(done)});
    } else if (done) {
      std::vector<Done> one;
      one.push_back(std::move(done));
      RunDone(std::move(one), refused);
    }
  }
  batch.Clear();
  if (refused.ok()) cv_.Signal();
}

void PgStore::Commit(Batch& batch, Done done) {
  Enqueue(batch, nullptr, std::move(done));
}

void PgStore::Write(Batch& batch, std::function<void()> written, Done durable) {
  Enqueue(batch, std::move(written), std::move(durable));
}

void PgStore::CommitSynced(Batch& batch, Done done) {
  // (Every commit is durable as the database's settings say.)
  Enqueue(batch, nullptr, std::move(done));
}

void PgStore::RunDone(std::vector<Done> done, const Status& status) {
  if (done.empty()) return;
  const auto executor = executor_;
  ++running_;
  {
    MutexUnlock unlock(&mu_);
    auto run = [done = std::move(done), status]() mutable {
      for (auto& d : done) d(status);
    };
    if (executor) {
      executor(std::move(run));
    } else {
      run();
    }
  }
  --running_;
  idle_cv_.SignalAll();
}

void PgStore::WriterLoop() {
  MutexLock lock(&mu_);
  for (;;) {
    while (queue_.empty() && !closing_) {
      // Idle: the connection is tried every kProbeInterval, so that a
      // database gone away shows in health before a write needs it.
      if (!cv_.WaitUntil(&mu_,
                         std::chrono::steady_clock::now() + kProbeInterval)) {
        MutexUnlock unlock(&mu_);
        if (!writer_conn_ || !Probe()) {
          NoteUnwritable(writer_conn_ ? pg::ErrorOf(writer_conn_.get())
                                      : "not connected");
          writer_conn_.reset();
          EnsureWriter();
        }
      }
    }
    if (queue_.empty()) break;  // Closing, and everything written.
    // The whole queue is one group (it stays queued, for views, until
    // written).
    std::vector<Queued> group;
    group.reserve(queue_.size());
    for (Queued& q : queue_) {
      group.push_back(Queued{q.batch, std::move(q.written), std::move(q.done)});
    }
    writing_ = true;
    Status status;
    {
      MutexUnlock unlock(&mu_);
      status = WriteGroup(group, [&] { GroupSent(group); });
    }
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < group.size(); ++i) {
      if (queue_.front().batch) bytes += queue_.front().batch->bytes();
      queue_.pop_front();
    }
    queued_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    writing_ = false;
    std::vector<Done> done;
    for (Queued& q : group) {
      if (q.done) done.push_back(std::move(q.done));
    }
    RunDone(std::move(done), status);
    idle_cv_.SignalAll();
  }
}

void PgStore::GroupSent(std::vector<Queued>& group) {
  CacheWritten(group);
  // `written` runs once the transaction is sent, not once it committed:
  // what the connection sends later commits after it (the writer sends the
  // next group only once this one committed, resending it first if its
  // connection drops), and a payload of it is read from the queue until it
  // commits (GetPayloads). If it is refused, the store fails and the
  // daemon stops: what `written` published fires again after the restart.
  for (Queued& q : group) {
    if (q.written) std::exchange(q.written, nullptr)();
  }
}

Status PgStore::WriteGroup(const std::vector<Queued>& group,
                           const std::function<void()>& sent) {
  const std::int64_t group_id = next_group_.fetch_add(1);
  bool announced = false;
  bool unknown = false;  // An earlier attempt's fate is not known.
  auto backoff = options_.reconnect_first;
  // After a failed attempt: the connection dropped, a wait (backoff).
  auto again = [&](const std::string& why) {
    NoteUnwritable(why);
    writer_conn_.reset();
    const bool go_on = Pause(backoff);
    backoff = std::min(backoff * 2, options_.reconnect_last);
    return go_on;
  };
  for (;;) {
    if (Status failed = Failed(); !failed.ok()) return failed;
    if (!EnsureWriter()) {
      Status failed = Failed();
      return failed.ok() ? Status::Unavailable(where_ +
                                               ": closed while it "
                                               "took no writes")
                         : failed;
    }
    if (unknown) {
      bool committed = false;
      if (Status s = WasCommitted(writer_conn_.get(), group_id, &committed);
          !s.ok()) {
        if (!again(s.message())) {
          return Status::Unavailable(where_ +
                                     ": closed while it took no "
                                     "writes");
        }
        continue;
      }
      if (committed) {
        if (!std::exchange(announced, true)) sent();
        return Status::Ok();
      }
      unknown = false;
    }
    std::string error;
    switch (SendGroup(writer_conn_.get(), group, group_id, &error, [&] {
      if (!std::exchange(announced, true)) sent();
    })) {
      case Outcome::kCommitted:
        NoteWritable();
        return Status::Ok();
      case Outcome::kRejected: {
        Status status = Error("the database refused a write: " + error);
        if (!failed_.exchange(true) && hooks_.on_write_failure) {
          hooks_.on_write_failure(status);
        }
        return status;
      }
      case Outcome::kUnknown:
        unknown = true;
        break;
      case Outcome::kNotCommitted:
        break;
    }
    if (!again(error)) {
      return Status::Unavailable(where_ + ": closed while it took no writes");
    }
  }
}

bool PgStore::Pause(std::chrono::milliseconds d) {
  MutexLock lock(&mu_);
  const auto until = std::chrono::steady_clock::now() + d;
  while (!closing_ && close_wait_.WaitUntil(&mu_, until)) {
  }
  return !closing_;
}

PgStore::Outcome PgStore::SendGroup(PGconn* conn,
                                    const std::vector<Queued>& group,
                                    std::int64_t group_id, std::string* error,
                                    const std::function<void()>& on_sent) {
  GroupStatements builder(names_,
                          [this](std::string_view ns, std::string_view key) {
                            return PartitionOf(ns, key);
                          });
  for (const Queued& q : group) {
    if (q.batch) builder.Add(*q.batch);
  }
  std::vector<GroupStatements::Statement> statements = builder.Finish();
  pg::Params mark;
  mark.Bytes(options_.node);
  mark.Int64(group_id);
  statements.push_back({"mark", std::move(mark)});
  Op op(*this);
  // BEGIN, the statements, COMMIT: all sent before any answer is read.
  bool sent = PQsendQueryParams(conn, "BEGIN", 0, nullptr, nullptr, nullptr,
                                nullptr, 0) == 1;
  for (auto& st : statements) {
    sent = sent && PQsendQueryPrepared(conn, st.name, st.params.count(),
                                       st.params.values(), st.params.lengths(),
                                       st.params.formats(), 0) == 1;
  }
  sent = sent && PQsendQueryParams(conn, "COMMIT", 0, nullptr, nullptr, nullptr,
                                   nullptr, 0) == 1;
  sent = sent && PQpipelineSync(conn) == 1;
  if (!sent) {
    *error = pg::ErrorOf(conn);
    // Something may have reached the server: not known.
    return Outcome::kUnknown;
  }
  on_sent();
  if (options_.after_group_sent) options_.after_group_sent(conn);
  const std::size_t queries = statements.size() + 2;
  Outcome outcome = Outcome::kCommitted;
  for (std::size_t i = 0; i < queries; ++i) {
    pg::Result r(PQgetResult(conn));
    if (!r) {
      *error = pg::ErrorOf(conn);
      return Outcome::kUnknown;  // The connection went.
    }
    const ExecStatusType s = PQresultStatus(r.get());
    if (s == PGRES_FATAL_ERROR) {
      if (PQstatus(conn) != CONNECTION_OK) {
        *error = pg::ErrorOf(r.get());
        return Outcome::kUnknown;
      }
      if (outcome == Outcome::kCommitted) {
        *error = pg::ErrorOf(r.get());
        outcome = pg::IsUnavailable(r.get()) ? Outcome::kNotCommitted
                                             : Outcome::kRejected;
      }
    } else if (s == PGRES_PIPELINE_ABORTED) {
      if (outcome == Outcome::kCommitted) outcome = Outcome::kNotCommitted;
    } else if (i + 1 == queries && outcome == Outcome::kCommitted &&
               std::string_view(PQcmdStatus(r.get())) != "COMMIT") {
      *error = std::string("COMMIT answered ") + PQcmdStatus(r.get());
      outcome = Outcome::kNotCommitted;
    }
    // Each query's results end with a null.
    pg::Result end(PQgetResult(conn));
  }
  pg::Result sync(PQgetResult(conn));
  if (!sync || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) {
    if (outcome == Outcome::kCommitted) return Outcome::kCommitted;
    *error = pg::ErrorOf(conn);
    return PQstatus(conn) == CONNECTION_OK ? outcome : Outcome::kUnknown;
  }
  return outcome;
}

Status PgStore::WasCommitted(PGconn* conn, std::int64_t group_id,
                             bool* committed) {
  pg::Params p;
  p.Bytes(options_.node);
  Op op(*this);
  if (PQsendQueryParams(
          conn, "SELECT group_id FROM delayd_commits WHERE node = $1", 1,
          nullptr, p.values(), p.lengths(), p.formats(), 1) != 1 ||
      PQpipelineSync(conn) != 1) {
    return Status::Unavailable(pg::ErrorOf(conn));
  }
  pg::Result r(PQgetResult(conn));
  pg::Result end(PQgetResult(conn));
  pg::Result sync(PQgetResult(conn));
  if (!r || PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    return Status::Unavailable(r ? pg::ErrorOf(r.get()) : pg::ErrorOf(conn));
  }
  *committed = PQntuples(r.get()) == 1 &&
               pg::GetInt64(PQgetvalue(r.get(), 0, 0)) == group_id;
  return Status::Ok();
}

bool PgStore::EnsureWriter() {
  auto wait = options_.reconnect_first;
  for (;;) {
    if (writer_conn_ && PQstatus(writer_conn_.get()) == CONNECTION_OK) {
      return true;
    }
    std::string why;
    const Status s = Connect(&writer_conn_, true, &why);
    if (s.ok()) {
      NoteWritable();
      return true;
    }
    writer_conn_.reset();
    if (s.code() == Code::kFailedPrecondition) {
      // Another delayd holds the database: this one must not write.
      Status status = Error(s.message());
      if (!failed_.exchange(true) && hooks_.on_write_failure) {
        hooks_.on_write_failure(status);
      }
      return false;
    }
    NoteUnwritable(why);
    if (!Pause(wait)) return false;
    wait = std::min(wait * 2, options_.reconnect_last);
  }
}

bool PgStore::Probe() {
  Op op(*this);
  PGconn* conn = writer_conn_.get();
  if (PQsendQueryParams(conn, "SELECT 1", 0, nullptr, nullptr, nullptr, nullptr,
                        0) != 1 ||
      PQpipelineSync(conn) != 1) {
    return false;
  }
  pg::Result r(PQgetResult(conn));
  pg::Result end(PQgetResult(conn));
  pg::Result sync(PQgetResult(conn));
  return r && PQresultStatus(r.get()) == PGRES_TUPLES_OK;
}

void PgStore::NoteUnwritable(const std::string& why) {
  {
    MutexLock lock(&mu_);
    unwritable_why_ = why;
  }
  if (writable_.exchange(false)) {
    spdlog::error("{}: takes no writes ({}); reconnecting", where_, why);
  }
}

void PgStore::NoteWritable() {
  if (!writable_.exchange(true)) {
    spdlog::warn("{}: takes writes again", where_);
  }
}

void PgStore::Flush(std::function<void()> done) {
  {
    MutexLock lock(&mu_);
    if (!closing_) {
      queue_.push_back(Queued{nullptr, nullptr,
                              [done = std::move(done)](Status) { done(); }});
      cv_.Signal();
      return;
    }
  }
  done();
}

void PgStore::Sync() {
  MutexLock lock(&mu_);
  while (!queue_.empty() || writing_ || running_ != 0) idle_cv_.Wait(&mu_);
}

void PgStore::Close() {
  {
    MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
  }
  cv_.SignalAll();
  close_wait_.SignalAll();
  if (writer_.joinable()) writer_.join();
  writer_conn_.reset();
  MutexLock lock(&readers_mu_);
  readers_.clear();
}

}  // namespace delayd
