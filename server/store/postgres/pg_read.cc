// PgStore's reads: payloads by id through views of the queue, the cache of
// recent payloads, the pool of read connections, and COPY for recovery
// (pg_store.h, "Reads").
#include <map>
#include <optional>

#include "server/store/postgres/pg_store.h"

namespace delayd {

// What a view keeps: the batches queued when it was taken.
class PgStore::PgView final : public Store::View {
 public:
  std::vector<std::shared_ptr<const Batch>> queued;
};

PgStore::Reader::~Reader() {
  if (store_ != nullptr) store_->ReturnReader(std::move(conn_));
}

Status PgStore::TakeReader(Reader* out) {
  out->store_ = this;
  {
    MutexLock lock(&readers_mu_);
    while (readers_.empty() && readers_out_ >= options_.readers) {
      reader_free_.Wait(&readers_mu_);
    }
    ++readers_out_;
    if (!readers_.empty()) {
      out->conn_ = std::move(readers_.back());
      readers_.pop_back();
      return Status::Ok();
    }
  }
  std::string why;
  return Connect(&out->conn_, /*writer=*/false, &why);
}

void PgStore::ReturnReader(pg::Conn conn) {
  MutexLock lock(&readers_mu_);
  --readers_out_;
  // (Kept only if it is idle and well: one left in a COPY or a failed
  // transaction is closed.)
  if (conn && PQstatus(conn.get()) == CONNECTION_OK &&
      PQtransactionStatus(conn.get()) == PQTRANS_IDLE) {
    readers_.push_back(std::move(conn));
  }
  reader_free_.Signal();
}

Status PgStore::OnReader(const std::function<void(PGconn*)>& query) {
  // A pooled connection may have died since it was last used (the database
  // restarted, or failed over): then once more, on a new one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    Reader reader;
    if (Status s = TakeReader(&reader); !s.ok()) return s;
    Op op(*this);
    query(reader.conn());
    if (PQstatus(reader.conn()) == CONNECTION_OK) return Status::Ok();
  }
  return Status::Ok();  // (The query's result says what went wrong.)
}

Status PgStore::Query(const char* sql, int format, pg::Result* out) {
  return OnReader([&](PGconn* conn) {
    out->reset(
        PQexecParams(conn, sql, 0, nullptr, nullptr, nullptr, nullptr, format));
  });
}

Status PgStore::ReadRows(
    std::span<const std::uint64_t> ids,
    std::unordered_map<std::uint64_t, std::string>* found) {
  if (options_.before_payload_read) options_.before_payload_read();
  pg::Array array(pg::kInt8);
  for (std::uint64_t id : ids) array.Int64(static_cast<std::int64_t>(id));
  pg::Params p;
  p.Add(array.Encode());
  pg::Result r;
  if (Status s = OnReader([&](PGconn* conn) {
        r.reset(PQexecParams(conn,
                             "SELECT id, payload FROM delayd_jobs WHERE id = "
                             "ANY($1::int8[])",
                             1, nullptr, p.values(), p.lengths(), p.formats(),
                             1));
      });
      !s.ok()) {
    return s;
  }
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    return ReadError(nullptr, r.get(),
                     "reading payloads: " + pg::ErrorOf(r.get()));
  }
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    found->emplace(
        static_cast<std::uint64_t>(pg::GetInt64(PQgetvalue(r.get(), i, 0))),
        std::string(PQgetvalue(r.get(), i, 1), PQgetlength(r.get(), i, 1)));
  }
  return Status::Ok();
}

Status PgStore::Copy(
    const std::string& query, int fields,
    const std::function<void(const std::vector<std::string_view>&,
                             const std::vector<bool>&)>& row) {
  Reader reader_conn;
  if (Status s = TakeReader(&reader_conn); !s.ok()) return s;
  PGconn* conn = reader_conn.conn();
  Op op(*this);
  pg::Result start(PQexec(conn, query.c_str()));
  if (PQresultStatus(start.get()) != PGRES_COPY_OUT) {
    return ReadError(conn, start.get(), "reading: " + pg::ErrorOf(start.get()));
  }
  pg::CopyReader reader;
  std::vector<std::string_view> values;
  std::vector<bool> nulls;
  for (;;) {
    char* data = nullptr;
    const int n = PQgetCopyData(conn, &data, /*async=*/0);
    if (n == -1) break;  // The end of the copy.
    if (n < 0) return ReadError(conn, nullptr, "reading: " + pg::ErrorOf(conn));
    reader.Feed(data, n);
    PQfreemem(data);
    while (reader.Next(&values, &nulls)) {
      if (static_cast<int>(values.size()) != fields) {
        return Error("reading: a row of " + std::to_string(values.size()) +
                     " fields, not " + std::to_string(fields));
      }
      row(values, nulls);
    }
    if (reader.malformed()) return Error("reading: malformed COPY data");
    reader.Compact();
  }
  pg::Result end(PQgetResult(conn));
  if (PQresultStatus(end.get()) != PGRES_COMMAND_OK) {
    return ReadError(conn, end.get(), "reading: " + pg::ErrorOf(end.get()));
  }
  while (pg::Result more{PQgetResult(conn)}) {
  }
  return Status::Ok();
}

