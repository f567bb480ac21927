// A mixed load on a cluster that records what it was told, workers that
// record what they got, and the check of one against the other: every
// acknowledged timer fired once, on time or later, with its last
// acknowledged fire time; no removed timer fired; duplicates bounded by
// what can be in flight.
//
// An operation that failed (UNAVAILABLE, a deadline) may or may not have
// taken effect: its key is marked uncertain and only checked for not
// firing early.
#ifndef DELAYD_TESTS_E2E_FAULT_LOAD_H_
#define DELAYD_TESTS_E2E_FAULT_LOAD_H_

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/cluster_harness.h"

namespace delayd::testing {

inline constexpr const char* kFaultNamespaces[] = {"jobs", "mail"};

// The addresses of the nodes running now, by name; the load and the
// workers call whichever run.
class NodeBook {
 public:
  void Up(const std::string& name, const std::string& address) {
    std::lock_guard lock(mu_);
    up_[name] = address;
  }
  void Down(const std::string& name) {
    std::lock_guard lock(mu_);
    up_.erase(name);
  }
  std::vector<std::string> Addresses() {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (const auto& [name, address] : up_) out.push_back(address);
    return out;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> up_;
};

// Stubs by address, made once.
class Stubs {
 public:
  v1::Delayd::Stub& To(const std::string& address) {
    auto& stub = stubs_[address];
    if (stub == nullptr) {
      stub = v1::Delayd::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    }
    return *stub;
  }

 private:
  std::map<std::string, std::unique_ptr<v1::Delayd::Stub>> stubs_;
};

// What the clients were told of one key.
struct Told {
  std::string ns;
  WallNanos fire = 0;  // The last acknowledged fire time.
  bool removed = false;
  bool uncertain = false;
};

// One delivery to a worker.
struct Got {
  WallNanos received = 0, fire = 0;
  std::uint64_t id = 0;
};

// Sets new timers (due in 0.3–3 s), moves and removes set ones, through
// the running nodes in turn, on one thread, until Stop.
class FaultLoad {
 public:
  explicit FaultLoad(NodeBook& nodes) : nodes_(nodes) {
    thread_ = std::thread([this] { Run(); });
  }
  ~FaultLoad() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::size_t size() {
    std::lock_guard lock(mu_);
    return told_.size();
  }
  std::map<std::string, Told> told() {
    std::lock_guard lock(mu_);
    return told_;
  }
  // The errors that made keys uncertain, by message, counted.
  std::map<std::string, int> errors() {
    std::lock_guard lock(mu_);
    return errors_;
  }

 private:
  template <typename Req, typename Resp>
  using Method = grpc::Status (v1::Delayd::Stub::*)(grpc::ClientContext*,
                                                    const Req&, Resp*);

  void Run();
  // Sends `req` on `key` through the running nodes in turn until it answers
  // other than UNAVAILABLE or DEADLINE_EXCEEDED (or for 10 s), and records
  // the outcome: `applied` if it succeeded, else the key may be uncertain
  // (see the file's comment). Returns the last answer.
  template <typename Req, typename Resp>
  grpc::Status Send(const std::string& key, const Req& req,
                    Method<Req, Resp> method,
                    std::function<void(Told&)> applied);
  // The outcome `s` of the last attempt of a call on `key`; `tried_before`:
  // an earlier attempt failed so (it may have taken effect).
  void Record(const std::string& key, const grpc::Status& s, bool tried_before,
              std::function<void(Told&)> applied);

