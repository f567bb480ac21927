// delayd on PostgreSQL, measured against a PostgreSQL server this bench
// starts (tests/common/postgres_server.h: 127.0.0.1, an OS-picked port,
// fsync on, stopped by PID), all in one run:
//   ingest   rows/s of delayed jobs (16 B key, 100 B payload, due in 1 h):
//            the ceiling (a raw libpq pipeline of the same rows into a
//            table of the same shape: 8 connections, 100 rows per
//            transaction), delayd's Batch (100 per call, 16 in flight) and
//            unary SetTimer (64 in flight), alternating rounds; then
//            pg-boss and Graphile Worker (tests/bench/node/pg_peers.js) on
//            databases of the same server, if their packages are installed
//            (npm ci in tests/bench/node);
//   firing   lateness at the worker, steady 2k timers/s, on PostgreSQL and
//            on RocksDB, alternating; and 100k timers due within 1 s;
//   restart  1 M pending on PostgreSQL: the time until delayd serves again,
//            and RSS per pending timer against the RocksDB store's;
//   burstfloor (only when named) the burst's row work alone: 100k rows
//            fired and deleted by delayd's statements, on the table as
//            before and after its "hot-fires" step, on 1 and 2
//            connections, each a range of partitions.
// (Clusters of nodes on one database: cluster_scale_bench.)
// Every daemon gets a fresh database (or data directory).
//
// Usage: pg_bench [--seconds N] [--rounds N] [--daemon PATH]
//                 [--only ingest|firing|burst|restart|burstfloor]
#include <libpq-fe.h>

#include <fstream>
#include <thread>

#include "tests/bench/bench_client.h"
#include "tests/bench/pg_common.h"
#include "tests/common/postgres_server.h"

