#include "server/store/postgres/pg_wire.h"

#include <cstring>

namespace delayd::pg {
namespace {

template <typename T>
void PutBE(std::string& out, T v) {
  using U = std::make_unsigned_t<T>;
  const U u = static_cast<U>(v);
  for (int i = sizeof(T) - 1; i >= 0; --i) {
    out.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
  }
}

template <typename T>
T GetBE(const char* p) {
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    u = static_cast<U>((u << 8) | static_cast<unsigned char>(p[i]));
  }
  return static_cast<T>(u);
}

std::string OneLine(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (char& c : s) {
    if (c == '\n') c = ' ';
  }
  return s;
}

}  // namespace

void PutInt16(std::string& out, std::int16_t v) { PutBE(out, v); }
void PutInt32(std::string& out, std::int32_t v) { PutBE(out, v); }
void PutInt64(std::string& out, std::int64_t v) { PutBE(out, v); }
std::int16_t GetInt16(const char* p) { return GetBE<std::int16_t>(p); }
std::int32_t GetInt32(const char* p) { return GetBE<std::int32_t>(p); }
std::int64_t GetInt64(const char* p) { return GetBE<std::int64_t>(p); }

void Array::Int16(std::int16_t v) {
  PutInt32(elements_, 2);
  PutInt16(elements_, v);
  ++count_;
}
void Array::Int32(std::int32_t v) {
  PutInt32(elements_, 4);
  PutInt32(elements_, v);
  ++count_;
}
void Array::Int64(std::int64_t v) {
  PutInt32(elements_, 8);
  PutInt64(elements_, v);
  ++count_;
}
void Array::Bool(bool v) {
  PutInt32(elements_, 1);
  elements_.push_back(v ? 1 : 0);
  ++count_;
}
void Array::Bytes(std::string_view v) {
  PutInt32(elements_, static_cast<std::int32_t>(v.size()));
  elements_.append(v);
  ++count_;
}
void Array::Null() {
  PutInt32(elements_, -1);
  has_null_ = true;
  ++count_;
}

std::string Array::Encode() const {
  // ndim, has-null flag, element type, then per dimension its length and
  // lower bound (an empty array has no dimensions).
  std::string out;
  out.reserve(20 + elements_.size());
  PutInt32(out, count_ == 0 ? 0 : 1);
  PutInt32(out, has_null_ ? 1 : 0);
  PutInt32(out, static_cast<std::int32_t>(element_));
  if (count_ != 0) {
    PutInt32(out, count_);
    PutInt32(out, 1);
  }
  out += elements_;
  return out;
}

void Params::Int16(std::int16_t v) {
  std::string s;
  PutInt16(s, v);
  Add(std::move(s));
}
void Params::Int32(std::int32_t v) {
  std::string s;
  PutInt32(s, v);
  Add(std::move(s));
}
void Params::Int64(std::int64_t v) {
  std::string s;
  PutInt64(s, v);
  Add(std::move(s));
}

const char* const* Params::values() {
  ptrs_.clear();
  for (std::size_t i = 0; i < values_.size(); ++i) {
    ptrs_.push_back(nulls_[i] ? nullptr : values_[i].data());
  }
  return ptrs_.data();
}
const int* Params::lengths() {
  lengths_.clear();
  for (const auto& v : values_) lengths_.push_back(static_cast<int>(v.size()));
  return lengths_.data();
}
const int* Params::formats() {
  formats_.assign(values_.size(), 1);
  return formats_.data();
}

void CopyReader::Feed(const char* data, int size) {
  buffer_.append(data, static_cast<std::size_t>(size));
}

void CopyReader::Compact() {
  buffer_.erase(0, at_);
  at_ = 0;
}

