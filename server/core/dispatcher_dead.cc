// Dispatcher: dead letters. An event whose last attempt (the policy's
// max_attempts) fails is kept apart: not delivered, listed on request,
// requeued (attempts from zero) or purged. Its fate record says so in the
// store, so that it stays a dead letter across restarts.
#include "server/common/limit_log.h"
#include "server/core/dispatcher.h"
#include "server/core/payload_ref.h"

namespace delayd {

void Dispatcher::CloseRun(const Outstanding& o) {
  const std::string_view key = o.event.blob.key();
  if (run_closed_ && !key.empty() && key[0] == '\0') run_closed_(id_, key);
}

void Dispatcher::Bury(std::uint64_t event_id, Outstanding& o) {
  LeaveFlight(o);
  CloseRun(o);
  o.dead = true;
  dead_.insert(event_id);
  counters_.dead_letters.fetch_add(1);
  mine_.dead_letters.fetch_add(1, std::memory_order_relaxed);
  if (store_ != nullptr) {
    fates_.PutFate(event_id, PayloadIdOf(o.event.blob),
                   {o.event.attempt, true, ErrorOf(event_id, o)});
    Touch(fates_, o.event);
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
    Event copy = CopyWithPayload(o.event, o.event.blob.payload());
    copy.reason = Reason::kDeadLettered;
    const Event* one = &copy;
    ToWatchers({&one, 1});
  }
}

void Dispatcher::RestoreDeadLetters(std::vector<DeadLetter> letters) {
  asio::post(strand_, [this, letters = std::move(letters)]() mutable {
    on_strand_.Enter();
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
  asio::post(strand_, [this, from, limit, max_bytes,
                       done = std::move(done)]() mutable {
    on_strand_.Enter();
    // The candidates, cut on what is in memory: keys, errors, and the
    // payloads too without a store.
    std::vector<DeadLetter> candidates;
    std::size_t bytes = 0;
    auto it = dead_.lower_bound(from);
    for (; it != dead_.end() && candidates.size() < limit; ++it) {
      const Outstanding& o = outstanding_.at(*it);
      std::string error = ErrorOf(*it, o);
      const std::size_t b =
          o.event.blob.key().size() + error.size() +
          (store_ == nullptr ? o.event.blob.payload().size() : 0);
      if (!candidates.empty() && bytes + b > max_bytes) break;
      bytes += b;
      candidates.push_back(
          {CopyWithPayload(o.event, o.event.blob.payload()), std::move(error)});
    }
    std::optional<std::uint64_t> next;
    if (it != dead_.end()) next = *it;
    if (store_ == nullptr) {
      done(DeadLetterPage{std::move(candidates), next, Status::Ok()});
      return;
    }
    // With a store, the payloads are read on the read pool while the strand
    // goes on, as the store was now: one purged meanwhile is left out.
    asio::post(
        reads_, [this, candidates = std::move(candidates), next, max_bytes,
                 view = store_->NewView(), done = std::move(done)]() mutable {
          done(ReadDeadLetters(std::move(candidates), next, max_bytes, *view));
        });
  });
}

DeadLetterPage Dispatcher::ReadDeadLetters(std::vector<DeadLetter> candidates,
                                           std::optional<std::uint64_t> next,
                                           std::size_t max_bytes,
                                           const Store::View& view) const {
  // A payload's size is known only once read, so they are read a few at a
  // time and the page stops at the first that does not fit: a page, and the
  // memory a call takes, stay near max_bytes whatever the page size (up to
  // 1000 payloads of up to the payload limit each).
  constexpr std::size_t kChunk = 32;
  DeadLetterPage page;
  std::size_t bytes = 0;
  for (std::size_t from = 0; from < candidates.size(); from += kChunk) {
    const std::size_t n = std::min(kChunk, candidates.size() - from);
    std::vector<std::uint64_t> ids;
    for (std::size_t j = from; j < from + n; ++j) {
      ids.push_back(PayloadIdOf(candidates[j].event.blob));
    }
    std::vector<std::string> payloads;
    std::vector<bool> readable, gone;
    const Status read =
        store_->GetPayloads(ids, view, &payloads, &readable, &gone);
    for (std::size_t j = 0; j < n; ++j) {
      DeadLetter& c = candidates[from + j];
      if (gone[j]) continue;  // Purged (or requeued and done) since.
      if (!readable[j]) {
        return DeadLetterPage{
            {},
            std::nullopt,
            Status::ReadFailed(read, "the payload of dead letter " +
                                         std::to_string(c.event.id) +
                                         " (key '" +
                                         std::string(c.event.blob.key()) +
                                         "') cannot be read")};
      }
      const std::size_t b =
          c.event.blob.key().size() + payloads[j].size() + c.error.size();
      if (!page.letters.empty() && bytes + b > max_bytes) {
        page.next = c.event.id;
        return page;
      }
      bytes += b;
      c.event = CopyWithPayload(c.event, payloads[j]);
      page.letters.push_back(std::move(c));
    }
  }
  page.next = next;
  return page;
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
    on_strand_.Enter();
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
    asio::post(strand_, [this, call] {
      on_strand_.Enter();
      NextDeadLetters(call);
    });
  });
}

void Dispatcher::RequeueOrPurge(bool purge,
                                const std::vector<std::uint64_t>& ids,
                                LeaseResult& result,
                                std::function<void(Status)> then) {
  Batch batch;
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
      if (store_ != nullptr) {
        batch.RemoveEvent(id, PayloadIdOf(o.event.blob), true);
        Touch(batch, o.event);
      }
      Forget(it);
      continue;
    }
    o.dead = false;
    o.event.attempt = 0;
    SetError(id, o, {});
    ready_.push_back(id);
    if (store_ != nullptr && o.fate_stored) {
      batch.RemoveFate(id, PayloadIdOf(o.event.blob));
      Touch(batch, o.event);
      o.fate_stored = false;
    }
  }
  result.done += n;
  counters_.dead_letters.fetch_sub(n);
  mine_.dead_letters.fetch_sub(n, std::memory_order_relaxed);
  if (!purge) {
    counters_.ready.fetch_add(n);
    mine_.ready.fetch_add(n);
    Pump();
  }
  if (batch.empty()) {
    if (purge && n != 0) refs_->Release(id_, n);
    then(Status::Ok());
    return;
  }
  // Answered once durable. A requeue acknowledged survives a crash (its
  // events may be delivered meanwhile; if the write fails they are dead
  // letters again after a restart, and the answer says so). A purge that
  // is not durable comes back after a restart, still dead letters.
  store_->Commit(batch, [this, purge, n, then = std::move(then)](Status s) {
    if (purge && s.ok()) refs_->Release(id_, n);
    then(s);
  });
}

}  // namespace delayd
