#include "server/core/scheduler.h"

#include <cassert>
#include <future>
#include <mutex>

#include "server/common/keyed_hash.h"

namespace delayd {
Scheduler::Scheduler(Options options)
    : options_(std::move(options)),
      clock_(options_.clock ? *options_.clock : Clock::System()),
      epoch_(clock_.Steady()),
      work_(asio::make_work_guard(io_)),
      counters_(options_.limits.max_namespaces),
      dispatchers_(new Dispatcher*[options_.limits.max_namespaces]()),
      refs_(std::make_unique<NamespaceRefs>(options_.limits.max_namespaces,
                                            [this](NamespaceId id) {
                                              asio::post(io_, [this, id] {
                                                Free(id);
                                              });
                                            })),
      reads_(options_.store ? std::make_unique<asio::thread_pool>(
                                  std::max<std::uint32_t>(1, options_.threads))
                            : nullptr),
      derived_offset_(clock_.Offset()) {
  assert(options_.partitions >= 1 && options_.partitions <= 1024);
}

Scheduler::~Scheduler() { Stop(); }

Status Scheduler::Start(RecoveryReport* report) {
  assert(partitions_.empty());
  if (options_.store) {
    // Every failed store read or write is reported once, by the store.
    StoreOptions store = *options_.store;
    store.metrics = &metrics_;
    store.on_error = [this, also = std::move(store.on_error)](const Status& s) {
      counters_.store_errors.fetch_add(1);
      if (also) also(s);
    };
    if (Status s = Store::Open(store, &store_); !s.ok()) return s;
  }
  for (std::uint32_t p = 0; p < options_.partitions; ++p) {
    partitions_.push_back(std::make_unique<Partition>(
        io_, ReadExecutor(), p, clock_, options_.tick, epoch_, options_.limits,
        counters_, store_.get(), refs_.get(),
        [this](NamespaceId ns, std::vector<Event> events) {
          dispatchers_[ns]->Publish(std::move(events));
        }));
  }
  if (store_) {
    RecoveryReport local;
    if (Status s = Recover(report ? report : &local); !s.ok()) {
      partitions_.clear();
      store_.reset();
      return s;
    }
  }
  if (store_) {
    // Replies leave from the pool, in the order the writer finished them,
    // while the writer goes on to the next group. (Not during recovery,
    // which waits for its writes before the pool runs.)
    store_->SetExecutor([this](std::function<void()> run) {
      asio::post(replies_, std::move(run));
    });
  }
  for (std::uint32_t t = 0; t < std::max<std::uint32_t>(1, options_.threads);
       ++t) {
    threads_.emplace_back([this] { io_.run(); });
  }
  if (options_.clock_poll.count() > 0) {
    clock_timer_.emplace(asio::make_strand(io_));
    PollClock();
  }
  clock_.Listen(this, [this] {
    std::promise<void> acted;
    ClockChanged([&acted] { acted.set_value(); });
    acted.get_future().wait();
  });
  return Status::Ok();
}

void Scheduler::Stop() {
  // (Before the threads stop: a listener call under way waits for them.)
  clock_.Listen(this, nullptr);
  work_.reset();
  io_.stop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
  // Reads under way finish (their completions, posted to the stopped pool,
  // never run).
  if (reads_) reads_->join();
  if (store_) store_->Close();
}

std::uint32_t Scheduler::PartitionOf(NamespaceId ns,
                                     std::string_view key) const {
  // (The high half: the partition's key index takes its slot from the low.)
  const std::uint64_t h = KeyedHash(ns, key);
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

Status Scheduler::Admit() const {
  if (shutting_down_) return ShuttingDown();
  if (store_ && store_->backlogged()) {
    return Status::Unavailable(
        "the store is behind (more than " +
        std::to_string(store_->options().max_backlog_bytes >> 20) +
        " MiB wait to be written); try again");
  }
  return Status::Ok();
}

void Scheduler::Submit(Op op, std::function<void(OpResult)> done) {
  if (Status s = Admit(); !s.ok()) {
    done(OpResult{std::move(s)});
    return;
  }
  Partition& p = *partitions_[PartitionOf(NamespaceOf(op), KeyOf(op))];
  p.Run([this, &p, op = std::move(op), done = std::move(done)]() mutable {
    if (p.stopped()) {
      done(OpResult{ShuttingDown()});
      return;
    }
    const NamespaceId ns = NamespaceOf(op);
    if (!store_) {
      OpResult r = p.Apply(op, clock_.Wall(), clock_.Steady(), nullptr);
      if (r.removed) refs_->Release(ns);
      done(std::move(r));
      return;
    }
    Store::Batch batch = store_->NewBatch();
    OpResult r = p.Apply(op, clock_.Wall(), clock_.Steady(), &batch);
    store_->Commit(batch, [this, ns, done = std::move(done),
                           r = std::move(r)](Status s) mutable {
      if (!s.ok()) r.status = s;
      // A removed timer stops counting for its namespace once that is
      // durable (namespace_refs.h).
      if (r.removed && s.ok()) refs_->Release(ns);
      done(std::move(r));
    });
  });
}

void Scheduler::SubmitBatch(std::vector<Op> ops,
                            std::function<void(std::vector<OpResult>)> done) {
  if (Status s = Admit(); !s.ok()) {
    std::vector<OpResult> results(ops.size(), OpResult{std::move(s)});
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
  // (Sized first: growing them would cost a dozen allocations per call.)
  std::vector<std::vector<std::uint32_t>> groups(partitions_.size());
  std::vector<std::uint32_t> partition_of(ops.size());
  std::vector<std::uint32_t> sizes(partitions_.size());
  for (std::uint32_t i = 0; i < ops.size(); ++i) {
    partition_of[i] = PartitionOf(NamespaceOf(ops[i]), KeyOf(ops[i]));
    ++sizes[partition_of[i]];
  }
  for (std::size_t p = 0; p < groups.size(); ++p) groups[p].reserve(sizes[p]);
  for (std::uint32_t i = 0; i < ops.size(); ++i) {
    groups[partition_of[i]].push_back(i);
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
    part.Run([this, &part, state, group = std::move(groups[p])] {
      const WallNanos wall = clock_.Wall();
      const SteadyTime steady = clock_.Steady();
      auto finish = [this, state](std::size_t) {
        if (state->remaining.fetch_sub(1) != 1) return;
        // Removed timers stop counting for their namespaces, now durable.
        for (std::size_t i = 0; i < state->results.size(); ++i) {
          const OpResult& r = state->results[i];
          if (r.removed && r.status.ok()) {
            refs_->Release(NamespaceOf(state->ops[i]));
          }
        }
        state->done(std::move(state->results));
      };
      if (part.stopped()) {
        for (std::uint32_t i : group) state->results[i] = {ShuttingDown()};
        finish(0);
        return;
      }
      // In request order. Each key's slot in a large index is a cache miss:
      // fetch it a few operations ahead so that the misses overlap.
      auto apply_all = [&](Store::Batch* batch) {
        constexpr std::size_t kAhead = 8;
        auto prefetch = [&](std::size_t k) {
          const Op& op = state->ops[group[k]];
          part.Prefetch(NamespaceOf(op), KeyOf(op));
        };
        for (std::size_t k = 0; k < std::min(kAhead, group.size()); ++k) {
          prefetch(k);
        }
        for (std::size_t k = 0; k < group.size(); ++k) {
          if (k + kAhead < group.size()) prefetch(k + kAhead);
          const std::uint32_t i = group[k];
          state->results[i] = part.Apply(state->ops[i], wall, steady, batch);
        }
      };
      if (!store_) {
        apply_all(nullptr);
        finish(0);
        return;
      }
      Store::Batch batch = store_->NewBatch();
      apply_all(&batch);
      store_->Commit(batch, [state, group, finish](Status s) {
        if (!s.ok()) {
          for (std::uint32_t i : group) {
            if (state->results[i].status.ok()) state->results[i].status = s;
          }
        }
        finish(0);
      });
    });
  }
}

void Scheduler::Drain(NamespaceId ns,
                      std::function<void(Status, std::uint64_t)> done) {
  if (Status s = Admit(); !s.ok()) {
    done(std::move(s), 0);
    return;
  }
  struct State {
    std::atomic<std::uint64_t> drained{0};
    std::atomic<std::size_t> remaining;
    std::function<void(Status, std::uint64_t)> done;
    std::mutex mu;
    Status error;  // The first partition's failure, under mu.
  };
  auto state = std::make_shared<State>();
  state->remaining = partitions_.size();
  state->done = std::move(done);
  for (auto& part : partitions_) {
    Partition* p = part.get();
    p->Post([p, ns, state] {
      p->Drain(ns, [state](Status s, std::uint64_t drained) {
        state->drained.fetch_add(drained);
        if (!s.ok()) {
          std::lock_guard lock(state->mu);
          if (state->error.ok()) state->error = std::move(s);
        }
        if (state->remaining.fetch_sub(1) == 1) {
          Status error;
          {
            std::lock_guard lock(state->mu);
            error = state->error;
          }
          state->done(std::move(error), state->drained.load());
        }
      });
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
  p.Read([&p, ns, key = std::move(key), done = std::move(done)]() mutable {
    auto found = std::make_shared<Partition::Found>();
    p.Get(ns, key, *found);
    return [&p, found, key = std::move(key), done = std::move(done)] {
      Status error;
      if (!p.ReadPayloads(*found, &error)) {
        done(std::move(error), std::nullopt);
      } else if (found->timers.empty()) {
        done(Status::NotFound("no pending timer '" + key + "'"), std::nullopt);
      } else {
        done(Status::Ok(), std::move(found->timers[0]));
      }
    };
  });
}

void Scheduler::List(NamespaceId ns, std::string prefix, ListLimits limit,
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

void Scheduler::ListFrom(NamespaceId ns, std::string prefix, ListLimits limit,
                         ListCursor from, std::vector<TimerInfo> acc,
                         std::function<void(Status, std::vector<TimerInfo>,
                                            std::optional<ListCursor>)>
                             done) {
  Partition& p = *partitions_[from.partition];
  p.Read([this, &p, ns, prefix = std::move(prefix), limit, from,
          acc = std::move(acc), done = std::move(done)]() mutable {
    auto found = std::make_shared<Partition::Found>();
    const std::optional<std::uint32_t> next =
        p.List(ns, prefix, from.record, limit.timers - acc.size(),
               limit.payloads, *found);
    return [this, &p, ns, prefix = std::move(prefix), limit, from, found, next,
            acc = std::move(acc), done = std::move(done)]() mutable {
      // Keys and payloads within limit.bytes; a page holds at least one.
      std::size_t bytes = 0;
      for (const TimerInfo& t : acc) bytes += ListCost(t);
      Status error;
      if (!p.ReadPayloads(*found, &error, limit.bytes, bytes)) {
        done(std::move(error), {}, std::nullopt);
        return;
      }
      for (TimerInfo& t : found->timers) acc.push_back(std::move(t));
      if (found->next) {
        done(Status::Ok(), std::move(acc),
             ListCursor{from.partition, *found->next});
        return;
      }
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
    };
  });
}

void Scheduler::Shutdown(std::function<void()> done) {
  shutting_down_ = true;
  std::vector<Dispatcher*> all;
  decltype(waiting_) waiting;
  {
    std::unique_lock lock(ns_mutex_);
    for (auto& d : owned_dispatchers_) all.push_back(d.get());
    waiting.swap(waiting_);
  }
  for (auto& [name, subs] : waiting) {
    for (Waiting& sub : subs) {
      CountWaiting(sub, -1);
      sub.subscriber->End(ShuttingDown());
    }
  }
  // A barrier through every partition (so every operation accepted before
  // now has answered) and every dispatcher (closing its streams).
  auto remaining = std::make_shared<std::atomic<std::size_t>>(
      all.size() + partitions_.size());
  auto shared_done = std::make_shared<std::function<void()>>(std::move(done));
  auto arrive = [this, remaining, shared_done] {
    if (remaining->fetch_sub(1) != 1) return;
    if (!store_) {
      (*shared_done)();
      return;
    }
    // Every accepted change is queued: `done` once all of it is durable, on
    // the replies' strand after every earlier reply.
    store_->Flush([shared_done] { (*shared_done)(); });
  };
  for (auto& p : partitions_) {
    p->Post([p = p.get(), arrive] {
      p->StopTimers();
      arrive();
    });
  }
  for (Dispatcher* d : all) d->Close(ShuttingDown(), arrive);
}

}  // namespace delayd