bool CopyReader::Next(std::vector<std::string_view>* fields,
                      std::vector<bool>* nulls) {
  static constexpr char kSignature[] = "PGCOPY\n\377\r\n";  // And a NUL.
  if (ended_ || malformed_) return false;
  const std::size_t left = buffer_.size() - at_;
  const char* p = buffer_.data() + at_;
  if (!header_done_) {
    if (left < 19) return false;
    if (std::memcmp(p, kSignature, 11) != 0) {
      malformed_ = true;
      return false;
    }
    const std::int32_t extension = GetInt32(p + 15);
    if (extension < 0 || left < 19 + static_cast<std::size_t>(extension)) {
      malformed_ = extension < 0;
      return false;
    }
    at_ += 19 + static_cast<std::size_t>(extension);
    header_done_ = true;
    return Next(fields, nulls);
  }
  if (left < 2) return false;
  const std::int16_t count = GetInt16(p);
  if (count == -1) {
    ended_ = true;
    at_ += 2;
    return false;
  }
  // The whole row must be there before any field is taken.
  std::size_t need = 2;
  for (std::int16_t i = 0; i < count; ++i) {
    if (left < need + 4) return false;
    const std::int32_t n = GetInt32(p + need);
    need += 4 + (n > 0 ? static_cast<std::size_t>(n) : 0);
  }
  if (left < need) return false;
  fields->clear();
  nulls->clear();
  std::size_t off = 2;
  for (std::int16_t i = 0; i < count; ++i) {
    const std::int32_t n = GetInt32(p + off);
    off += 4;
    nulls->push_back(n < 0);
    fields->emplace_back(p + off, n > 0 ? static_cast<std::size_t>(n) : 0);
    off += n > 0 ? static_cast<std::size_t>(n) : 0;
  }
  at_ += need;
  return true;
}

std::string ErrorOf(PGconn* conn) {
  return OneLine(conn ? PQerrorMessage(conn) : "no connection");
}

std::string ErrorOf(const PGresult* result) {
  if (result == nullptr) return "no result";
  std::string out = OneLine(PQresultErrorMessage(result));
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  if (state != nullptr) out += std::string(" (SQLSTATE ") + state + ")";
  return out;
}

Status RunParams(PGconn* conn, const char* sql, Params& p,
                 const std::string& what, Result* out) {
  out->reset(PQexecParams(conn, sql, p.count(), nullptr, p.values(),
                          p.lengths(), p.formats(), 1));
  const ExecStatusType s = PQresultStatus(out->get());
  if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) return Status::Ok();
  const std::string error = what + ": " + ErrorOf(out->get());
  return IsUnavailable(out->get()) || PQstatus(conn) != CONNECTION_OK
             ? Status::Unavailable(error)
             : Status::Internal(error);
}

bool IsUnavailable(const PGresult* result) {
  const char* state =
      result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  if (state == nullptr) return true;  // No answer at all: the connection.
  const std::string_view s(state);
  // 25006 read_only_sql_transaction; class 08 connection exceptions;
  // 57P01..57P03 admin shutdown, crash shutdown, cannot connect now;
  // 53300 too many connections; 57014 query_canceled (an operator's cancel,
  // a statement_timeout); 55P03 lock_not_available (a lock_timeout);
  // 40001 and 40P01, a serialization failure and a deadlock.
  return s == "25006" || s.starts_with("08") || s == "57P01" || s == "57P02" ||
         s == "57P03" || s == "53300" || s == "57014" || s == "55P03" ||
         s == "40001" || s == "40P01";
}

// A connection with delayd's defaults for what `conninfo` does not say: a
// bounded connect, TCP keepalives and a user timeout, so that a database
// that vanished without closing the connection is noticed in seconds, not
// when the kernel gives up.
Conn ConnectTo(const std::string& conninfo) {
  const char* keys[] = {"connect_timeout",
                        "keepalives_idle",
                        "keepalives_interval",
                        "keepalives_count",
                        "tcp_user_timeout",
                        "application_name",
                        "dbname",
                        nullptr};
  const char* values[] = {
      "5", "5", "2", "3", "10000", "delayd", conninfo.c_str(), nullptr};
  // (Given after the defaults, the connection string's own settings win.)
  return Conn(PQconnectdbParams(keys, values, /*expand_dbname=*/1));
}

}  // namespace delayd::pg