  NodeBook& nodes_;
  Stubs stubs_;             // Only on thread_.
  std::uint64_t turn_ = 0;  // Only on thread_: the node called next.
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::map<std::string, Told> told_;
  std::map<std::string, int> errors_;
};

inline void FaultLoad::Record(const std::string& key, const grpc::Status& s,
                              bool tried_before,
                              std::function<void(Told&)> applied) {
  std::lock_guard lock(mu_);
  Told& t = told_[key];
  if (s.ok()) {
    applied(t);
    t.uncertain = false;  // (Whatever an earlier attempt did, this holds.)
    return;
  }
  // NOT_FOUND: it had fired or was removed, unless an earlier attempt may
  // have moved or removed it.
  if (s.error_code() != grpc::StatusCode::NOT_FOUND || tried_before) {
    t.uncertain = true;
    ++errors_[s.error_message().substr(0, 60)];
  }
}

template <typename Req, typename Resp>
grpc::Status FaultLoad::Send(const std::string& key, const Req& req,
                             Method<Req, Resp> method,
                             std::function<void(Told&)> applied) {
  const auto end = std::chrono::steady_clock::now() + 10s;
  bool tried_before = false;
  for (;;) {
    const std::vector<std::string> up = nodes_.Addresses();
    grpc::Status s(grpc::StatusCode::UNAVAILABLE, "no node runs");
    if (!up.empty()) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 5s);
      Resp resp;
      s = (stubs_.To(up[turn_++ % up.size()]).*method)(&ctx, req, &resp);
    }
    const bool again = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                       s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!again || stop_ || std::chrono::steady_clock::now() > end) {
      Record(key, s, tried_before, std::move(applied));
      return s;
    }
    tried_before = true;
    std::this_thread::sleep_for(20ms);  // A client's back-off.
  }
}

inline void FaultLoad::Run() {
  std::mt19937 rng(7);
  std::vector<std::string> keys;  // Set ones, to move or remove.
  for (std::uint64_t n = 0; !stop_;) {
    const WallNanos fire = WallNow() + std::uniform_int_distribution<WallNanos>(
                                           300'000'000, 3'000'000'000)(rng);
    const auto set_fire = [fire](Told& t) { t.fire = fire; };
    const int op = static_cast<int>(rng() % 10);
    if (op < 6 || keys.empty()) {
      const std::string key = "k" + std::to_string(n++);
      const std::string ns = kFaultNamespaces[n % 2];
      {
        std::lock_guard lock(mu_);
        told_[key].ns = ns;
      }
      v1::SetTimerRequest req;
      req.set_namespace_(ns);
      req.set_key(key);
      *req.mutable_fire_time() = FromNanos(fire);
      if (Send(key, req, &v1::Delayd::Stub::SetTimer, set_fire).ok()) {
        keys.push_back(key);
      }
      continue;
    }
    const std::size_t at = rng() % keys.size();
    const std::string key = keys[at];
    keys[at] = keys.back();
    keys.pop_back();
    std::string ns;
    {
      std::lock_guard lock(mu_);
      ns = told_[key].ns;
    }
    if (op < 8) {
      v1::MoveTimerRequest req;
      req.set_namespace_(ns);
      req.set_key(key);
      *req.mutable_fire_time() = FromNanos(fire);
      Send(key, req, &v1::Delayd::Stub::MoveTimer, set_fire);
    } else {
      v1::RemoveTimerRequest req;
      req.set_namespace_(ns);
      req.set_key(key);
      Send(key, req, &v1::Delayd::Stub::RemoveTimer,
           [](Told& t) { t.removed = true; });
    }
  }
}

// A worker of one namespace that subscribes through a running node (the
// `start`th first), acknowledges at once through the same node, and
// subscribes again through the next one when its stream ends.
class FaultWorker {
 public:
  static constexpr std::uint32_t kMaxInFlight = 32;

  FaultWorker(NodeBook& nodes, std::string ns, int start)
      : nodes_(nodes), ns_(std::move(ns)), turn_(start) {
    thread_ = std::thread([this] { Run(); });
  }
  ~FaultWorker() { Stop(); }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      if (ctx_ != nullptr) ctx_->TryCancel();
    }
    if (thread_.joinable()) thread_.join();
  }
  std::map<std::string, std::vector<Got>> got() {
    std::lock_guard lock(mu_);
    return got_;
  }

 private:
  void Run() {
    Stubs stubs;
    for (;;) {
      const std::vector<std::string> up = nodes_.Addresses();
      if (!up.empty()) Follow(stubs.To(up[turn_++ % up.size()]));
      std::lock_guard lock(mu_);
      if (stop_) return;
    }
  }

  // Reads one stream until it ends.
  void Follow(v1::Delayd::Stub& stub) {
    grpc::ClientContext ctx;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      ctx_ = &ctx;
    }
    v1::SubscribeRequest req;
    req.set_namespace_(ns_);
    req.set_mode(v1::SubscribeRequest::WORKER);
    req.set_max_in_flight(kMaxInFlight);
    req.mutable_ack_timeout()->set_seconds(3);
    auto reader = stub.Subscribe(&ctx, req);
    v1::SubscribeResponse msg;
    while (reader->Read(&msg)) {
      v1::AckRequest ack;
      ack.set_namespace_(ns_);
      const WallNanos now = WallNow();
      {
        std::lock_guard lock(mu_);
        for (const auto& e : msg.events()) {
          got_[e.key()].push_back({now, ToNanos(e.fire_time()), e.id()});
          ack.add_event_ids(e.id());
        }
      }
      if (ack.event_ids_size() == 0) continue;
      grpc::ClientContext ack_ctx;
      ack_ctx.set_deadline(std::chrono::system_clock::now() + 5s);
      v1::AckResponse resp;
      stub.Ack(&ack_ctx, ack, &resp);
    }
    reader->Finish();
    {
      std::lock_guard lock(mu_);
      ctx_ = nullptr;
      if (stop_) return;
    }
    // A pause before the next node, as a client's reconnect back-off.
    std::this_thread::sleep_for(100ms);
  }

  NodeBook& nodes_;
  const std::string ns_;
  std::size_t turn_;
  std::thread thread_;
  std::mutex mu_;
  bool stop_ = false;
  grpc::ClientContext* ctx_ = nullptr;
  std::map<std::string, std::vector<Got>> got_;
};

