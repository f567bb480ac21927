// libpq, as the PostgreSQL store uses it: owned connections and results,
// and parameters and values in PostgreSQL's binary format (integers
// big-endian; one-dimensional arrays as array_send writes them), so that a
// batch of thousands of rows goes as a few array parameters instead of
// text to be parsed.
// https://www.postgresql.org/docs/15/libpq-exec.html
#ifndef DELAYD_SERVER_STORE_POSTGRES_PG_WIRE_H_
#define DELAYD_SERVER_STORE_POSTGRES_PG_WIRE_H_

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"

namespace delayd::pg {

struct ConnCloser {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using Conn = std::unique_ptr<PGconn, ConnCloser>;

struct ResultClearer {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultClearer>;

// Type oids of the built-in types used (pg_type.dat).
enum Oid : ::Oid {
  kBool = 16,
  kBytea = 17,
  kInt8 = 20,
  kInt2 = 21,
  kInt4 = 23,
  kText = 25,
};

void PutInt16(std::string& out, std::int16_t v);
void PutInt32(std::string& out, std::int32_t v);
void PutInt64(std::string& out, std::int64_t v);
std::int16_t GetInt16(const char* p);
std::int32_t GetInt32(const char* p);
std::int64_t GetInt64(const char* p);

// A one-dimensional array parameter, built element by element.
class Array {
 public:
  explicit Array(Oid element) : element_(element) {}
  void Int16(std::int16_t v);
  void Int32(std::int32_t v);
  void Int64(std::int64_t v);
  void Bool(bool v);
  void Bytes(std::string_view v);  // text or bytea
  void Null();
  std::size_t size() const { return count_; }
  // The array in binary form.
  std::string Encode() const;

 private:
  Oid element_;
  std::int32_t count_ = 0;
  bool has_null_ = false;
  std::string elements_;  // Each: length (int32, -1 for null), then bytes.
};

// The parameters of one statement, all in binary form.
class Params {
 public:
  void Add(std::string value) {
    values_.push_back(std::move(value));
    nulls_.push_back(false);
  }
  void Int16(std::int16_t v);
  void Int32(std::int32_t v);
  void Int64(std::int64_t v);
  void Bytes(std::string_view v) { Add(std::string(v)); }
  void Null() {
    values_.emplace_back();
    nulls_.push_back(true);
  }
  int count() const { return static_cast<int>(values_.size()); }
  // Pointer arrays for libpq, valid while this lives unchanged.
  const char* const* values();
  const int* lengths();
  const int* formats();

 private:
  std::vector<std::string> values_;
  std::vector<bool> nulls_;
  std::vector<const char*> ptrs_;
  std::vector<int> lengths_;
  std::vector<int> formats_;
};

// The fields of a COPY ... TO STDOUT (FORMAT binary) stream, row by row.
class CopyReader {
 public:
  // `data` holds whole COPY data messages appended in order.
  // Returns false at the end of the stream or on malformed data (error()).
  bool Next(std::vector<std::string_view>* fields, std::vector<bool>* nulls);
  void Feed(const char* data, int size);
  // Drops what was consumed (call between feeds).
  void Compact();
  bool malformed() const { return malformed_; }
  bool ended() const { return ended_; }

 private:
  std::string buffer_;
  std::size_t at_ = 0;
  bool header_done_ = false;
  bool ended_ = false;
  bool malformed_ = false;
};

// A connection's last error, on one line.
std::string ErrorOf(PGconn* conn);
// A result's error, on one line, with its SQLSTATE.
std::string ErrorOf(const PGresult* result);
// Whether a result's SQLSTATE says the server cannot take this write now
// (read-only, shutting down, recovering, a cancel, a conflict) and it may be
// tried again, rather than that the statement is wrong.
bool IsUnavailable(const PGresult* result);

// Runs `sql` with `p` on `conn` (one statement, results in binary): OK with
// the result in *out if it ran, else why not, UNAVAILABLE when the database
// cannot take it now (IsUnavailable, or the connection broke).
Status RunParams(PGconn* conn, const char* sql, Params& p,
                 const std::string& what, Result* out);

// A connection with delayd's defaults for what `conninfo` does not say: a
// bounded connect, TCP keepalives and a user timeout.
Conn ConnectTo(const std::string& conninfo);

}  // namespace delayd::pg

#endif  // DELAYD_SERVER_STORE_POSTGRES_PG_WIRE_H_
