// Dead letters: ListDeadLetters (read on the namespace),
// RequeueDeadLetters and PurgeDeadLetters (write on it).
#include <algorithm>

#include "server/api/service.h"
#include "server/api/service_split.h"
#include "server/api/stream.h"

namespace delayd {
namespace {

// About as much as a ListTimers page holds.
constexpr std::size_t kPageBytes = 3 << 20;

// The first `limit` dead letters of the nodes' pages in id order (about
// kPageBytes at most), and the next page's first id: the first left out,
// else the least next id of a node.
void MergePages(std::vector<v1::ListDeadLettersResponse>& pages,
                std::size_t limit, v1::ListDeadLettersResponse* out) {
  std::vector<v1::DeadLetter*> all;
  std::optional<std::uint64_t> next;
  for (auto& p : pages) {
    for (auto& l : *p.mutable_dead_letters()) all.push_back(&l);
    if (!p.next_page_token().empty()) {
      const std::uint64_t n = std::stoull(p.next_page_token());
      if (!next || n < *next) next = n;
    }
  }
  std::sort(all.begin(), all.end(), [](const auto* x, const auto* y) {
    return x->event().id() < y->event().id();
  });
  std::size_t bytes = 0;
  for (v1::DeadLetter* l : all) {
    const std::size_t b = l->ByteSizeLong();
    if (out->dead_letters_size() > 0 &&
        (static_cast<std::size_t>(out->dead_letters_size()) == limit ||
         bytes + b > kPageBytes)) {
      next = std::min(next.value_or(l->event().id()), l->event().id());
      break;
    }
    bytes += b;
    out->add_dead_letters()->Swap(l);
  }
  if (next) out->set_next_page_token(std::to_string(*next));
}

}  // namespace

void DelaydService::ListLocalDeadLetters(
    const v1::ListDeadLettersRequest& req, std::size_t limit,
    std::uint64_t from,
    std::function<void(Status, v1::ListDeadLettersResponse)> done) {
  NamespacePin pin;
  if (!Namespace(req.namespace_(), &pin).ok()) {
    return done(Status::Ok(), {});  // None.
  }
  std::string name = req.namespace_().empty() ? "default" : req.namespace_();
  scheduler_.dispatcher(pin.id()).ListDeadLetters(
      from, limit, kPageBytes,
      [done = std::move(done), pin = std::move(pin),
       name = std::move(name)](DeadLetterPage page) {
        v1::ListDeadLettersResponse resp;
        for (const DeadLetter& l : page.letters) {
          auto* out = resp.add_dead_letters();
          ToProto(name, l.event, out->mutable_event());
          out->set_error(l.error);
        }
        if (page.next) resp.set_next_page_token(std::to_string(*page.next));
        done(page.error, std::move(resp));
      });
}

grpc::ServerUnaryReactor* DelaydService::DoListDeadLetters(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  const auto call =
      Start<v1::ListDeadLettersRequest, v1::ListDeadLettersResponse>(
          ctx, in, out, RpcMetrics::kListDeadLetters, request_limits_.other);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  std::size_t limit = 0;
  std::uint64_t from = 0;
  Status s = Authorize(call.caller(), req.namespace_(), kRead);
  if (s.ok()) s = validator_.DeadLetterPage(req, &limit, &from);
  if (!s.ok()) return call.Reply(s);
  // On a cluster node, each node owning partitions lists a page from the
  // same id; the pages merge by id.
  return FromEveryOwner(
      call, RpcMetrics::kListDeadLetters,
      [this, &req, limit, from](auto done) {
        ListLocalDeadLetters(req, limit, from, std::move(done));
      },
      [limit](std::vector<v1::ListDeadLettersResponse>& pages,
              v1::ListDeadLettersResponse* out) {
        MergePages(pages, limit, out);
      });
}

grpc::ServerUnaryReactor* DelaydService::DoRequeueDeadLetters(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return ChangeDeadLetters(ctx, in, out, RpcMetrics::kRequeueDeadLetters,
                           &Dispatcher::RequeueDeadLetters);
}

grpc::ServerUnaryReactor* DelaydService::DoPurgeDeadLetters(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
  return ChangeDeadLetters(ctx, in, out, RpcMetrics::kPurgeDeadLetters,
                           &Dispatcher::PurgeDeadLetters);
}

grpc::ServerUnaryReactor* DelaydService::ChangeDeadLetters(
    const CallIn& ctx, const grpc::ByteBuffer* in, grpc::ByteBuffer* out,
    RpcMetrics::Method method, DeadLetterChange change) {
  const auto call = Start<v1::DeadLettersRequest, v1::DeadLettersResponse>(
      ctx, in, out, method, request_limits_.ack);
  if (call.answered()) return call.reactor();
  const auto& req = call.req();
  std::vector<std::uint64_t> ids;
  Status s = Authorize(call.caller(), req.namespace_(), kWrite);
  if (s.ok()) s = validator_.DeadLetterIds(req, &ids);
  if (!s.ok()) return call.Reply(s);
  // On a cluster node: the ids to their owners, or `all` to every node.
  return ByEventOwner(
      call, method,
      req.all() ? AllOwners(*ctx) : EventOwners(req.event_ids(), *ctx),
      [change](Dispatcher& d, std::vector<std::uint64_t> ids,
               std::function<void(Status, v1::DeadLettersResponse)> done) {
        (d.*change)(std::move(ids),
                    [done = std::move(done)](Status s, LeaseResult r) {
                      v1::DeadLettersResponse resp;
                      resp.set_count(r.done);
                      for (auto id : r.unknown) resp.add_unknown_ids(id);
                      done(s, std::move(resp));
                    });
      },
      [](v1::DeadLettersResponse* sum, const v1::DeadLettersResponse& part) {
        sum->set_count(sum->count() + part.count());
      });
}

}  // namespace delayd
