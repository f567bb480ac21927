#include "server/core/scheduler.h"

#include <cassert>
#include <future>

#include "server/common/keyed_hash.h"
#include "server/common/stable_hash.h"
#include "server/common/thread_name.h"

namespace delayd {
Scheduler::Scheduler(Options options)
    : options_(std::move(options)),
      clock_(options_.clock ? *options_.clock : Clock::System()),
      epoch_(clock_.Steady()),
      work_(asio::make_work_guard(io_)),
      counters_(options_.limits.max_namespaces),
      dispatchers_(new Dispatcher*[options_.limits.max_namespaces]()),
      stable_seeds_(new std::uint64_t[options_.limits.max_namespaces]()),
      refs_(std::make_unique<NamespaceRefs>(
          options_.limits.max_namespaces,
          [this](NamespaceId id) {
            asio::post(executor(), [this, id] { Free(id); });
          })),
      dedup_windows_(options_.limits.max_namespaces,
                     options_.limits.max_dedup_keys),
      reads_(options_.store ? std::make_unique<asio::thread_pool>(
                                  std::max<std::uint32_t>(1, options_.threads))
                            : nullptr),
      derived_offset_(clock_.Offset()) {
  assert(options_.partitions >= 1 && options_.partitions <= 1024);
  partition_count_ = options_.partitions;
}

Scheduler::~Scheduler() { Stop(); }

Status Scheduler::Start(RecoveryReport* report) {
  assert(partitions_.empty());
  if (options_.store) {
    // Every failed store read or write is reported once, by the store.
    StoreHooks hooks;
    hooks.metrics = &metrics_;
    hooks.on_error = [this](const Status& s) {
      counters_.store_errors.fetch_add(1);
      if (options_.on_store_error) options_.on_store_error(s);
    };
    hooks.on_write_failure = options_.on_store_write_failure;
    if (Status s = options_.store(std::move(hooks), &store_); !s.ok()) {
      return s;
    }
    if (const std::uint32_t shared = store_->SharedPartitions(); shared != 0) {
      partition_count_ = shared;
      shared_partitions_ = true;
    }
  }
  for (std::uint32_t p = 0; p < partition_count_; ++p) {
    partitions_.push_back(std::make_unique<Partition>(
        executor(), timers(), p, clock_, options_.tick, epoch_, options_.limits,
        counters_, store_.get(), refs_.get(),
        [this](NamespaceId ns, std::vector<Event> events) {
          dispatchers_[ns]->Publish(std::move(events));
        }));
    partitions_.back()->SetDedupWindows(&dedup_windows_);
    partitions_.back()->SetWriteFiringsHere(WritesHere());
  }
  // Shared, a partition is this node's only once taken (TakePartition).
  if (shared_partitions_) {
    for (auto& p : partitions_) p->Disown();
  }
  if (store_) {
    RecoveryReport local;
    if (Status s = Recover(report ? report : &local); !s.ok()) {
      partitions_.clear();
      store_.reset();
      return s;
    }
    // The store's own thread may run the completions of what it wrote
    // (RocksDB: a few, while nothing else waits for it): handing each group
    // to the pool cost a thread's wake-up, 5-8 % of the daemon's CPU at a
    // steady 2 k timers/s under --fsync 1s (tests/bench/README.md,
    // "Completions on the store's thread"). The others leave from the pool:
    // a batch refused in Commit (its caller may hold a lock), a burst's, all
    // of a store that runs none itself. (Neither during recovery, which
    // waits for its writes before the pool runs.)
    store_->SetExecutor([this](std::function<void()> run) {
      asio::post(replies_, std::move(run));
    });
    store_->SetInlineCompletions(true);
  }
  for (std::uint32_t t = 0;
       !options_.loop && t < std::max<std::uint32_t>(1, options_.threads);
       ++t) {
    threads_.emplace_back([this] { io_.run(); });
    NameThread(threads_.back(), "delayd-pool");
  }
  if (options_.loop) {
    timer_thread_ = std::thread([this] {
      auto work = asio::make_work_guard(timer_io_);
      timer_io_.run();
    });
    NameThread(timer_thread_, "delayd-timers");
  }
  if (options_.clock_poll.count() > 0) {
    clock_timer_.emplace(clock_io_);
    clock_work_.emplace(asio::make_work_guard(clock_io_));
    clock_thread_ = std::thread([this] { clock_io_.run(); });
    NameThread(clock_thread_, "delayd-clock");
    // (Armed here: a step from here on is seen.)
    if (options_.clock == nullptr) WatchClockSteps();
    asio::post(clock_timer_->get_executor(), [this] {
      PollClock();
      if (step_watch_) AwaitClockStep();
    });
  }
  clock_.Listen(this, [this] {
    std::promise<void> acted;
    ClockChanged([&acted] { acted.set_value(); });
    acted.get_future().wait();
  });
  return Status::Ok();
}

void Scheduler::Stop() {
  // (First: from here on completions go to the pool, which stops, so that
  // none runs once the pool and what it serves are gone.)
  if (store_) store_->SetInlineCompletions(false);
  // (Before the threads stop: a listener call under way waits for them.)
  clock_.Listen(this, nullptr);
  // The periodic work first: it reaches into partitions and the store.
  clock_work_.reset();
  clock_io_.stop();
  if (clock_thread_.joinable()) clock_thread_.join();
  timer_io_.stop();
  if (timer_thread_.joinable()) timer_thread_.join();
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
  if (shared_partitions_) {
    return StablePartition(stable_seeds_[ns], key, partition_count_);
  }
  // (The high half: the partition's key index takes its slot from the low.)
  const std::uint64_t h = KeyedHash(ns, key);
  return static_cast<std::uint32_t>((h >> 32) % partition_count_);
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
  if (store_) {
    std::string why;
    if (store_->Backlogged(&why)) return Status::Unavailable(why);
  }
  return Status::Ok();
}

void Scheduler::Submit(Op op, std::function<void(OpResult)> done) {
  if (Status s = Admit(); !s.ok()) {
    done(OpResult{std::move(s)});
    return;
  }
  const NamespaceId ns = NamespaceOf(op);
  Partition& p = *partitions_[PartitionOf(ns, KeyOf(op))];
  // A removed timer stops counting for its namespace once that is durable
  // (namespace_refs.h).
  std::function<void(OpResult)> durable = [this, ns, done](OpResult r) {
    if (r.removed && r.status.ok()) refs_->Release(ns);
    done(std::move(r));
  };
  if (std::optional<OpResult> r = p.Apply(op, durable)) durable(std::move(*r));
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
  // One for each group, and one held by this call until every group is
  // applied: the answer goes out once both the groups that wait for the
  // store and those that do not are done.
  state->remaining = used + 1;
  auto finish = [this, state] {
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
  for (std::size_t p = 0; p < groups.size(); ++p) {
    if (groups[p].empty()) continue;
    std::function<void(Status)> durable = [state, group = groups[p],
                                           finish](Status s) {
      if (!s.ok()) {
        for (std::uint32_t i : group) {
          if (state->results[i].status.ok()) state->results[i].status = s;
        }
      }
      finish();
    };
    if (!partitions_[p]->ApplyGroup(state->ops, groups[p], state->results,
                                    durable)) {
      finish();
    }
  }
  finish();
}

void Scheduler::Drain(NamespaceId ns,
                      std::function<void(Status, std::uint64_t)> done) {
  Status s = Admit();
  if (s.ok()) s = Loading();  // A partition loading would drain later.
  if (!s.ok()) {
    done(std::move(s), 0);
    return;
  }
  struct State {
    std::atomic<std::uint64_t> drained{0};
    std::atomic<std::size_t> remaining;
    std::function<void(Status, std::uint64_t)> done;
    Mutex mu;
    Status error GUARDED_BY(mu);  // The first partition's failure.
  };
  auto state = std::make_shared<State>();
  state->remaining = partitions_.size();
  state->done = std::move(done);
  // On the pool: a partition with millions of timers takes a while.
  for (auto& part : partitions_) {
    Partition* p = part.get();
    asio::post(executor(), [p, ns, state] {
      p->Drain(ns, [state](Status s, std::uint64_t drained) {
        state->drained.fetch_add(drained);
        Status error;
        {
          MutexLock lock(&state->mu);
          if (!s.ok() && state->error.ok()) state->error = std::move(s);
          error = state->error;
        }
        if (state->remaining.fetch_sub(1) == 1) {
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
  auto found = std::make_shared<Partition::Found>();
  if (Status s = p.Get(ns, key, *found); !s.ok()) {
    done(std::move(s), std::nullopt);
    return;
  }
  auto answer = [&p, found, key = std::move(key), done = std::move(done)] {
    Status error;
    if (!p.ReadPayloads(*found, &error)) {
      done(std::move(error), std::nullopt);
    } else if (found->timers.empty()) {
      done(Status::NotFound("no pending timer '" + key + "'"), std::nullopt);
    } else {
      done(Status::Ok(), std::move(found->timers[0]));
    }
  };
  if (found->view) {
    asio::post(ReadExecutor(), std::move(answer));
  } else {
    answer();  // Nothing to read from the store.
  }
}

Status Scheduler::Unserved(std::string_view ns_name,
                           std::string_view key) const {
  if (shutting_down_) return ShuttingDown();
  if (!shared_partitions_) return Status::Ok();
  const std::uint32_t part =
      StablePartition(StableSeed(ns_name), key, partition_count_);
  return partitions_[part]->Unserved().value_or(Status::Ok());
}

Status Scheduler::UnservedEvents(std::span<const std::uint64_t> ids) const {
  if (shutting_down_) return ShuttingDown();
  if (!shared_partitions_) return Status::Ok();
  for (std::uint64_t id : ids) {
    const std::uint32_t part = Partition::Of(id);
    if (part >= partitions_.size()) continue;  // Unknown either way.
    if (auto refused = partitions_[part]->Unserved()) return *refused;
  }
  return Status::Ok();
}

Status Scheduler::Loading() const {
  if (shutting_down_) return ShuttingDown();
  if (!shared_partitions_) return Status::Ok();
  for (const auto& [part, epoch] : held()) {
    if (!partitions_[part]->owned()) {
      return Status::Unavailable("partition " + std::to_string(part) +
                                 " is loading on this node; try again");
    }
  }
  return Status::Ok();
}

Status Scheduler::Served(std::uint32_t from, std::uint32_t until) const {
  if (shutting_down_) return ShuttingDown();
  for (std::uint32_t p = from; p < until && p < partitions_.size(); ++p) {
    if (auto refused = partitions_[p]->Unserved()) return *refused;
  }
  return Status::Ok();
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
                         ListDone done) {
  // Partition by partition, each found holding its lock; with a store its
  // payloads are read after, on the read pool, which goes on from there.
  for (;; from = ListCursor{from.partition + 1, 0}) {
    Partition& p = *partitions_[from.partition];
    auto found = std::make_shared<Partition::Found>();
    std::optional<std::uint32_t> next;
    if (Status s = p.List(ns, prefix, from.record, limit.timers - acc.size(),
                          limit.payloads, *found, &next);
        !s.ok()) {
      done(std::move(s), {}, std::nullopt);
      return;
    }
    if (found->view) {
      asio::post(
          ReadExecutor(),
          [this, &p, ns, prefix = std::move(prefix), limit, from, found, next,
           acc = std::move(acc), done = std::move(done)]() mutable {
            if (ListPage(p, *found, next, from, limit, acc, done)) return;
            ListFrom(ns, std::move(prefix), limit,
                     ListCursor{from.partition + 1, 0}, std::move(acc),
                     std::move(done));
          });
      return;
    }
    if (ListPage(p, *found, next, from, limit, acc, done)) return;
  }
}

bool Scheduler::ListPage(const Partition& p, Partition::Found& found,
                         std::optional<std::uint32_t> next, ListCursor from,
                         ListLimits limit, std::vector<TimerInfo>& acc,
                         ListDone& done) {
  // Keys and payloads within limit.bytes; a page holds at least one.
  std::size_t bytes = 0;
  for (const TimerInfo& t : acc) bytes += ListCost(t);
  Status error;
  if (!p.ReadPayloads(found, &error, limit.bytes, bytes)) {
    done(std::move(error), {}, std::nullopt);
    return true;
  }
  for (TimerInfo& t : found.timers) acc.push_back(std::move(t));
  if (found.next || next) {
    done(Status::Ok(), std::move(acc),
         ListCursor{from.partition, found.next ? *found.next : *next});
    return true;
  }
  if (from.partition + 1 == partitions_.size()) {
    done(Status::Ok(), std::move(acc), std::nullopt);
    return true;
  }
  if (from.partition + 1 == limit.until) {
    done(Status::Ok(), std::move(acc), ListCursor{limit.until, 0});
    return true;
  }
  return false;
}

void Scheduler::Shutdown(std::function<void()> done) {
  shutting_down_ = true;
  std::vector<Dispatcher*> all;
  decltype(waiting_) waiting;
  {
    WriterLock lock(&ns_mutex_);
    for (auto& d : owned_dispatchers_) all.push_back(d.get());
    waiting.swap(waiting_);
  }
  for (auto& [name, subs] : waiting) {
    for (Waiting& sub : subs) {
      CountWaiting(sub, -1);
      sub.subscriber->End(ShuttingDown());
    }
  }
  // Every partition stops (an operation that holds one finishes first, its
  // changes queued for the store), then every dispatcher closes its
  // streams.
  for (auto& p : partitions_) p->Stop();
  auto remaining = std::make_shared<std::atomic<std::size_t>>(all.size() + 1);
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
  for (Dispatcher* d : all) d->Close(ShuttingDown(), arrive);
  arrive();
}

}  // namespace delayd
