// Dispatcher: dead letters. An event whose last attempt (the policy's
// max_attempts) fails is kept apart: not delivered, listed on request,
// requeued (attempts from zero) or purged. Its fate record says so in the
// store, so that it stays a dead letter across restarts.
#include "server/common/limit_log.h"
#include "server/core/dispatcher.h"

namespace delayd {
namespace {

// `e` with `payload` (by default its own).
Event CopyOf(const Event& e, std::string_view payload) {
  return Event{e.id,      e.ns,        Blob(e.blob.key(), payload),
               e.version, e.fire_time, e.fired_at,
               e.attempt, e.reason};
}
Event CopyOf(const Event& e) { return CopyOf(e, e.blob.payload()); }

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
    // With a store a payload's size is known only once read, so candidates
    // are read a few at a time and the page stops at the first one that does
    // not fit: a page, and the memory a call takes, stay near max_bytes
    // whatever the page size (up to 1000 payloads of up to the payload
    // limit each).
    constexpr std::size_t kChunk = 32;
    DeadLetterPage page;
    std::size_t bytes = 0;
    auto it = dead_.lower_bound(from);
    while (it != dead_.end() && page.letters.size() < limit) {
      std::vector<std::uint64_t> ids;
      for (auto c = it; c != dead_.end() && ids.size() < kChunk &&
                        page.letters.size() + ids.size() < limit;
           ++c) {
        ids.push_back(*c);
      }
      std::vector<std::string> payloads;
      std::vector<bool> readable(ids.size(), true);
      Status read;
      if (store_ != nullptr) {
        std::vector<std::uint64_t> payload_ids;
        for (std::uint64_t id : ids) {
          payload_ids.push_back(PayloadIdOf(outstanding_.at(id).event.blob));
        }
        read = store_->GetPayloads(payload_ids, &payloads, &readable);
      }
      for (std::size_t j = 0; j < ids.size(); ++j) {
        const Outstanding& o = outstanding_.at(ids[j]);
        if (!readable[j]) {
          page.letters.clear();
          page.next.reset();
          page.error = Status::Internal("the payload of dead letter " +
                                        std::to_string(ids[j]) + " (key '" +
                                        std::string(o.event.blob.key()) +
                                        "') cannot be read: " + read.message());
          done(std::move(page));
          return;
        }
        const std::string_view payload = store_ != nullptr
                                             ? std::string_view(payloads[j])
                                             : o.event.blob.payload();
        std::string error = ErrorOf(ids[j], o);
        const std::size_t b =
            o.event.blob.key().size() + payload.size() + error.size();
        if (!page.letters.empty() && bytes + b > max_bytes) {
          page.next = ids[j];
          done(std::move(page));
          return;
        }
        bytes += b;
        page.letters.push_back({CopyOf(o.event, payload), std::move(error)});
        ++it;
      }
    }
    if (it != dead_.end()) page.next = *it;
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
