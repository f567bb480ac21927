// Dispatcher: the namespace policy, and deliveries that fail. A failure
// (Nack, an ack deadline passed) either schedules the event's retry on the
// ack wheel, after the Nack's time or the policy's backoff, or, after its
// last attempt, makes it a dead letter (dispatcher_dead.cc). The attempts
// of failing events are written to the store (their fate records).
#include <algorithm>

#include "server/core/dispatcher.h"
#include "server/core/payload_ref.h"
#include "server/core/turn.h"

namespace delayd {

void Dispatcher::SetPolicy(const Policy& policy) {
  asio::post(strand_, [this, policy] {
    on_strand_.Enter();
    const bool rate_changed =
        policy.max_dispatch_rate != policy_.max_dispatch_rate ||
        policy.dispatch_burst != policy_.dispatch_burst;
    policy_ = policy;
    if (rate_changed) {
      bucket_.Configure(policy.max_dispatch_rate, policy.dispatch_burst,
                        clock_.Steady());
    }
    Pump();
  });
}

void Dispatcher::Wake(std::function<void()> done) {
  asio::post(strand_, [this, done = std::move(done)] {
    on_strand_.Enter();
    if (!closed_) TakeAckTimeouts();
    done();
  });
}

std::chrono::nanoseconds Dispatcher::BackoffFor(const Outstanding& o) {
  return Backoff(policy_.retry, o.event.attempt,
                 std::uniform_real_distribution<double>(0, 1)(random_));
}

void Dispatcher::ArmRateTimer(SteadyTime at) {
  if (rate_armed_ || closed_) return;
  rate_armed_ = true;
  rate_timer_.expires_after(at - clock_.Steady());
  rate_timer_.async_wait(
      asio::bind_executor(strand_, [this](const asio::error_code& ec) {
        on_strand_.Enter();
        rate_armed_ = false;
        if (!ec && !closed_) Pump();
      }));
}

void Dispatcher::Nack(std::vector<std::uint64_t> ids,
                      std::optional<std::chrono::nanoseconds> retry_after,
                      std::string error,
                      std::function<void(LeaseResult)> done) {
  asio::post(strand_, [this, ids = std::move(ids), retry_after,
                       error = std::move(error), done = std::move(done)] {
    on_strand_.Enter();
    Turn turn;  // (As an ack's: turn.h.)
    // (Its client has them: they stop holding its room, as acked ones.)
    std::vector<std::pair<std::uint64_t, std::uint64_t>> by_worker;
    LeaseResult result =
        EachInFlight(ids, [&](std::uint64_t id, Outstanding& o) {
          on_strand_.Enter();  // (clang's analysis sees a lambda apart)
          if (o.worker != 0) by_worker.emplace_back(o.worker, id);
          SetError(id, o, error);
          Fail(id, o, retry_after.value_or(BackoffFor(o)));
        });
    TellAcked(by_worker);
    WriteFates();
    Pump();
    done(std::move(result));
  });
}

void Dispatcher::Reject(std::vector<std::uint64_t> ids, std::string error,
                        std::function<void(LeaseResult)> done) {
  asio::post(strand_, [this, ids = std::move(ids), error = std::move(error),
                       done = std::move(done)] {
    on_strand_.Enter();
    LeaseResult result =
        EachInFlight(ids, [&](std::uint64_t id, Outstanding& o) {
          on_strand_.Enter();  // (clang's analysis sees a lambda apart)
          SetError(id, o, error);
          if (Worker* w = FindWorker(o.worker)) w->in_flight.erase(id);
          Bury(id, o);
        });
    WriteFates();
    Pump();
    done(std::move(result));
  });
}

void Dispatcher::Release(std::vector<std::uint64_t> ids,
                         std::function<void(LeaseResult)> done) {
  // (Newest first, so that the oldest ends up at the front.)
  std::sort(ids.rbegin(), ids.rend());
  asio::post(strand_, [this, ids = std::move(ids), done = std::move(done)] {
    on_strand_.Enter();
    LeaseResult result =
        EachInFlight(ids, [&](std::uint64_t id, Outstanding& o) {
          on_strand_.Enter();  // (clang's analysis sees a lambda apart)
          if (Worker* w = FindWorker(o.worker)) w->in_flight.erase(id);
          TakeBack(id, o);
        });
    Pump();
    done(std::move(result));
  });
}

void Dispatcher::ExtendLease(std::vector<std::uint64_t> ids,
                             std::chrono::nanoseconds extension,
                             std::function<void(LeaseResult)> done) {
  asio::post(strand_,
             [this, ids = std::move(ids), extension, done = std::move(done)] {
               on_strand_.Enter();
               done(EachInFlight(ids, [&](std::uint64_t id, Outstanding& o) {
                 on_strand_.Enter();  // (clang's analysis sees a lambda apart)
                 CancelAckTimer(o);
                 StartAckTimer(id, o, extension);
               }));
             });
}

void Dispatcher::Fail(std::uint64_t event_id, Outstanding& o,
                      std::chrono::nanoseconds wait) {
  if (Worker* w = FindWorker(o.worker)) w->in_flight.erase(event_id);
  if (policy_.max_attempts != 0 && o.event.attempt >= policy_.max_attempts) {
    Bury(event_id, o);
    return;
  }
  // The attempts so far and the retry time survive a restart (written after
  // this handler, without waiting: a crash before may lose the count of
  // this one, and its wait).
  if (store_ != nullptr) {
    const WallNanos retry_at =
        wait.count() > 0 ? clock_.Wall() + wait.count() : 0;
    fates_.PutFate(event_id, PayloadIdOf(o.event.blob),
                   {o.event.attempt, false, ErrorOf(event_id, o), retry_at});
    Touch(fates_, o.event);
    o.fate_stored = true;
  }
  if (wait.count() <= 0) {
    Requeue(event_id, o);
    return;
  }
  LeaveFlight(o);
  Retry(event_id, o, wait);
  counters_.redelivered.fetch_add(1);
  mine_.redelivered.fetch_add(1, std::memory_order_relaxed);
}

void Dispatcher::Retry(std::uint64_t event_id, Outstanding& o,
                       std::chrono::nanoseconds wait) {
  o.retrying = true;
  StartAckTimer(event_id, o, wait);
  counters_.retrying.fetch_add(1);
  mine_.retrying.fetch_add(1, std::memory_order_relaxed);
}

void Dispatcher::RestoreRetrying(std::vector<RetryingEvent> events) {
  asio::post(strand_, [this, events = std::move(events)]() mutable {
    on_strand_.Enter();
    const WallNanos now = clock_.Wall();
    for (RetryingEvent& r : events) {
      const std::uint64_t id = r.event.id;
      auto& o = outstanding_.emplace(id, Outstanding{std::move(r.event)})
                    .first->second;
      o.fate_stored = true;
      SetError(id, o, std::move(r.error));
      Retry(id, o,
            std::chrono::nanoseconds(std::max<WallNanos>(0, r.retry_at - now)));
    }
  });
}

void Dispatcher::WriteFates() {
  if (fates_.empty()) return;
  // Failures are recorded when they can be; a store error is counted and
  // logged by the store, and costs only the count of these attempts.
  store_->Commit(fates_, nullptr);
  fates_.Clear();
}

}  // namespace delayd