namespace delayd::bench {
namespace {

using delayd::testing::DaemonProcess;
using delayd::testing::PostgresServer;

// PostgreSQL's binary int8 and one-dimensional arrays of it, bytea, int2.
void PutBE(std::string& out, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
}
struct Array {
  explicit Array(std::uint32_t oid) : oid(oid) {}
  void Add(std::string_view v) {
    PutBE(body, v.size(), 4);
    body.append(v);
    ++n;
  }
  std::string Encode() const {
    std::string out;
    PutBE(out, 1, 4);
    PutBE(out, 0, 4);
    PutBE(out, oid, 4);
    PutBE(out, n, 4);
    PutBE(out, 1, 4);
    return out + body;
  }
  std::uint32_t oid;
  std::uint32_t n = 0;
  std::string body;
};
std::string Int(std::uint64_t v, int bytes) {
  std::string s;
  PutBE(s, v, bytes);
  return s;
}

// Sends BEGIN, prepared statement `name` with the first `n` of `values` as
// binary parameters, and COMMIT, in pipeline mode (no sync).
void SendTransaction(PGconn* conn, const char* name, const std::string* values,
                     int n) {
  std::vector<const char*> ptrs(n);
  std::vector<int> lengths(n), formats(n, 1);
  for (int i = 0; i < n; ++i) {
    ptrs[i] = values[i].data();
    lengths[i] = static_cast<int>(values[i].size());
  }
  PQsendQueryParams(conn, "BEGIN", 0, nullptr, nullptr, nullptr, nullptr, 0);
  PQsendQueryPrepared(conn, name, n, ptrs.data(), lengths.data(),
                      formats.data(), 0);
  PQsendQueryParams(conn, "COMMIT", 0, nullptr, nullptr, nullptr, nullptr, 0);
}

// The ceiling: `conns` connections each pipelining transactions of
// `per_txn` rows (BEGIN, one INSERT of arrays, COMMIT; `depth` transactions
// sent before their answers are read) into `table`, for `d`. Rows/s.
double RawIngest(const std::string& url, const std::string& table, int conns,
                 int per_txn, std::chrono::milliseconds d) {
  std::atomic<std::uint64_t> rows{0};
  // Ids stay unique across rounds into the same table.
  static std::atomic<std::uint64_t> next_id{1};
  const auto until = Clock::now() + d;
  std::vector<std::thread> threads;
  const std::string payload = Bench::Payload(100);
  for (int c = 0; c < conns; ++c) {
    threads.emplace_back([&] {
      PGconn* conn = PQconnectdb(url.c_str());
      const std::string sql =
          "INSERT INTO " + table +
          " (id, part, ns, key, fire_time, version, payload) SELECT * FROM "
          "unnest($1::int8[], $2::int2[], $3::text[], $4::bytea[], "
          "$5::int8[], $6::int8[], $7::bytea[])";
      PQclear(PQprepare(conn, "ins", sql.c_str(), 0, nullptr));
      PQenterPipelineMode(conn);
      constexpr int kDepth = 4;
      while (Clock::now() < until) {
        for (int t = 0; t < kDepth; ++t) {
          Array id(20), part(21), ns(25), key(17), fire(20), version(20),
              data(17);
          const std::uint64_t base = next_id.fetch_add(per_txn);
          const std::uint64_t due =
              static_cast<std::uint64_t>(WallNanos() + 3'600'000'000'000);
          for (int i = 0; i < per_txn; ++i) {
            id.Add(Int(base + i, 8));
            part.Add(Int((base + i) % 64, 2));
            ns.Add("bench");
            key.Add(KeyOf(base + i, 16));
            fire.Add(Int(due, 8));
            version.Add(Int(base + i, 8));
            data.Add(payload);
          }
          std::string values[7] = {
              id.Encode(),   part.Encode(),    ns.Encode(),  key.Encode(),
              fire.Encode(), version.Encode(), data.Encode()};
          SendTransaction(conn, "ins", values, 7);
        }
        PQpipelineSync(conn);
        bool failed = false;
        for (int q = 0; q < kDepth * 3; ++q) {
          PGresult* r = PQgetResult(conn);
          if (PQresultStatus(r) != PGRES_COMMAND_OK && !failed) {
            std::printf("  raw: %s", PQresultErrorMessage(r));
            failed = true;
          }
          PQclear(r);
          PQclear(PQgetResult(conn));  // (Each query's results end in null.)
        }
        PGresult* sync = PQgetResult(conn);
        if (PQresultStatus(sync) != PGRES_PIPELINE_SYNC) {
          std::printf("  raw: %s\n", PQerrorMessage(conn));
          PQclear(sync);
          break;
        }
        PQclear(sync);
        if (failed) break;
        rows.fetch_add(static_cast<std::uint64_t>(kDepth * per_txn));
      }
      PQfinish(conn);
    });
  }
  const auto start = Clock::now();
  for (auto& t : threads) t.join();
  return static_cast<double>(rows.load()) /
         std::chrono::duration<double>(Clock::now() - start).count();
}

std::string g_daemon = DELAYD_BINARY;  // --daemon: another build's.

struct Daemon {
  // A delayd on a new database of `pg` (or, without it, on a RocksDB
  // directory under `scratch`).
  Daemon(PostgresServer* pg, const std::string& scratch) {
    std::vector<std::string> args;
    if (pg != nullptr) {
      url = pg->Url(pg->NewDatabase());
      args = {"--store", url, "--node-id", "bench"};
    } else {
      dir = scratch + "/rocks";
      std::filesystem::remove_all(dir);
      args = {"--data-dir", dir};
    }
    d = std::make_unique<DaemonProcess>(g_daemon, args, 120s);
  }
  ~Daemon() {
    if (d) d->Stop(SIGTERM, 60s);
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
  std::string url;
  std::string dir;
  std::unique_ptr<DaemonProcess> d;
};

// pg-boss and Graphile Worker (tests/bench/node/pg_peers.js `mode`), each
// on a new database of `pg`.
bool g_peers = true;  // --peers 0: delayd alone.

void Peers(PostgresServer& pg, const std::string& mode,
           std::chrono::milliseconds dur, int rounds) {
  if (!g_peers) return;
  const std::string node_dir =
      std::string(DELAYD_SOURCE_DIR) + "/tests/bench/node";
  if (!std::filesystem::exists(node_dir + "/node_modules/pg-boss")) {
    std::printf("peers: not run (npm ci --prefix %s)\n", node_dir.c_str());
    return;
  }
  const std::string cmd =
      "node " + node_dir + "/pg_peers.js " + mode + " " +
      pg.Url(pg.NewDatabase()) + " " + pg.Url(pg.NewDatabase()) + " " +
      std::to_string(dur.count() / 1000) + " " + std::to_string(rounds);
  std::fflush(stdout);
  if (std::system(cmd.c_str()) != 0) std::printf("peers: failed\n");
}

void Ingest(PostgresServer& pg, const std::string& scratch,
            std::chrono::milliseconds dur, int rounds) {
  const std::string raw_db = pg.NewDatabase();
  // The same table shape: delayd's own schema, made by its migration.
  {
    Daemon shape(&pg, scratch);
    pg.Exec(raw_db,
            "CREATE TABLE raw_jobs (id bigint PRIMARY KEY, part "
            "smallint NOT NULL, ns text NOT NULL, key bytea NOT NULL, "
            "fire_time bigint NOT NULL, version bigint NOT NULL, "
            "payload bytea NOT NULL, event_id bigint, fired_at bigint, "
            "reason smallint, attempts integer, dead boolean, error "
            "bytea, retry_at bigint); CREATE INDEX ON raw_jobs (part, "
            "fire_time) WHERE event_id IS NULL; CREATE UNIQUE INDEX ON "
            "raw_jobs (event_id) WHERE event_id IS NOT NULL");
  }
  std::vector<double> raw, batch, unary;
  for (int round = 0; round < rounds; ++round) {
    raw.push_back(RawIngest(pg.Url(raw_db), "raw_jobs", 8, 100, dur));
    Daemon d(&pg, scratch);
    if (!d.d->ok()) {
      std::printf("daemon did not start: %s\n", d.d->output().c_str());
      return;
    }
    Bench bench(d.d->address(), 4);
    batch.push_back(bench.BatchRate(16, 100, dur, "bench", 100));
    unary.push_back(bench.SetRate(64, dur, 100));
    std::printf("  round %d: raw %.0f rows/s, Batch %.0f, unary %.0f\n",
                round + 1, raw.back(), batch.back(), unary.back());
  }
  std::printf(
      "ingest (medians of %d alternating rounds): raw libpq pipeline %.0f "
      "rows/s; delayd Batch %.0f (%.2fx raw), unary SetTimer %.0f/s (%.2fx "
      "raw)\n",
      rounds, Median(raw), Median(batch), Median(batch) / Median(raw),
      Median(unary), Median(unary) / Median(raw));
  Peers(pg, "ingest", dur, rounds);
}

void Firing(PostgresServer& pg, const std::string& scratch,
            std::chrono::milliseconds dur, int rounds) {
  std::vector<double> p50[2], p99[2];
  for (int round = 0; round < rounds; ++round) {
    for (int m = 0; m < 2; ++m) {
      Daemon d(m == 0 ? &pg : nullptr, scratch);
      Bench bench(d.d->address(), 4);
      const Percentiles p = SteadyLateness(bench, dur);
      p50[m].push_back(p.p50);
      p99[m].push_back(p.p99);
    }
  }
  std::printf(
      "firing steady 2k/s (medians of %d alternating rounds): PostgreSQL "
      "p50 %.3f ms p99 %.3f ms; RocksDB p50 %.3f ms p99 %.3f ms; ratio p50 "
      "%.2fx p99 %.2fx\n",
      rounds, Median(p50[0]), Median(p99[0]), Median(p50[1]), Median(p99[1]),
      Median(p50[0]) / Median(p50[1]), Median(p99[0]) / Median(p99[1]));
  Peers(pg, "firing", dur, 1);
}

// 100k due within one second, on PostgreSQL and then, for scale, on
// RocksDB.
void Burst(PostgresServer& pg, const std::string& scratch) {
  for (int m = 0; m < 2; ++m) {
    Daemon d(m == 0 ? &pg : nullptr, scratch);
    Bench bench(d.d->address(), 4);
    constexpr std::uint64_t kBurst = 100'000;
    const std::int64_t t0 = WallNanos() + 20'000'000'000;
    auto late = bench.Lateness("burst", kBurst, 60s, [&] {
      bench.Fill(
          kBurst, "burst",
          [&](std::uint64_t i) {
            return t0 + static_cast<std::int64_t>(i * 1'000'000'000 / kBurst);
          },
          100);
    });
    const Percentiles p = Summarize(late);
    if (p.n < kBurst) {  // (The daemon failed or stopped: no figure.)
      std::printf(
          "burst 100k in 1 s on %s: INCOMPLETE, %zu of %llu "
          "delivered within the wait\n",
          m == 0 ? "PostgreSQL" : "RocksDB", p.n,
          static_cast<unsigned long long>(kBurst));
      continue;
    }
    std::printf(
        "burst 100k in 1 s on %s: n=%zu p50 %.2f ms p99 %.2f ms max %.2f "
        "ms; last delivery %.2f s after the window starts\n",
        m == 0 ? "PostgreSQL" : "RocksDB", p.n, p.p50, p.p99, p.max,
        static_cast<double>(bench.last_arrival() - t0) / 1e9);
  }
}

// The burst's row work without delayd: 100k rows of delayd's shape, then
// each fired (delayd's own `fire` statement over arrays) and deleted (its
// `remove`), in transactions of `group` rows, pipelined `depth` deep, on
// `conns` connections each owning a range of partitions (the ids ≡ c mod
// conns). Seconds from the first fire sent to the last delete committed
// (without `deletes`: to the last fire committed). `hot`: the table as
// delayd makes it (pg_schema.cc, "hot-fires"); otherwise as before that
// step (indexes naming event_id, pages filled).
double BurstFloor(PostgresServer& pg, int conns, int group, bool deletes,
                  bool hot) {
  constexpr std::uint64_t kRows = 100'000;
  const std::string db = pg.NewDatabase();
  pg.Exec(db,
          std::string("CREATE TABLE j (id bigint PRIMARY KEY, part smallint "
                      "NOT NULL, ns text NOT NULL, key bytea NOT NULL, "
                      "fire_time bigint NOT NULL, version bigint NOT NULL, "
                      "payload bytea NOT NULL, event_id bigint, fired_at "
                      "bigint, reason smallint, attempts integer, dead "
                      "boolean, error bytea, retry_at bigint)") +
              (hot ? " WITH (fillfactor = 45); CREATE INDEX ON j (part); "
                   : "; CREATE INDEX ON j (part, fire_time) WHERE event_id "
                     "IS NULL; CREATE UNIQUE INDEX ON j (event_id) WHERE "
                     "event_id IS NOT NULL; ") +
              "INSERT INTO j (id, part, "
              "ns, key, fire_time, version, payload) SELECT g, g % 64, "
              "'burst', "
              "convert_to(lpad(g::text, 16, '0'), 'UTF8'), 1, g, "
              "convert_to(repeat('x', 100), 'UTF8') FROM generate_series(1, "
              "100000) g");
  for (const char* sql : {"VACUUM ANALYZE j", "CHECKPOINT"}) {
    std::string error;
    pg.Exec(db, sql, &error);
    if (!error.empty()) std::printf("  burst floor: %s", error.c_str());
  }
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < conns; ++c) {
    threads.emplace_back([&, c] {
      PGconn* conn = PQconnectdb(pg.Url(db).c_str());
      PQclear(PQexec(conn, "SET plan_cache_mode = force_generic_plan"));
      PQclear(PQprepare(
          conn, "fire",
          "UPDATE j SET event_id = u.e, fired_at = u.at, reason = u.r, "
          "fire_time = u.f, version = u.v FROM unnest($1::int8[], "
          "$2::int8[], $3::int8[], $4::int2[], $5::int8[], $6::int8[]) AS "
          "u(id, e, at, r, f, v) WHERE j.id = u.id",
          0, nullptr));
      PQclear(PQprepare(conn, "remove",
                        "DELETE FROM j WHERE id = ANY($1::int8[])", 0,
                        nullptr));
      PQenterPipelineMode(conn);
      std::vector<std::uint64_t> mine;
      for (std::uint64_t id = 1 + c; id <= kRows; id += conns) {
        mine.push_back(id);
      }
      // Sends group `g`'s fire (or, `ack`, its delete) as a transaction.
      auto send = [&](std::size_t g, bool ack) {
        // (A delete takes the ids alone.)
        Array id(20), e(20), at(20), r(21), f(20), v(20);
        for (std::size_t i = g * group;
             i < std::min(mine.size(), (g + 1) * group); ++i) {
          id.Add(Int(mine[i], 8));
          if (ack) continue;
          e.Add(Int(mine[i], 8));
          at.Add(Int(2, 8));
          r.Add(Int(1, 2));
          f.Add(Int(1, 8));
          v.Add(Int(mine[i], 8));
        }
        if (ack) {
          const std::string ids = id.Encode();
          SendTransaction(conn, "remove", &ids, 1);
        } else {
          std::string values[6] = {id.Encode(), e.Encode(), at.Encode(),
                                   r.Encode(),  f.Encode(), v.Encode()};
          SendTransaction(conn, "fire", values, 6);
        }
        PQpipelineSync(conn);
      };
      auto read_one = [&] {
        for (int q = 0; q < 3; ++q) {
          PGresult* res = PQgetResult(conn);
          if (PQresultStatus(res) != PGRES_COMMAND_OK) {
            std::printf("  burst floor: %s", PQresultErrorMessage(res));
          }
          PQclear(res);
          PQclear(PQgetResult(conn));
        }
        PQclear(PQgetResult(conn));  // (The sync.)
      };
      // As in a burst: group g fired, and the group before it acknowledged,
      // with up to 4 transactions in flight.
      const std::size_t groups = (mine.size() + group - 1) / group;
      std::size_t sent = 0, read = 0;
      for (std::size_t g = 0; g <= groups; ++g) {
        for (int ack = 0; ack < 2; ++ack) {
          if (ack == 0 && g == groups) continue;
          if (ack == 1 && (g == 0 || !deletes)) continue;
          send(ack == 1 ? g - 1 : g, ack == 1);
          if (++sent - read > 4) {
            read_one();
            ++read;
          }
        }
      }
      for (; read < sent; ++read) read_one();
      PQfinish(conn);
    });
  }
  for (auto& t : threads) t.join();
  const double took =
      std::chrono::duration<double>(Clock::now() - start).count();
  const std::string left = pg.Exec(db, "SELECT count(*) FROM j");
  if (left != (deletes ? "0" : "100000")) {
    std::printf("  burst floor: %s rows left\n", left.c_str());
  }
  return took;
}

// BurstFloor on the table as before the "hot-fires" step (one connection)
// and as now (1 and 2 connections, and one without the deletes),
// alternating, `rounds` rounds; ratios against the first, per round.
void BurstFloors(PostgresServer& pg, int rounds) {
  struct Shape {
    int conns;
    bool deletes;
    bool hot;
  };
  constexpr int kN = 5;
  const Shape kShapes[kN] = {{1, true, false},
                             {1, true, true},
                             {2, true, true},
                             {1, false, false},
                             {1, false, true}};
  auto name = [&](int k) {
    return std::to_string(kShapes[k].conns) + " connection(s), " +
           (kShapes[k].hot ? "now" : "before") + ": 100k fired" +
           (kShapes[k].deletes ? " and deleted" : "");
  };
  std::vector<double> took[kN];
  for (int round = 0; round < rounds; ++round) {
    for (int k = 0; k < kN; ++k) {
      took[k].push_back(BurstFloor(pg, kShapes[k].conns, 1000,
                                   kShapes[k].deletes, kShapes[k].hot));
      std::printf("  round %d: %s in %.3f s (%.2fx the first)\n", round + 1,
                  name(k).c_str(), took[k].back(),
                  took[k].back() / took[0].back());
    }
  }
  for (int k = 0; k < kN; ++k) {
    std::printf("burst floor, %s in %.3f s (median of %d; %.2fx the first)\n",
                name(k).c_str(), Median(took[k]), rounds,
                Median(took[k]) / Median(took[0]));
  }
}

void Restart(PostgresServer& pg, const std::string& scratch) {
  constexpr std::uint64_t kTimers = 1'000'000;
  for (int m = 0; m < 2; ++m) {
    const bool postgres = m == 0;
    Daemon d(postgres ? &pg : nullptr, scratch);
    const long rss0 = RssBytes(d.d->pid());
    Bench bench(d.d->address(), 4);
    const std::int64_t later = WallNanos() + 3'600'000'000'000;
    bench.Fill(
        kTimers, "r", [&](std::uint64_t) { return later; }, 16);
    // RSS settles once the writes are done.
    std::this_thread::sleep_for(2s);
    const long rss = RssBytes(d.d->pid());
    std::printf(
        "%s: RSS per pending timer %.1f B (1 M, 16 B keys and "
        "payloads)\n",
        postgres ? "PostgreSQL" : "RocksDB",
        static_cast<double>(rss - rss0) / kTimers);
    d.d->Stop(SIGTERM, 60s);
    const auto start = Clock::now();
    std::vector<std::string> args =
        postgres
            ? std::vector<std::string>{"--store", d.url, "--node-id", "bench"}
            : std::vector<std::string>{"--data-dir", d.dir};
    DaemonProcess again(DELAYD_BINARY, args, 120s);
    const double took =
        std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("%s: restart with 1 M pending: serving in %.2f s\n",
                postgres ? "PostgreSQL" : "RocksDB", took);
    again.Stop(SIGTERM, 60s);
  }
}

}  // namespace

int Main(int argc, char** argv) {
  const int seconds = std::stoi(Arg(argc, argv, "--seconds", "5"));
  const int rounds = std::stoi(Arg(argc, argv, "--rounds", "3"));
  const std::string only = Arg(argc, argv, "--only", "");
  g_peers = Arg(argc, argv, "--peers", "1") != "0";
  g_daemon = Arg(argc, argv, "--daemon", DELAYD_BINARY);
  const std::string scratch =
      std::filesystem::temp_directory_path() / "delayd-pg-bench";
  std::filesystem::create_directories(scratch);
  auto pg = StartPostgres();
  if (!pg) return 1;
  std::printf("PostgreSQL on 127.0.0.1:%d\n", pg->port());
  const std::chrono::milliseconds dur(seconds * 1000);
  auto want = [&](const char* s) { return only.empty() || only == s; };
  if (want("ingest")) Ingest(*pg, scratch, dur, rounds);
  if (want("firing")) Firing(*pg, scratch, dur, rounds);
  if (want("firing") || want("burst")) Burst(*pg, scratch);
  if (want("restart")) Restart(*pg, scratch);
  if (only == "burstfloor") BurstFloors(*pg, rounds);
  return 0;
}

}  // namespace delayd::bench

int main(int argc, char** argv) { return delayd::bench::Main(argc, argv); }
