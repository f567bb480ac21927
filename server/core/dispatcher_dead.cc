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
    fates_->PutFate(event_id, {o.event.attempt, true, ErrorOf(event_id, o)});
    o.fate_stored = true;
  }
  LogRepeated(
      "dead-letter",
      "namespace '" + name_ + "', key '" + std::string(o.event.blob.key()) +
          "', event " + std::to_string(event_id) + ": a dead letter after " +
          std::to_string(o.event.attempt) + " attempts" +
          (o.has_error ? " (last error: " + ErrorOf(event_id, o) + ")" : ""));
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
      SetError(id, o, std::move(d.error));
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
                            o.event.blob.payload().size() +
                            ErrorOf(*it, o).size();
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
      page.letters.push_back({std::move(e), ErrorOf(id, outstanding_.at(id))});
    }
    done(std::move(page));
  });
}

struct Dispatcher::DeadLetterCall {
  bool purge = false;
  bool all = false;
  std::vector<std::uint64_t> ids;  // When not all.
  std::uint64_t next = 0;          // All: the lowest id not yet visited,
  std::uint64_t last = 0;          // up to the highest dead at the call.
  LeaseResult result;
  std::function<void(Status, LeaseResult)> done;
};

void Dispatcher::RequeueDeadLetters(
    std::vector<std::uint64_t> ids,
    std::function<void(Status, LeaseResult)> done) {
  StartDeadLetters(false, std::move(ids), std::move(done));
}

void Dispatcher::PurgeDeadLetters(
    std::vector<std::uint64_t> ids,
    std::function<void(Status, LeaseResult)> done) {
  StartDeadLetters(true, std::move(ids), std::move(done));
}

void Dispatcher::StartDeadLetters(
    bool purge, std::vector<std::uint64_t> ids,
    std::function<void(Status, LeaseResult)> done) {
  auto call = std::make_shared<DeadLetterCall>();
  call->purge = purge;
  call->all = ids.empty();
  call->ids = std::move(ids);
  call->done = std::move(done);
  asio::post(strand_, [this, call] {
    if (call->all && !dead_.empty()) call->last = *dead_.rbegin();
    NextDeadLetters(call);
  });
}

void Dispatcher::NextDeadLetters(std::shared_ptr<DeadLetterCall> call) {
  std::vector<std::uint64_t> chunk;
  if (!call->all) {
    chunk.swap(call->ids);
  } else {
    for (auto it = dead_.lower_bound(call->next);
         it != dead_.end() && *it <= call->last && chunk.size() < kDeadChunk;
         ++it) {
      chunk.push_back(*it);
    }
    if (chunk.empty()) {
      call->done(Status::Ok(), std::move(call->result));
      return;
    }
    call->next = chunk.back() + 1;
  }
  RequeueOrPurge(call->purge, chunk, call->result, [this, call](Status s) {
    if (!s.ok() || !call->all) {
      call->done(s, std::move(call->result));
      return;
    }
    asio::post(strand_, [this, call] { NextDeadLetters(call); });
  });
}

void Dispatcher::RequeueOrPurge(bool purge,
                                const std::vector<std::uint64_t>& ids,
                                LeaseResult& result,
                                std::function<void(Status)> then) {
  std::optional<Store::Batch> batch;
  if (store_ != nullptr) batch.emplace(store_->NewBatch());
  std::uint32_t n = 0;
  for (std::uint64_t id : ids) {
    auto it = outstanding_.find(id);
    if (it == outstanding_.end() || !it->second.dead) {
      result.unknown.push_back(id);
      continue;
    }
    Outstanding& o = it->second;
    dead_.erase(id);
    ++n;
    if (purge) {
      if (batch) {
        batch->DeleteEvent(id);
        batch->DeletePayload(PayloadIdOf(o.event.blob));
        batch->DeleteFate(id);
      }
      Forget(it);
      continue;
    }
    o.dead = false;
    o.event.attempt = 0;
    SetError(id, o, {});
    ready_.push_back(id);
    if (batch && o.fate_stored) {
      batch->DeleteFate(id);
      o.fate_stored = false;
    }
  }
  result.done += n;
  counters_.dead_letters.fetch_sub(n);
  mine_.dead_letters.fetch_sub(n, std::memory_order_relaxed);
  if (!purge) {
    counters_.ready.fetch_add(n);
    mine_.ready.fetch_add(n, std::memory_order_relaxed);
    Pump();
  }
  if (!batch || batch->empty()) {
    if (purge && n != 0) refs_->Release(id_, n);
    then(Status::Ok());
    return;
  }
  // Answered once durable. A requeue acknowledged survives a crash (its
  // events may be delivered meanwhile; if the write fails they are dead
  // letters again after a restart, and the answer says so). A purge that
  // is not durable comes back after a restart, still dead letters.
  store_->Commit(*batch, [this, purge, n, then = std::move(then)](Status s) {
    if (purge && s.ok()) refs_->Release(id_, n);
    then(s);
  });
}

}  // namespace delayd
