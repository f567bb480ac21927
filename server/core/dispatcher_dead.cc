// Dispatcher: dead letters. An event whose last attempt (the policy's
// max_attempts) fails is kept apart: not delivered, listed on request,
// requeued (attempts from zero) or purged. Its fate record says so in the
// store, so that it stays a dead letter across restarts.
#include "server/common/limit_log.h"
#include "server/core/dispatcher.h"

namespace delayd {
namespace {

Event CopyOf(const Event& e) {
  return Event{e.id,      e.ns,        Blob(e.blob.key(), e.blob.payload()),
               e.version, e.fire_time, e.fired_at,
               e.attempt, e.reason};
}

}  // namespace

void Dispatcher::Bury(std::uint64_t event_id, Outstanding& o) {
  LeaveFlight(o);
  o.dead = true;
  dead_.insert(event_id);
  counters_.dead_letters.fetch_add(1);
  mine_.dead_letters.fetch_add(1, std::memory_order_relaxed);
  if (store_ != nullptr) {
    if (!fates_) fates_.emplace(store_->NewBatch());
    fates_->PutFate(event_id, {o.event.attempt, true, o.error});
    o.fate_stored = true;
  }
  LogRepeated("dead-letter",
              "namespace '" + name_ + "', key '" +
                  std::string(o.event.blob.key()) + "', event " +
                  std::to_string(event_id) + ": a dead letter after " +
                  std::to_string(o.event.attempt) + " attempts" +
                  (o.error.empty() ? "" : " (last error: " + o.error + ")"));
  // Watchers see the move.
  if (!watchers_.empty()) {
    Event copy = CopyOf(o.event);
    copy.reason = Reason::kDeadLettered;
    const Event* one = &copy;
    ToWatchers({&one, 1});
  }
}

void Dispatcher::RestoreDeadLetters(std::vector<DeadLetter> letters) {
  asio::post(strand_, [this, letters = std::move(letters)]() mutable {
    for (DeadLetter& d : letters) {
      const std::uint64_t id = d.event.id;
      auto& o = outstanding_.emplace(id, Outstanding{std::move(d.event)})
                    .first->second;
      o.dead = true;
      o.fate_stored = true;
      o.error = std::move(d.error);
      dead_.insert(id);
    }
    counters_.dead_letters.fetch_add(letters.size());
    mine_.dead_letters.fetch_add(letters.size(), std::memory_order_relaxed);
  });
}

void Dispatcher::ListDeadLetters(std::uint64_t from, std::size_t limit,
                                 std::size_t max_bytes,
                                 std::function<void(DeadLetterPage)> done) {
  asio::post(strand_, [this, from, limit, max_bytes, done = std::move(done)] {
    DeadLetterPage page;
    std::vector<const Event*> events;
    std::size_t bytes = 0;
    auto it = dead_.lower_bound(from);
    for (; it != dead_.end() && events.size() < limit; ++it) {
      const Outstanding& o = outstanding_.at(*it);
      // (With a store the payload's size is known once read: the page is
      // cut on keys and errors, and payloads are bounded per timer.)
      const std::size_t b = o.event.blob.key().size() +
                            o.event.blob.payload().size() + o.error.size();
      if (!events.empty() && bytes + b > max_bytes) break;
      bytes += b;
      events.push_back(&o.event);
    }
    if (it != dead_.end()) page.next = *it;
    std::vector<Event> full;
    if (store_ != nullptr) {
      std::vector<std::uint64_t> unreadable;
      ReadPayloads(events, full, unreadable);
      if (!unreadable.empty()) {
        page.error = Status::Internal(
            "the payloads of " + std::to_string(unreadable.size()) +
            " dead letters cannot be read (a damaged store; see the log)");
        done(std::move(page));
        return;
      }
    } else {
      for (const Event* e : events) full.push_back(CopyOf(*e));
    }
    for (Event& e : full) {
      const std::uint64_t id = e.id;
      page.letters.push_back({std::move(e), outstanding_.at(id).error});
    }
    done(std::move(page));
  });
}

std::vector<std::uint64_t> Dispatcher::DeadOrAll(
    const std::vector<std::uint64_t>& ids) const {
  return ids.empty() ? std::vector<std::uint64_t>(dead_.begin(), dead_.end())
                     : ids;
}

void Dispatcher::RequeueDeadLetters(
    std::vector<std::uint64_t> ids,
    std::function<void(Status, LeaseResult)> done) {
  asio::post(strand_, [this, ids = std::move(ids), done = std::move(done)] {
    LeaseResult result;
    const std::vector<std::uint64_t> targets = DeadOrAll(ids);
    for (std::uint64_t id : targets) {
      auto it = outstanding_.find(id);
      if (it == outstanding_.end() || !it->second.dead) {
        result.unknown.push_back(id);
        continue;
      }
      Outstanding& o = it->second;
      o.dead = false;
      o.event.attempt = 0;
      o.error.clear();
      dead_.erase(id);
      ready_.push_back(id);
      if (o.fate_stored) {
        if (!fates_) fates_.emplace(store_->NewBatch());
        fates_->DeleteFate(id);
        o.fate_stored = false;
      }
      ++result.done;
    }
    counters_.dead_letters.fetch_sub(result.done);
    counters_.ready.fetch_add(result.done);
    mine_.dead_letters.fetch_sub(result.done, std::memory_order_relaxed);
    mine_.ready.fetch_add(result.done, std::memory_order_relaxed);
    Pump();
    if (!fates_) {
      done(Status::Ok(), std::move(result));
      return;
    }
    // Answered once durable: a requeue acknowledged survives a crash (they
    // may be delivered meanwhile; a failed write leaves them dead letters
    // after a restart, and says so).
    store_->Commit(*fates_,
                   [done = std::move(done), result = std::move(result)](
                       Status s) mutable { done(s, std::move(result)); });
    fates_.reset();
  });
}

void Dispatcher::PurgeDeadLetters(
    std::vector<std::uint64_t> ids,
    std::function<void(Status, LeaseResult)> done) {
  asio::post(strand_, [this, ids = std::move(ids), done = std::move(done)] {
    LeaseResult result;
    const std::vector<std::uint64_t> targets = DeadOrAll(ids);
    std::optional<Store::Batch> batch;
    if (store_ != nullptr) batch.emplace(store_->NewBatch());
    for (std::uint64_t id : targets) {
      auto it = outstanding_.find(id);
      if (it == outstanding_.end() || !it->second.dead) {
        result.unknown.push_back(id);
        continue;
      }
      if (batch) {
        batch->DeleteEvent(id);
        batch->DeletePayload(PayloadIdOf(it->second.event.blob));
        batch->DeleteFate(id);
      }
      dead_.erase(id);
      outstanding_.erase(it);
      ++result.done;
    }
    counters_.dead_letters.fetch_sub(result.done);
    mine_.dead_letters.fetch_sub(result.done, std::memory_order_relaxed);
    if (!batch) {
      refs_->Release(id_, result.done);
      done(Status::Ok(), std::move(result));
      return;
    }
    store_->Commit(*batch, [this, done = std::move(done),
                            result = std::move(result)](Status s) mutable {
      // Not durable: they come back after a restart, still dead letters.
      if (s.ok()) refs_->Release(id_, result.done);
      done(s, std::move(result));
    });
  });
}

}  // namespace delayd