void PgStore::CacheWritten(const std::vector<Queued>& group) {
  MutexLock lock(&cache_mu_);
  for (const Queued& q : group) {
    if (!q.batch || !q.refused.ok()) continue;
    Batch::Reader reader(*q.batch);
    Batch::Change c;
    while (reader.Next(&c)) {
      if (c.kind == Batch::Kind::kAddTimer) {
        if (c.data.size() > options_.cache_bytes / 16) continue;
        auto [it, added] =
            cache_.emplace(c.timer.payload_id, std::string(c.data));
        if (!added) continue;
        cache_order_.push_back(c.timer.payload_id);
        cache_size_ += c.data.size() + 64;
      } else if (c.kind == Batch::Kind::kRemoveTimer ||
                 c.kind == Batch::Kind::kRemoveEvent) {
        auto it = cache_.find(c.payload_id);
        if (it == cache_.end()) continue;
        cache_size_ -= it->second.size() + 64;
        cache_.erase(it);
      }
    }
  }
  // Oldest first, past the bound (ids removed above are skipped).
  while (cache_size_ > options_.cache_bytes && !cache_order_.empty()) {
    auto it = cache_.find(cache_order_.front());
    cache_order_.pop_front();
    if (it == cache_.end()) continue;
    cache_size_ -= it->second.size() + 64;
    cache_.erase(it);
  }
  // The order's ids of removed payloads: dropped once they outnumber the
  // cached ones, so the deque stays bounded too.
  if (cache_order_.size() > 2 * cache_.size() + 1024) {
    std::deque<std::uint64_t> kept;
    for (std::uint64_t id : cache_order_) {
      if (cache_.contains(id)) kept.push_back(id);
    }
    cache_order_.swap(kept);
  }
}

bool PgStore::ReadCached(std::span<const std::uint64_t> ids,
                         std::vector<std::string>* payloads,
                         std::vector<bool>* readable) {
  if (ids.empty()) return false;
  MutexLock lock(&cache_mu_);
  for (std::uint64_t id : ids) {
    if (!cache_.contains(id)) return false;
  }
  payloads->clear();
  for (std::uint64_t id : ids) payloads->push_back(cache_.at(id));
  readable->assign(ids.size(), true);
  return true;
}

std::shared_ptr<const Store::View> PgStore::NewView() {
  auto view = std::make_shared<PgView>();
  MutexLock lock(&mu_);
  view->queued.reserve(queue_.size());
  for (const Queued& q : queue_) {
    if (q.batch) view->queued.push_back(q.batch);
  }
  return view;
}

Status PgStore::GetPayloads(std::span<const std::uint64_t> ids,
                            std::vector<std::string>* payloads,
                            std::vector<bool>* readable) {
  payloads->assign(ids.size(), std::string());
  readable->assign(ids.size(), false);
  if (ids.empty()) return Status::Ok();
  std::unordered_map<std::uint64_t, std::string> found;
  if (Status s = ReadRows(ids, &found); !s.ok()) return s;
  std::vector<std::uint64_t> missing;
  for (std::uint64_t id : ids) {
    if (!found.contains(id)) missing.push_back(id);
  }
  if (!missing.empty()) {
    // Alone on a database, events are published once their firing is
    // sent, before it commits (GroupSent): a payload written in a group not yet
    // committed is in the queue. The queue is seen before the database is read
    // again, so a batch that commits in between is read there.
    const auto view = NewView();
    if (Status s = ReadRows(missing, &found); !s.ok()) return s;
    const auto queued = PayloadsIn(static_cast<const PgView&>(*view).queued);
    for (std::uint64_t id : missing) {
      auto q = queued.find(id);
      if (!found.contains(id) && q != queued.end() && q->second) {
        found.emplace(id, *q->second);
      }
    }
  }
  Status first;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto it = found.find(ids[i]);
    if (it == found.end()) {
      if (first.ok()) {
        first = Error("payload " + std::to_string(ids[i]) + " is missing");
      }
      continue;
    }
    (*payloads)[i] = std::move(it->second);
    (*readable)[i] = true;
  }
  return first;
}

Status PgStore::GetPayloads(std::span<const std::uint64_t> ids,
                            const View& view,
                            std::vector<std::string>* payloads,
                            std::vector<bool>* readable,
                            std::vector<bool>* gone) {
  payloads->assign(ids.size(), std::string());
  readable->assign(ids.size(), false);
  gone->assign(ids.size(), false);
  if (ids.empty()) return Status::Ok();
  // What the queued batches said of each id when the view was taken.
  const auto queued = PayloadsIn(static_cast<const PgView&>(view).queued);
  std::vector<std::uint64_t> from_db;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto q = queued.find(ids[i]);
    if (q == queued.end()) {
      from_db.push_back(ids[i]);
    } else if (q->second) {
      (*payloads)[i] = *q->second;
      (*readable)[i] = true;
    } else {
      (*gone)[i] = true;
    }
  }
  if (from_db.empty()) return Status::Ok();
  std::unordered_map<std::uint64_t, std::string> found;
  if (Status s = ReadRows(from_db, &found); !s.ok()) return s;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if ((*readable)[i] || (*gone)[i]) continue;
    auto it = found.find(ids[i]);
    if (it == found.end()) {
      // Not in the queue then, not in the database now: deleted since (a
      // transaction's rows are all there or none is).
      (*gone)[i] = true;
      continue;
    }
    (*payloads)[i] = std::move(it->second);
    (*readable)[i] = true;
  }
  return Status::Ok();
}

}  // namespace delayd
