// PgStore's writes: the queue, the writer thread, a group as one pipelined
// transaction, and what happens when the connection is lost (pg_store.h,
// "Writes").
#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "server/store/postgres/pg_group.h"
#include "server/store/postgres/pg_store.h"

namespace delayd {

void PgStore::Enqueue(Batch& batch, std::function<void()> written, Done done,
                      bool direct, bool firing) {
  Status refused = Failed();
  bool wake = false;
  {
    MutexLock lock(&mu_);
    if (refused.ok() && closing_) {
      refused = Status::Unavailable(where_ + " is closed");
    }
    if (refused.ok()) {
      auto shared = std::make_shared<const Batch>(std::move(batch));
      queued_bytes_.fetch_add(shared->bytes(), std::memory_order_relaxed);
      if (firing) ++firings_queued_;
      untaken_bytes_ += shared->bytes();
      wake = polling_ && (firing || untaken_bytes_ >= kEarlyGroupBytes);
      queue_.push_back(Queued{
          std::move(shared), std::move(written), std::move(done), {}, direct});
    } else if (done && direct) {
      done(refused);
    } else if (done) {
      std::vector<Done> one;
      one.push_back(std::move(done));
      RunDone(std::move(one), refused);
    }
  }
  batch.Clear();
  if (refused.ok()) cv_.Signal();
  if (wake) Wake();
}

void PgStore::Commit(Batch& batch, Done done) {
  Enqueue(batch, nullptr, std::move(done));
}

void PgStore::Write(Batch& batch, std::function<void()> written, Done durable) {
  Enqueue(batch, std::move(written), std::move(durable), /*direct=*/false,
          /*firing=*/true);
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

void PgStore::Wake() {
  // (Written only while the writer polls: an eventfd write is a system call
  // that an idle or sending writer does not need.)
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
}

void PgStore::WriterLoop() {
  backoff_ = options_.reconnect_first;
  while (TakeQueued()) {
    if (!unsent_.empty() && in_flight_.size() < kMaxInFlight) {
      SendNext();
    } else if (!in_flight_.empty()) {
      Await();
    }
  }
}

bool PgStore::MayFormGroup() const {
  if (taken_ == queue_.size()) return false;
  if (in_flight_.empty()) return true;
  // While groups are in flight, only for firings, whose events are
  // published once sent or committed, or for a group large enough to pay for
  // its own COMMIT (it keeps the server busy while the one before is answered).
  // Small changes that wait for their COMMIT gain nothing from going out
  // early, and wait to share one larger group (tests/bench/README.md:
  // unary SetTimer lost up to a quarter when every group could go out).
  return in_flight_.size() < kMaxInFlight &&
         (firings_queued_ > 0 || untaken_bytes_ >= kEarlyGroupBytes);
}

bool PgStore::TakeQueued() {
  MutexLock lock(&mu_);
  for (;;) {
    if (unsent_.empty() && MayFormGroup()) {
      // What is queued and not yet in a group becomes one group (it stays
      // queued, for views, until written).
      Group group;
      group.batches.reserve(queue_.size() - taken_);
      for (std::size_t i = taken_; i < queue_.size(); ++i) {
        Queued& q = queue_[i];
        group.batches.push_back(Queued{
            q.batch, std::move(q.written), std::move(q.done), {}, q.direct});
      }
      taken_ = queue_.size();
      firings_queued_ = 0;
      untaken_bytes_ = 0;
      unsent_.push_back(std::move(group));
    }
    if ((!unsent_.empty() && in_flight_.size() < kMaxInFlight) ||
        !in_flight_.empty()) {
      return true;
    }
    if (closing_ && queue_.empty()) return false;  // Everything written.
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
}

void PgStore::SendNext() {
  if (Status failed = Failed(); !failed.ok()) return FinishAll(failed);
  if (!in_flight_.empty() && PQstatus(writer_conn_.get()) != CONNECTION_OK) {
    // (Not a new connection under groups sent on the old one.)
    return Trouble(pg::ErrorOf(writer_conn_.get()), false);
  }
  if (!EnsureWriter()) {
    Status failed = Failed();
    return FinishAll(
        failed.ok() ? Status::Unavailable(where_ + ": closed while it took no "
                                                   "writes")
                    : failed);
  }
  if (!Resolve()) return;
  if (unsent_.empty()) return;
  if (check_leases_) {
    if (Status s = CheckLeases(writer_conn_.get()); !s.ok()) {
      return Trouble(s.message(), false);
    }
    check_leases_ = false;
  }
  Group& group = unsent_.front();
  if (group.id == 0) group.id = next_group_.fetch_add(1);
  std::string error;
  const bool sent = Send(writer_conn_.get(), group, &error);
  in_flight_.push_back(std::move(unsent_.front()));
  unsent_.pop_front();
  if (!sent) return Trouble(error, false);
  // On a database that nodes share, a group's `written` waits for its
  // COMMIT (Complete): the fence may refuse it without the daemon stopping
  // (the partition moved), and the partition's next owner then fires the
  // same timers again as other events, so events published at the send
  // would be delivered twice under two ids.
  if (!options_.shared && !std::exchange(in_flight_.back().announced, true)) {
    GroupSent(in_flight_.back().batches);
  }
  if (options_.after_group_sent) options_.after_group_sent(writer_conn_.get());
}

bool PgStore::Resolve() {
  if (unsent_.empty() || !unsent_.front().unknown) return true;
  std::int64_t last = 0;
  if (Status s = LastCommitted(writer_conn_.get(), &last); !s.ok()) {
    Trouble(s.message(), false);
    return false;
  }
  // Groups commit in the order they were sent (each one's statements run
  // only if the one before committed: no sync point lies between them), so
  // those up to the last id recorded committed and the rest did not.
  while (!unsent_.empty() && unsent_.front().unknown &&
         unsent_.front().id <= last) {
    Complete(Status::Ok());
  }
  for (Group& g : unsent_) g.unknown = false;
  return true;
}

bool PgStore::Send(PGconn* conn, Group& group, std::string* error) {
  pg::GroupStatements builder(
      names_, [this](std::string_view ns, std::string_view key) {
        return PartitionOf(ns, key);
      });
  pg::Params fence;
  const bool fenced = FenceOf(group, &fence);
  for (const Queued& q : group.batches) {
    if (q.batch && q.refused.ok()) builder.Add(*q.batch);
  }
  std::vector<pg::GroupStatements::Statement> statements;
  if (fenced) statements.push_back({"fence", std::move(fence)});
  for (auto& st : builder.Finish()) statements.push_back(std::move(st));
  pg::Params mark;
  mark.Bytes(options_.node);
  mark.Int64(group.id);
  statements.push_back({"mark", std::move(mark)});
  group.queries = statements.size() + 2;
  group.answered = 0;
  group.op = std::make_unique<Op>(*this);
  // BEGIN, the statements, COMMIT, and a flush request instead of a sync
  // point: if a statement fails, the server skips everything after it up to
  // the next sync, including the groups sent behind this one.
  bool sent = PQsendQueryParams(conn, "BEGIN", 0, nullptr, nullptr, nullptr,
                                nullptr, 0) == 1;
  for (auto& st : statements) {
    sent = sent && PQsendQueryPrepared(conn, st.name, st.params.count(),
                                       st.params.values(), st.params.lengths(),
                                       st.params.formats(), 0) == 1;
  }
  sent = sent && PQsendQueryParams(conn, "COMMIT", 0, nullptr, nullptr, nullptr,
                                   nullptr, 0) == 1;
  sent = sent && PQsendFlushRequest(conn) == 1 && PQflush(conn) == 0;
  if (!sent) *error = pg::ErrorOf(conn);
  return sent;
}

void PgStore::Await() {
  if (!ReadAnswers()) return;
  {
    MutexLock lock(&mu_);
    if (in_flight_.empty() || (in_flight_.size() < kMaxInFlight &&
                               (!unsent_.empty() || MayFormGroup()))) {
      return;  // Something to send.
    }
    polling_ = true;
  }
  pollfd fds[2] = {{PQsocket(writer_conn_.get()), POLLIN, 0},
                   {wake_fd_, POLLIN, 0}};
  ::poll(fds, 2,
         static_cast<int>(kProbeInterval / std::chrono::milliseconds(1)));
  {
    MutexLock lock(&mu_);
    polling_ = false;
  }
  std::uint64_t wakes;
  [[maybe_unused]] const auto n = ::read(wake_fd_, &wakes, sizeof wakes);
}

bool PgStore::ReadAnswers() {
  PGconn* conn = writer_conn_.get();
  if (PQconsumeInput(conn) != 1) {
    Trouble(pg::ErrorOf(conn), false);
    return false;
  }
  while (!in_flight_.empty() && PQisBusy(conn) == 0) {
    Group& group = in_flight_.front();
    pg::Result r(PQgetResult(conn));
    if (!r) {
      // Each query's results end with a null.
      if (!std::exchange(between_results_, false)) break;
      if (++group.answered == group.queries) {
        NoteWritable();
        backoff_ = options_.reconnect_first;
        Complete(Status::Ok());
      }
      continue;
    }
    between_results_ = true;
    const ExecStatusType s = PQresultStatus(r.get());
    if (s == PGRES_FATAL_ERROR && pg::IsFenced(r.get())) {
      Fenced(pg::ErrorOf(r.get()));
      return false;
    }
    if (s == PGRES_FATAL_ERROR || s == PGRES_PIPELINE_ABORTED) {
      // Not committed, nor anything sent after it.
      const bool rejected = s == PGRES_FATAL_ERROR &&
                            PQstatus(conn) == CONNECTION_OK &&
                            !pg::IsUnavailable(r.get());
      Trouble(s == PGRES_FATAL_ERROR ? pg::ErrorOf(r.get()) : "aborted",
              rejected);
      return false;
    }
    if (group.answered + 1 == group.queries &&
        std::string_view(PQcmdStatus(r.get())) != "COMMIT") {
      Trouble(std::string("COMMIT answered ") + PQcmdStatus(r.get()), false);
      return false;
    }
  }
  if (PQstatus(conn) != CONNECTION_OK) {
    Trouble(pg::ErrorOf(conn), false);
    return false;
  }
  return true;
}

void PgStore::SendAgain() {
  // What was in flight goes first in line again, its fate unknown until
  // Resolve reads it back on a new connection (dropping this one rolls back
  // whatever had not committed).
  while (!in_flight_.empty()) {
    Group& g = in_flight_.back();
    g.unknown = true;
    g.op.reset();
    unsent_.push_front(std::move(g));
    in_flight_.pop_back();
  }
  between_results_ = false;
  writer_conn_.reset();
}

void PgStore::Trouble(const std::string& error, bool rejected) {
  SendAgain();
  if (rejected) {
    Status status = Error("the database refused a write: " + error);
    if (!failed_.exchange(true) && hooks_.on_write_failure) {
      hooks_.on_write_failure(status);
    }
    return;  // SendNext answers everything with the failure.
  }
  NoteUnwritable(error);
  Pause(backoff_);
  backoff_ = std::min(backoff_ * 2, options_.reconnect_last);
}

void PgStore::Complete(const Status& status) {
  std::deque<Group>& from = in_flight_.empty() ? unsent_ : in_flight_;
  Group group = std::move(from.front());
  from.pop_front();
  group.op.reset();
  if (status.ok() && !group.announced) GroupSent(group.batches);
  MutexLock lock(&mu_);
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < group.batches.size(); ++i) {
    if (queue_.front().batch) bytes += queue_.front().batch->bytes();
    queue_.pop_front();
  }
  taken_ -= group.batches.size();
  queued_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  std::vector<Done> done;
  for (Queued& q : group.batches) {
    if (!q.done) continue;
    if (q.direct) {
      q.done(q.refused.ok() ? status : q.refused);
    } else if (q.refused.ok()) {
      done.push_back(std::move(q.done));
    } else {
      std::vector<Done> one;
      one.push_back(std::move(q.done));
      RunDone(std::move(one), q.refused);
    }
  }
  RunDone(std::move(done), status);
  idle_cv_.SignalAll();
}

void PgStore::FinishAll(const Status& status) {
  while (!in_flight_.empty() || !unsent_.empty()) Complete(status);
}

void PgStore::GroupSent(std::vector<Queued>& group) {
  CacheWritten(group);
  // Alone on its database, `written` runs once the transaction is sent,
  // not once it committed: what the connection sends later commits after
  // it (if this group does not commit, the server skips what was sent
  // behind it, and the writer sends them all again in order), and a
  // payload of it is read from the queue until it commits (GetPayloads).
  // If it is refused, the store fails and the daemon stops: what `written`
  // published fires again after the restart. On a shared database it runs
  // at the COMMIT (SendNext says why).
  for (Queued& q : group) {
    if (q.written && q.refused.ok()) std::exchange(q.written, nullptr)();
  }
}

bool PgStore::Pause(std::chrono::milliseconds d) {
  MutexLock lock(&mu_);
  const auto until = std::chrono::steady_clock::now() + d;
  while (!closing_ && close_wait_.WaitUntil(&mu_, until)) {
  }
  return !closing_;
}

Status PgStore::QueryOnWriter(PGconn* conn, const char* sql, pg::Params& params,
                              int format, pg::Result* out) {
  Op op(*this);
  if (PQsendQueryParams(conn, sql, params.count(), nullptr, params.values(),
                        params.lengths(), params.formats(), format) != 1 ||
      PQpipelineSync(conn) != 1) {
    return Status::Unavailable(pg::ErrorOf(conn));
  }
  pg::Result r(PQgetResult(conn));
  pg::Result end(PQgetResult(conn));
  pg::Result sync(PQgetResult(conn));
  if (!r || PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    return Status::Unavailable(r ? pg::ErrorOf(r.get()) : pg::ErrorOf(conn));
  }
  *out = std::move(r);
  return Status::Ok();
}

Status PgStore::LastCommitted(PGconn* conn, std::int64_t* last) {
  pg::Params p;
  p.Bytes(options_.node);
  pg::Result r;
  if (Status s = QueryOnWriter(
          conn, "SELECT group_id FROM delayd_commits WHERE node = $1", p, 1,
          &r);
      !s.ok()) {
    return s;
  }
  *last = PQntuples(r.get()) == 1 ? pg::GetInt64(PQgetvalue(r.get(), 0, 0)) : 0;
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
      queue_.push_back(Queued{
          nullptr, nullptr, [done = std::move(done)](Status) { done(); }, {}});
      cv_.Signal();
      if (polling_) Wake();
      return;
    }
  }
  done();
}

void PgStore::Sync() {
  MutexLock lock(&mu_);
  while (!queue_.empty() || running_ != 0) idle_cv_.Wait(&mu_);
}

void PgStore::Close() {
  {
    MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
  }
  cv_.SignalAll();
  close_wait_.SignalAll();
  Wake();
  if (writer_.joinable()) writer_.join();
  ReleaseDatabase();
  writer_conn_.reset();
  MutexLock lock(&readers_mu_);
  readers_.clear();
}

}  // namespace delayd
