// Crash safety: the real delayd under a mixed load is killed with SIGKILL at
// random moments and started again on the same store (a RocksDB data
// directory, or a PostgreSQL database of a server the test starts), several
// rounds. A client records what delayd acknowledged; a worker records every
// event it receives. At the end:
//   - every timer version acknowledged and not superseded (replaced, moved
//     or removed by an acknowledged operation) fired;
//   - no superseded version ever fired;
//   - nothing fired before its fire time.
// DELAYD_CRASH_ROUNDS (default 3) and DELAYD_CRASH_FSYNC (default always)
// make a longer run by hand; DELAYD_CRASH_SEED picks the random sequence.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "delayd/v1/delayd.grpc.pb.h"
#include "tests/common/daemon_process.h"
#include "tests/common/postgres_server.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

using TimerId = std::pair<std::string, std::uint64_t>;  // key, version

int EnvInt(const char* name, int fallback) {
  const char* v = getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Where the daemon currently listens; empty while it is down.
class Endpoint {
 public:
  void Set(std::string address) {
    std::lock_guard lock(mu_);
    address_ = std::move(address);
    ++generation_;
    cv_.notify_all();
  }
  // Waits (bounded) for the daemon to be up; returns its address and
  // generation, or an empty address if stopping or timed out.
  std::pair<std::string, int> WaitUp(const std::atomic<bool>& stop) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(20),
                 [&] { return !address_.empty() || stop.load(); });
    return {address_, generation_};
  }
  // Waits (bounded) until the daemon is up under a generation other than
  // `generation`.
  void WaitNewer(int generation, const std::atomic<bool>& stop) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(20), [&] {
      return (generation_ != generation && !address_.empty()) || stop.load();
    });
  }
  void Wake() { cv_.notify_all(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string address_;
  int generation_ = 0;
};

struct Received {
  std::uint64_t id;
  std::string key;
  std::uint64_t version;
  WallNanos fire_time;
  WallNanos fired_at;
  WallNanos received_at;
};

// The store: RocksDB, PostgreSQL, or RocksDB with --fixed-event-ids (where
// every event's id is its version, whoever delivers it).
enum class CrashStore { kRocksDB, kPostgreSQL, kRocksDBFixedIds };

class Crash : public ::testing::TestWithParam<CrashStore> {};

TEST_P(Crash, KilledAtRandomMomentsLosesNothingAcknowledged) {
  const int rounds = EnvInt("DELAYD_CRASH_ROUNDS", 3);
  const char* fsync_env = getenv("DELAYD_CRASH_FSYNC");
  const std::string fsync = fsync_env && *fsync_env ? fsync_env : "always";
  const unsigned seed = static_cast<unsigned>(EnvInt("DELAYD_CRASH_SEED", 7));
  std::mt19937_64 rng(seed);
  TempDir dir;
  std::vector<std::string> args = {"--data-dir", dir / "data", "--fsync",
                                   fsync};
  std::unique_ptr<PostgresServer> pg;
  if (GetParam() == CrashStore::kRocksDBFixedIds) {
    args.push_back("--fixed-event-ids");
  }
  if (GetParam() == CrashStore::kPostgreSQL) {
    std::string error;
    pg = PostgresServer::Start(&error);
    ASSERT_NE(pg, nullptr) << error;
    args = {"--store", pg->Url(pg->NewDatabase()), "--node-id", "crash"};
  }
  Endpoint endpoint;
  std::atomic<bool> stop_client{false};
  std::atomic<bool> stop_worker{false};
  std::atomic<std::uint64_t> ops_done{0};

  // --- What the client learned (client thread only, read after join). ---
  std::map<TimerId, WallNanos> must_fire;  // -> acknowledged fire time
  std::set<TimerId> must_not_fire;
  std::map<TimerId, WallNanos> acked_fire_time;
  std::uint64_t acked_ops = 0, uncertain_ops = 0;
  // Far timers (namespace, key) -> the version last acknowledged pending
  // (nullopt: acknowledged removed); uncertain ones are left out.
  std::map<std::pair<std::string, std::string>, std::optional<std::uint64_t>>
      far;

  std::thread client([&] {
    std::mt19937_64 r(seed * 31 + 1);
    constexpr int kKeys = 48;
    struct KeyState {
      std::optional<std::pair<std::uint64_t, WallNanos>> pending;
      bool certain = true;
    };
    std::vector<KeyState> keys(kKeys);
    std::unique_ptr<v1::Delayd::Stub> stub;
    int generation = -1;
    while (!stop_client) {
      auto [address, gen] = endpoint.WaitUp(stop_client);
      if (stop_client) break;
      if (address.empty()) continue;
      if (gen != generation) {
        stub = v1::Delayd::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
        generation = gen;
      }
      if (r() % 4 == 0) {
        // A far timer in a namespace that comes and goes.
        const int f = static_cast<int>(r() % 8);
        const std::pair<std::string, std::string> id{
            "gone-" + std::to_string(f / 2), "f" + std::to_string(f)};
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
        grpc::Status s;
        std::optional<std::uint64_t> now;
        if (r() % 2 == 0) {
          v1::SetTimerRequest req;
          req.set_namespace_(id.first);
          req.set_key(id.second);
          req.set_payload(id.first + "/" + id.second);
          *req.mutable_delay() = Millis(3'600'000);
          v1::SetTimerResponse resp;
          s = stub->SetTimer(&ctx, req, &resp);
          now = resp.version();
        } else {
          v1::RemoveTimerRequest req;
          req.set_namespace_(id.first);
          req.set_key(id.second);
          v1::RemoveTimerResponse resp;
          s = stub->RemoveTimer(&ctx, req, &resp);
        }
        if (s.ok() || s.error_code() == grpc::StatusCode::NOT_FOUND) {
          far[id] = s.ok() ? now : std::nullopt;
          ++acked_ops;
          ops_done.fetch_add(1);
        } else {
          far.erase(id);  // Uncertain from now on.
          ++uncertain_ops;
        }
        continue;
      }
      const int k = static_cast<int>(r() % kKeys);
      const std::string key = "k" + std::to_string(k);
      KeyState& ks = keys[k];
      const int dice = static_cast<int>(r() % 4);
      const std::int64_t delay_ms = static_cast<std::int64_t>(r() % 700);
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
      grpc::Status s;
      // The timer version an acknowledged operation supersedes.
      auto supersede = [&] {
        if (ks.certain && ks.pending) {
          const TimerId old{key, ks.pending->first};
          must_not_fire.insert(old);
          must_fire.erase(old);
        }
      };
      auto now_pending = [&](std::uint64_t version, WallNanos at) {
        ks.pending = {version, at};
        ks.certain = true;
        must_fire[{key, version}] = at;
        acked_fire_time[{key, version}] = at;
      };
      if (dice <= 1) {
        v1::SetTimerRequest req;
        req.set_namespace_("crash");
        req.set_key(key);
        req.set_payload("p-" + key);
        *req.mutable_delay() = Millis(delay_ms);
        v1::SetTimerResponse resp;
        s = stub->SetTimer(&ctx, req, &resp);
        if (s.ok()) {
          if (resp.replaced()) supersede();
          now_pending(resp.version(), ToNanos(resp.fire_time()));
        }
      } else if (dice == 2) {
        v1::MoveTimerRequest req;
        req.set_namespace_("crash");
        req.set_key(key);
        *req.mutable_delay() = Millis(delay_ms);
        v1::MoveTimerResponse resp;
        s = stub->MoveTimer(&ctx, req, &resp);
        if (s.ok()) {
          supersede();
          now_pending(resp.version(), ToNanos(resp.fire_time()));
        }
      } else {
        v1::RemoveTimerRequest req;
        req.set_namespace_("crash");
        req.set_key(key);
        v1::RemoveTimerResponse resp;
        s = stub->RemoveTimer(&ctx, req, &resp);
        if (s.ok()) {
          // The response names the removed version exactly.
          const TimerId removed{key, resp.version()};
          must_not_fire.insert(removed);
          must_fire.erase(removed);
          ks.pending.reset();
          ks.certain = true;
        }
      }
      if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
        ks.pending.reset();  // Fired or removed: nothing pending now.
        ks.certain = true;
      } else if (!s.ok()) {
        // No answer: the operation may or may not have been applied, so
        // the pending version may have been superseded.
        ++uncertain_ops;
        if (ks.pending) must_fire.erase({key, ks.pending->first});
        ks.pending.reset();
        ks.certain = false;
        continue;
      }
      ++acked_ops;
      ops_done.fetch_add(1);
    }
  });

  std::mutex received_mu;
  std::vector<Received> received;
  std::thread worker([&] {
    while (!stop_worker) {
      auto [address, gen] = endpoint.WaitUp(stop_worker);
      if (stop_worker) break;
      if (address.empty()) continue;
      auto stub = v1::Delayd::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
      grpc::ClientContext ctx;
      auto reader = stub->Subscribe(&ctx, TestStream::Worker("crash", 1000));
      v1::SubscribeResponse msg;
      while (!stop_worker && reader->Read(&msg)) {
        if (msg.events_size() == 0) continue;
        v1::AckRequest ack;
        ack.set_namespace_("crash");
        {
          std::lock_guard lock(received_mu);
          for (const auto& e : msg.events()) {
            received.push_back({e.id(), e.key(), e.version(),
                                ToNanos(e.fire_time()), ToNanos(e.fired_at()),
                                WallNow()});
            ack.add_event_ids(e.id());
          }
        }
        v1::AckResponse resp;
        grpc::ClientContext ack_ctx;
        ack_ctx.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(5));
        stub->Ack(&ack_ctx, ack, &resp);
      }
      ctx.TryCancel();
      reader->Finish();
      // The stream ends when the daemon is killed: wait for the next one.
      endpoint.WaitNewer(gen, stop_worker);
    }
  });

  // Whatever happens below, the threads are stopped and joined.
  struct Joiner {
    std::function<void()> stop;
    ~Joiner() { stop(); }
  } joiner{[&] {
    stop_client = true;
    stop_worker = true;
    endpoint.Wake();
    if (client.joinable()) client.join();
    if (worker.joinable()) worker.join();
  }};

  // Rounds: start, let the client run a random number of operations, kill.
  for (int round = 0; round < rounds; ++round) {
    DaemonProcess d(DELAYD_BINARY, args, std::chrono::seconds(30));
    ASSERT_TRUE(d.ok()) << d.output();
    endpoint.Set(d.address());
    const std::uint64_t target = ops_done.load() + 50 + rng() % 250;
    // Generous: under ThreadSanitizer on a loaded machine an operation can
    // take tens of milliseconds.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (ops_done.load() < target &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    if (ops_done.load() < target) {
      const auto code = d.Stop(SIGKILL, std::chrono::seconds(10));
      FAIL() << "the client made no progress; delayd (exit "
             << (code ? *code : -1) << ") printed:\n"
             << d.output();
    }
    // Killed while the client is in the middle of an operation.
    ASSERT_EQ(d.Stop(SIGKILL, std::chrono::seconds(10)), 128 + SIGKILL)
        << d.output();
    endpoint.Set("");
  }

  // A last start: the client stops, and every timer it was promised fires.
  DaemonProcess d(DELAYD_BINARY, args, std::chrono::seconds(30));
  ASSERT_TRUE(d.ok()) << d.output();
  endpoint.Set(d.address());
  {
    // Some operations on the last start make far timers certain again
    // (calls that failed around the kill left them uncertain).
    const std::uint64_t target = ops_done.load() + 100;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (ops_done.load() < target &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
  }
  stop_client = true;
  endpoint.Wake();
  client.join();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto missing = [&] {
    std::lock_guard lock(received_mu);
    std::set<TimerId> got;
    for (const auto& e : received) got.insert({e.key, e.version});
    std::size_t n = 0;
    for (const auto& [id, at] : must_fire) n += got.count(id) ? 0 : 1;
    return n;
  };
  while (missing() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  // Far timers, each under its own namespace.
  {
    auto stub = v1::Delayd::NewStub(
        grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
    for (const auto& [id, version] : far) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
      v1::GetTimerRequest get;
      get.set_namespace_(id.first);
      get.set_key(id.second);
      v1::Timer t;
      const grpc::Status s = stub->GetTimer(&ctx, get, &t);
      if (!version) {
        EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND)
            << id.first << "/" << id.second << " was removed";
        continue;
      }
      ASSERT_TRUE(s.ok()) << id.first << "/" << id.second << ": "
                          << s.error_message();
      EXPECT_EQ(t.namespace_(), id.first);
      EXPECT_EQ(t.payload(), id.first + "/" + id.second);
      EXPECT_EQ(t.version(), *version);
    }
    EXPECT_GT(far.size(), 0u);
  }
  stop_worker = true;
  endpoint.Wake();
  EXPECT_EQ(d.Stop(SIGTERM, std::chrono::seconds(10)), 0) << d.output();
  endpoint.Set("");
  worker.join();

  std::lock_guard lock(received_mu);
  std::set<TimerId> got;
  for (const auto& e : received) {
    got.insert({e.key, e.version});
    EXPECT_EQ(must_not_fire.count({e.key, e.version}), 0u)
        << e.key << " v" << e.version << " fired after it was superseded";
    EXPECT_GE(e.fired_at, e.fire_time) << e.key << " v" << e.version;
    if (GetParam() == CrashStore::kRocksDBFixedIds) {
      EXPECT_EQ(e.id, e.version) << e.key;
    }
    EXPECT_GE(e.received_at, e.fire_time) << e.key << " v" << e.version;
    auto acked = acked_fire_time.find({e.key, e.version});
    if (acked != acked_fire_time.end()) {
      EXPECT_EQ(e.fire_time, acked->second) << e.key << " v" << e.version;
    }
  }
  std::size_t lost = 0;
  for (const auto& [id, at] : must_fire) {
    if (!got.count(id)) {
      ++lost;
      ADD_FAILURE() << id.first << " v" << id.second
                    << " was acknowledged and never fired";
    }
  }
  EXPECT_EQ(lost, 0u);
  EXPECT_GT(acked_ops, 0u);
  EXPECT_GT(must_fire.size(), 0u);
  EXPECT_GT(must_not_fire.size(), 0u);
  std::printf(
      "%d kills; %llu operations acknowledged, %llu unanswered; %zu "
      "versions had to fire, %zu must never fire; %zu events received\n",
      rounds, static_cast<unsigned long long>(acked_ops),
      static_cast<unsigned long long>(uncertain_ops), must_fire.size(),
      must_not_fire.size(), received.size());
}

INSTANTIATE_TEST_SUITE_P(Stores, Crash,
                         ::testing::Values(CrashStore::kRocksDB,
                                           CrashStore::kPostgreSQL,
                                           CrashStore::kRocksDBFixedIds),
                         [](const auto& info) -> std::string {
                           switch (info.param) {
                             case CrashStore::kPostgreSQL:
                               return "PostgreSQL";
                             case CrashStore::kRocksDBFixedIds:
                               return "RocksDBFixedEventIds";
                             default:
                               return "RocksDB";
                           }
                         });

}  // namespace
}  // namespace delayd::testing
