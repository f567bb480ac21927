// DelaydService::ByEventOwner: a call on events (or, with `all`, on a
// whole namespace) answered part by part by the nodes that own them.
#ifndef DELAYD_SERVER_API_SERVICE_SPLIT_H_
#define DELAYD_SERVER_API_SERVICE_SPLIT_H_

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "server/api/service.h"

namespace delayd {

template <typename Call, typename Local, typename Merge>
auto DelaydService::ByEventOwner(
    const Call& call, RpcMetrics::Method method,
    std::map<std::string, std::vector<std::uint64_t>> owners, Local local,
    Merge add) -> decltype(call.reactor()) {
  using Req = std::decay_t<decltype(call.req())>;
  using Resp = std::remove_pointer_t<decltype(call.resp())>;
  // This node's part, its namespace pinned until answered.
  auto here = [this, call, local](std::vector<std::uint64_t> ids,
                                  std::function<void(Status, Resp)> done) {
    // An event of a partition this node is taking is not unknown: not yet
    // known. (With `all`, no ids: the whole namespace.)
    if (Status s =
            ids.empty() ? scheduler_.Loading() : scheduler_.UnservedEvents(ids);
        !s.ok()) {
      return done(s, Resp());
    }
    NamespacePin pin;
    if (!Namespace(call.req().namespace_(), &pin).ok()) {
      Resp none;  // No such namespace: none of its events are outstanding.
      for (auto id : ids) none.add_unknown_ids(id);
      return done(Status::Ok(), std::move(none));
    }
    Dispatcher& d = scheduler_.dispatcher(pin.id());
    local(d, std::move(ids),
          [done = std::move(done), pin = std::move(pin)](Status s, Resp r) {
            done(s, std::move(r));
          });
  };
  if (owners.size() <= 1 && (owners.empty() || owners.begin()->first.empty())) {
    auto ids = owners.empty() ? std::vector<std::uint64_t>()
                              : std::move(owners.begin()->second);
    here(std::move(ids), [call](Status s, Resp r) {
      if (s.ok()) call.resp()->Swap(&r);
      call.Reply(s);
    });
    return call.reactor();
  }
  // Answered once every part is; an owner that cannot be reached fails the
  // call (the parts done stay done: a repeat finds them unknown).
  struct Join {
    Mutex mu;
    std::size_t pending GUARDED_BY(mu);
    Status failed GUARDED_BY(mu);
  };
  auto join = std::make_shared<Join>();
  {
    MutexLock lock(&join->mu);
    join->pending = owners.size();
  }
  auto part_done = [join, call, add](Status s, const Resp& part) {
    Status failed;
    {
      MutexLock lock(&join->mu);
      if (!s.ok()) {
        if (join->failed.ok()) join->failed = std::move(s);
      } else {
        add(call.resp(), part);
        call.resp()->mutable_unknown_ids()->MergeFrom(part.unknown_ids());
      }
      if (--join->pending != 0) return;
      failed = join->failed;
    }
    call.Reply(failed);
  };
  for (auto& part_of : owners) {
    // (Named, not bound: lambdas capture it.)
    const std::string& owner = part_of.first;
    std::vector<std::uint64_t>& ids = part_of.second;
    if (owner.empty()) {
      here(std::move(ids), part_done);
      continue;
    }
    struct Remote {
      grpc::ByteBuffer request, response;
    };
    auto remote = std::make_shared<Remote>();
    Req part = call.req();
    part.clear_event_ids();
    for (std::uint64_t id : ids) part.add_event_ids(id);
    bool own;
    grpc::SerializationTraits<Req>::Serialize(part, &remote->request, &own);
    forwarder_->Forward(
        call.ctx(), rpc_[method].name(), &remote->request, &remote->response,
        owner, rpc_.forwarded(method), Call::kNamesOwner,
        [remote, part_done, owner](grpc::Status s) {
          Resp answer;
          if (s.ok() && !grpc::SerializationTraits<Resp>::Deserialize(
                             &remote->response, &answer)
                             .ok()) {
            s = grpc::Status(grpc::StatusCode::INTERNAL, "not an answer");
          }
          part_done(s.ok() ? Status::Ok()
                           : Status::Unavailable("forwarded to " + owner +
                                                 ": " + s.error_message()),
                    answer);
        });
  }
  return call.reactor();
}

template <typename Req, typename Resp, typename Local, typename Merge>
grpc::ServerUnaryReactor* DelaydService::FromEveryOwner(
    const Unary<Req, Resp>& call, RpcMetrics::Method method, Local local,
    Merge merge) {
  struct Join {
    Mutex mu;
    std::vector<Resp> answers GUARDED_BY(mu);
    std::size_t pending GUARDED_BY(mu);
    Status failed GUARDED_BY(mu);
  };
  const auto owners = AllOwners(*call.ctx());
  auto join = std::make_shared<Join>();
  {
    MutexLock lock(&join->mu);
    join->pending = owners.size();
  }
  auto part_done = [call, join, merge](Status s, Resp answer) {
    Status failed;
    std::vector<Resp> answers;
    {
      MutexLock lock(&join->mu);
      if (!s.ok() && join->failed.ok()) join->failed = std::move(s);
      join->answers.push_back(std::move(answer));
      if (--join->pending != 0) return;
      failed = join->failed;
      answers = std::move(join->answers);
    }
    if (failed.ok()) merge(answers, call.resp());
    call.Reply(failed);
  };
  for (const auto& part_of : owners) {
    const std::string& owner = part_of.first;  // (Lambdas capture it.)
    if (owner.empty()) {
      // This node's part is not known while a partition it holds loads.
      if (Status s = scheduler_.Loading(); !s.ok()) {
        part_done(std::move(s), Resp());
      } else {
        local(part_done);
      }
      continue;
    }
    auto response = std::make_shared<grpc::ByteBuffer>();
    forwarder_->Forward(
        call.ctx(), rpc_[method].name(), call.in(), response.get(), owner,
        rpc_.forwarded(method), true,
        [response, owner, part_done](grpc::Status s) {
          Resp answer;
          if (s.ok() && !grpc::SerializationTraits<Resp>::Deserialize(
                             response.get(), &answer)
                             .ok()) {
            s = grpc::Status(grpc::StatusCode::INTERNAL, "not an answer");
          }
          part_done(s.ok() ? Status::Ok()
                           : Status::Unavailable("asking " + owner + ": " +
                                                 s.error_message()),
                    std::move(answer));
        });
  }
  return call.reactor();
}

}  // namespace delayd

#endif  // DELAYD_SERVER_API_SERVICE_SPLIT_H_