// What the check found.
struct FaultTally {
  std::size_t acknowledged = 0, removed = 0, uncertain = 0;
  std::size_t lost = 0, removed_fired = 0, early = 0, wrong_time = 0;
  std::size_t duplicates = 0;
  std::vector<std::string> examples;  // Keys of the first few faults.
  std::vector<WallNanos> lateness;    // First deliveries, of certain keys.

  // Lateness quantile q (0..1) in ms.
  double LateMs(double q) {
    if (lateness.empty()) return 0;
    std::sort(lateness.begin(), lateness.end());
    return lateness[std::min(lateness.size() - 1,
                             static_cast<std::size_t>(q * lateness.size()))] /
           1e6;
  }
};

// Deliveries of every worker, joined by key.
inline std::map<std::string, std::vector<Got>> Joined(
    std::vector<std::unique_ptr<FaultWorker>>& workers) {
  std::map<std::string, std::vector<Got>> all;
  for (auto& w : workers) {
    for (auto& [key, got] : w->got()) {
      auto& to = all[key];
      to.insert(to.end(), got.begin(), got.end());
    }
  }
  return all;
}

inline FaultTally Check(const std::map<std::string, Told>& told,
                        const std::map<std::string, std::vector<Got>>& got) {
  FaultTally t;
  auto bad = [&](std::size_t* count, const std::string& key) {
    ++*count;
    if (t.examples.size() < 10) t.examples.push_back(key);
  };
  for (const auto& [key, was] : told) {
    const auto it = got.find(key);
    const std::vector<Got> none;
    const std::vector<Got>& came = it == got.end() ? none : it->second;
    for (const Got& g : came) {
      if (g.received < g.fire) bad(&t.early, key);
    }
    if (was.uncertain) {
      ++t.uncertain;
      continue;
    }
    if (was.removed) {
      ++t.removed;
      if (!came.empty()) bad(&t.removed_fired, key);
      continue;
    }
    if (was.fire == 0) continue;  // (Never set.)
    ++t.acknowledged;
    if (came.empty()) {
      bad(&t.lost, key);
      continue;
    }
    t.duplicates += came.size() - 1;
    if (came.front().fire != was.fire) bad(&t.wrong_time, key);
    t.lateness.push_back(came.front().received - came.front().fire);
  }
  return t;
}

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_E2E_FAULT_LOAD_H_
