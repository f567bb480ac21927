#include "server/scheduler.h"

#include <cassert>
#include <mutex>

namespace delayd {
namespace {
Status ShuttingDown() { return Status::Unavailable("delayd is shutting down"); }
}  // namespace

Scheduler::Scheduler(Options options)
    : options_(std::move(options)),
      epoch_(std::chrono::steady_clock::now()),
      work_(asio::make_work_guard(io_)),
      dispatchers_(new Dispatcher*[options_.limits.max_namespaces]()) {
  assert(options_.partitions >= 1 && options_.partitions <= 1024);
  for (std::uint32_t p = 0; p < options_.partitions; ++p) {
    partitions_.push_back(std::make_unique<Partition>(
        io_, p, options_.tick, epoch_, options_.limits, counters_,
        [this](NamespaceId ns, std::vector<Event> events) {
          dispatchers_[ns]->Publish(std::move(events));
        }));
  }
}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::Start() {
  for (std::uint32_t t = 0; t < std::max<std::uint32_t>(1, options_.threads);
       ++t) {
    threads_.emplace_back([this] { io_.run(); });
  }
}

void Scheduler::Stop() {
  work_.reset();
  io_.stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

Status Scheduler::Intern(std::string_view name, NamespaceId* id) {
  {
    std::shared_lock lock(ns_mutex_);
    auto it = ns_ids_.find(name);
    if (it != ns_ids_.end()) {
      *id = it->second;
      return Status::Ok();
    }
  }
  const std::string key(name);
  std::unique_lock lock(ns_mutex_);
  auto it = ns_ids_.find(key);
  if (it != ns_ids_.end()) {
    *id = it->second;
    return Status::Ok();
  }
  if (ns_ids_.size() >= options_.limits.max_namespaces) {
    return Status::ResourceExhausted(
        "namespace limit of " + std::to_string(options_.limits.max_namespaces) +
        " reached");
  }
  const auto next = static_cast<NamespaceId>(owned_dispatchers_.size());
  owned_dispatchers_.push_back(
      std::make_unique<Dispatcher>(io_, key, counters_, options_.limits));
  dispatchers_[next] = owned_dispatchers_.back().get();
  ns_ids_.emplace(key, next);
  *id = next;
  return Status::Ok();
}

std::uint32_t Scheduler::PartitionOf(NamespaceId ns,
                                     std::string_view key) const {
  const std::uint64_t h =
      std::hash<std::string_view>{}(key)*0x9E3779B97F4A7C15ull + ns;
  return static_cast<std::uint32_t>((h >> 32) % options_.partitions);
}

std::string_view Scheduler::KeyOf(const Op& op) {
  return std::visit(
      [](const auto& o) -> std::string_view {
        if constexpr (std::is_same_v<std::decay_t<decltype(o)>, SetOp>) {
          return o.key();
        } else {
          return o.key;
        }
      },
      op);
}

NamespaceId Scheduler::NamespaceOf(const Op& op) {
  return std::visit([](const auto& o) { return o.ns; }, op);
}

void Scheduler::Submit(Op op, std::function<void(OpResult)> done) {
  if (shutting_down_) {
    done(OpResult{ShuttingDown()});
    return;
  }
  Partition& p = *partitions_[PartitionOf(NamespaceOf(op), KeyOf(op))];
  asio::post(
      p.strand(), [&p, op = std::move(op), done = std::move(done)]() mutable {
        OpResult r = p.Apply(op, WallNow(), std::chrono::steady_clock::now());
        done(std::move(r));
      });
}

void Scheduler::SubmitBatch(std::vector<Op> ops,
                            std::function<void(std::vector<OpResult>)> done) {
  if (shutting_down_) {
    std::vector<OpResult> results(ops.size(), OpResult{ShuttingDown()});
    done(std::move(results));
    return;
  }
  struct State {
    std::vector<Op> ops;
    std::vector<OpResult> results;
    std::atomic<std::size_t> remaining;
    std::function<void(std::vector<OpResult>)> done;
  };
  auto state = std::make_shared<State>();
  state->results.resize(ops.size());
  state->done = std::move(done);
  // Indices of the operations of each partition, in request order.
  std::vector<std::vector<std::uint32_t>> groups(partitions_.size());
  for (std::uint32_t i = 0; i < ops.size(); ++i) {
    groups[PartitionOf(NamespaceOf(ops[i]), KeyOf(ops[i]))].push_back(i);
  }
  state->ops = std::move(ops);
  std::size_t used = 0;
  for (const auto& g : groups) used += g.empty() ? 0 : 1;
  if (used == 0) {
    state->done({});
    return;
  }
  state->remaining = used;
  for (std::size_t p = 0; p < groups.size(); ++p) {
    if (groups[p].empty()) continue;
    Partition& part = *partitions_[p];
    asio::post(part.strand(), [&part, state, group = std::move(groups[p])] {
      const WallNanos wall = WallNow();
      const SteadyTime steady = std::chrono::steady_clock::now();
      for (std::uint32_t i : group) {
        state->results[i] = part.Apply(state->ops[i], wall, steady);
      }
      if (state->remaining.fetch_sub(1) == 1) {
        state->done(std::move(state->results));
      }
    });
  }
}

void Scheduler::Drain(NamespaceId ns,
                      std::function<void(Status, std::uint64_t)> done) {
  if (shutting_down_) {
    done(ShuttingDown(), 0);
    return;
  }
  struct State {
    std::atomic<std::uint64_t> drained{0};
    std::atomic<std::size_t> remaining;
    std::function<void(Status, std::uint64_t)> done;
  };
  auto state = std::make_shared<State>();
  state->remaining = partitions_.size();
  state->done = std::move(done);
  for (auto& part : partitions_) {
    Partition* p = part.get();
    asio::post(p->strand(), [p, ns, state] {
      state->drained.fetch_add(p->Drain(ns));
      if (state->remaining.fetch_sub(1) == 1) {
        state->done(Status::Ok(), state->drained.load());
      }
    });
  }
}

void Scheduler::Get(
    NamespaceId ns, std::string key,
    std::function<void(Status, std::optional<TimerInfo>)> done) {
  if (shutting_down_) {
    done(ShuttingDown(), std::nullopt);
    return;
  }
  Partition& p = *partitions_[PartitionOf(ns, key)];
  asio::post(p.strand(), [&p, ns, key = std::move(key),
                          done = std::move(done)] {
    auto info = p.Get(ns, key);
    if (!info) {
      done(Status::NotFound("no pending timer '" + key + "'"), std::nullopt);
    } else {
      done(Status::Ok(), std::move(info));
    }
  });
}

void Scheduler::List(NamespaceId ns, std::string prefix, std::size_t limit,
                     ListCursor from,
                     std::function<void(Status, std::vector<TimerInfo>,
                                        std::optional<ListCursor>)>
                         done) {
  if (shutting_down_) {
    done(ShuttingDown(), {}, std::nullopt);
    return;
  }
  if (from.partition >= partitions_.size()) {
    done(Status::InvalidArgument("page_token does not fit this daemon"), {},
         std::nullopt);
    return;
  }
  ListFrom(ns, std::move(prefix), limit, from, {}, std::move(done));
}

void Scheduler::ListFrom(NamespaceId ns, std::string prefix, std::size_t limit,
                         ListCursor from, std::vector<TimerInfo> acc,
                         std::function<void(Status, std::vector<TimerInfo>,
                                            std::optional<ListCursor>)>
                             done) {
  Partition& p = *partitions_[from.partition];
  asio::post(p.strand(), [this, &p, ns, prefix = std::move(prefix), limit, from,
                          acc = std::move(acc),
                          done = std::move(done)]() mutable {
    auto next = p.List(ns, prefix, from.record, limit - acc.size(), acc);
    if (next) {
      done(Status::Ok(), std::move(acc), ListCursor{from.partition, *next});
      return;
    }
    if (from.partition + 1 == partitions_.size()) {
      done(Status::Ok(), std::move(acc), std::nullopt);
      return;
    }
    ListFrom(ns, std::move(prefix), limit, ListCursor{from.partition + 1, 0},
             std::move(acc), std::move(done));
  });
}

void Scheduler::Shutdown(std::function<void()> done) {
  shutting_down_ = true;
  std::vector<Dispatcher*> all;
  {
    std::shared_lock lock(ns_mutex_);
    for (auto& d : owned_dispatchers_) all.push_back(d.get());
  }
  // A barrier through every partition (so every operation accepted before
  // now has answered) and every dispatcher (closing its streams).
  auto remaining = std::make_shared<std::atomic<std::size_t>>(
      all.size() + partitions_.size());
  auto shared_done = std::make_shared<std::function<void()>>(std::move(done));
  auto arrive = [remaining, shared_done] {
    if (remaining->fetch_sub(1) == 1) (*shared_done)();
  };
  for (auto& p : partitions_) asio::post(p->strand(), arrive);
  for (Dispatcher* d : all) d->Close(ShuttingDown(), arrive);
}

}  // namespace delayd
