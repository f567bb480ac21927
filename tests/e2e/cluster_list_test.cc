// Listings and dead letters cover the whole cluster from any node:
// ListTimers pages through every node's partitions, ListSchedules and
// ListDeadLetters merge the nodes' pages in order, and Requeue/Purge
// reach each dead letter's owner. Real processes on one PostgreSQL.
#include <set>

#include "tests/e2e/cluster_harness.h"

namespace delayd::testing {
namespace {

class ClusterLists : public TwoNodes {
 protected:
  // Every timer key of "jobs" through `stub`, `page` at a time.
  static std::vector<std::string> ListAll(v1::Delayd::Stub& stub, int page,
                                          const std::string& prefix = "") {
    std::vector<std::string> keys;
    std::string token;
    for (int pages = 0; pages < 1000; ++pages) {
      v1::ListTimersRequest req;
      req.set_namespace_("jobs");
      req.set_key_prefix(prefix);
      req.set_page_size(page);
      req.set_page_token(token);
      v1::ListTimersResponse resp;
      grpc::ClientContext ctx;
      Prepare(&ctx);
      const grpc::Status s = stub.ListTimers(&ctx, req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) break;
      EXPECT_LE(resp.timers_size(), page);
      for (const auto& t : resp.timers()) keys.push_back(t.key());
      token = resp.next_page_token();
      if (token.empty()) break;
    }
    return keys;
  }

  std::vector<v1::DeadLetter> DeadLetters(v1::Delayd::Stub& stub, int page) {
    std::vector<v1::DeadLetter> all;
    std::string token;
    for (int pages = 0; pages < 1000; ++pages) {
      v1::ListDeadLettersRequest req;
      req.set_namespace_("jobs");
      req.set_page_size(page);
      req.set_page_token(token);
      v1::ListDeadLettersResponse resp;
      grpc::ClientContext ctx;
      Prepare(&ctx);
      const grpc::Status s = stub.ListDeadLetters(&ctx, req, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) break;
      EXPECT_LE(resp.dead_letters_size(), page);
      for (const auto& l : resp.dead_letters()) all.push_back(l);
      token = resp.next_page_token();
      if (token.empty()) break;
    }
    return all;
  }
};

TEST_F(ClusterLists, ListTimersThroughEitherNodeCoversEveryPartition) {
  SetAll(60, WallNow() + 3'600'000'000'000, {stub_a_.get(), stub_b_.get()});
  int on_b = 0;
  for (int i = 0; i < 60; ++i) {
    on_b += OwnerOf("job-" + std::to_string(i)) == "b";
  }
  ASSERT_GT(on_b, 5);
  ASSERT_LT(on_b, 55);
  for (auto* stub : {stub_a_.get(), stub_b_.get()}) {
    for (int page : {7, 1000}) {
      const auto keys = ListAll(*stub, page);
      EXPECT_EQ(keys.size(), 60u) << page;
      EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 60u);
    }
    const auto ones = ListAll(*stub, 5, "job-1");  // job-1, job-10..19
    EXPECT_EQ(ones.size(), 11u);
  }
}

TEST_F(ClusterLists, StatsSumEveryNodeAndCountARelayedWorkerOnce) {
  SetAll(30, WallNow() + 3'600'000'000'000, {stub_a_.get()});
  v1::SubscribeRequest w;
  w.set_mode(v1::SubscribeRequest::WORKER);
  Stream worker(*stub_a_, w);
  v1::SubscribeRequest watch;
  watch.set_mode(v1::SubscribeRequest::WATCHER);
  Stream watcher(*stub_b_, watch);
  for (auto* stub : {stub_a_.get(), stub_b_.get()}) {
    for (const std::string ns : {"", "jobs"}) {
      v1::StatsResponse stats;
      const bool summed = Eventually(
          [&] {
            v1::StatsRequest req;
            req.set_namespace_(ns);
            grpc::ClientContext ctx;
            Prepare(&ctx);
            stats.Clear();
            if (!stub->Stats(&ctx, req, &stats).ok()) return false;
            if (ns.empty() &&
                (stats.pending_timers() != 30 || stats.workers() != 1 ||
                 stats.watchers() != 1 || stats.partitions() != 64)) {
              return false;
            }
            return stats.namespaces_size() == 1 &&
                   stats.namespaces(0).pending_timers() == 30 &&
                   stats.namespaces(0).timers_set() == 30 &&
                   stats.namespaces(0).workers() == 1 &&
                   stats.namespaces(0).watchers() == 1;
          },
          10s);
      EXPECT_TRUE(summed) << "namespace '" << ns
                          << "': " << stats.ShortDebugString();
    }
  }
}

TEST_F(ClusterLists, SchedulesListFromEitherNodeInKeyOrder) {
  std::vector<std::string> keys;
  for (int i = 0; i < 30; ++i) {
    v1::SetScheduleRequest set;
    set.set_namespace_("jobs");
    set.set_key("s-" + std::to_string(100 + i));
    set.mutable_spec()->set_cron("@daily");
    v1::Schedule made;
    const grpc::Status s = Retried([&] {
      grpc::ClientContext ctx;
      Prepare(&ctx);
      return stub_a_->SetSchedule(&ctx, set, &made);
    });
    ASSERT_TRUE(s.ok()) << s.error_message();
    keys.push_back(set.key());
  }
  for (auto* stub : {stub_a_.get(), stub_b_.get()}) {
    std::vector<std::string> listed;
    std::string token;
    for (int pages = 0; pages < 100; ++pages) {
      v1::ListSchedulesRequest req;
      req.set_namespace_("jobs");
      req.set_page_size(4);
      req.set_page_token(token);
      v1::ListSchedulesResponse resp;
      grpc::ClientContext ctx;
      Prepare(&ctx);
      ASSERT_TRUE(stub->ListSchedules(&ctx, req, &resp).ok());
      EXPECT_LE(resp.schedules_size(), 4);
      for (const auto& s : resp.schedules()) listed.push_back(s.key());
      token = resp.next_page_token();
      if (token.empty()) break;
    }
    EXPECT_EQ(listed, keys);  // (Set in key order.)
  }
}

TEST_F(ClusterLists, DeadLettersOfEveryNodeAreListedRequeuedAndPurgedAnywhere) {
  v1::SetPolicyRequest policy;
  policy.set_namespace_("jobs");
  policy.mutable_policy()->set_max_attempts(1);
  grpc::ClientContext pctx;
  Prepare(&pctx);
  v1::Policy applied;
  ASSERT_TRUE(stub_a_->SetPolicy(&pctx, policy, &applied).ok());
  // (Each node applies the cluster's policy within its notification.)
  ASSERT_TRUE(Eventually(
      [&] {
        v1::GetPolicyRequest get;
        get.set_namespace_("jobs");
        grpc::ClientContext ctx;
        Prepare(&ctx);
        v1::Policy p;
        return stub_b_->GetPolicy(&ctx, get, &p).ok() && p.max_attempts() == 1;
      },
      10s));

  v1::SubscribeRequest w;
  w.set_mode(v1::SubscribeRequest::WORKER);
  w.set_max_in_flight(100);
  Stream worker(*stub_a_, w);
  SetAll(20, WallNow(), {stub_a_.get(), stub_b_.get()});
  ASSERT_TRUE(Eventually([&] { return worker.size() >= 20; }, 15s));
  v1::NackRequest nack;
  nack.set_namespace_("jobs");
  for (const auto& e : worker.events()) nack.add_event_ids(e.id());
  grpc::ClientContext nctx;
  Prepare(&nctx);
  v1::NackResponse nacked;
  ASSERT_TRUE(stub_a_->Nack(&nctx, nack, &nacked).ok());
  EXPECT_EQ(nacked.nacked(), 20u);
  worker.Cancel();

  std::vector<v1::DeadLetter> dead;
  ASSERT_TRUE(Eventually(
      [&] { return (dead = DeadLetters(*stub_b_, 3)).size() == 20; }, 10s))
      << dead.size();
  for (std::size_t k = 1; k < dead.size(); ++k) {
    EXPECT_LT(dead[k - 1].event().id(), dead[k].event().id());
  }
  int on_b = 0;
  for (const auto& l : dead) on_b += OwnerOf(l.event().key()) == "b";
  ASSERT_GT(on_b, 0);
  ASSERT_LT(on_b, 20);

  // Five by id through a (of both nodes), then the rest through b.
  v1::DeadLettersRequest requeue;
  requeue.set_namespace_("jobs");
  for (int k = 0; k < 5; ++k) requeue.add_event_ids(dead[k].event().id());
  requeue.add_event_ids(12345);
  grpc::ClientContext rctx;
  Prepare(&rctx);
  v1::DeadLettersResponse changed;
  ASSERT_TRUE(stub_a_->RequeueDeadLetters(&rctx, requeue, &changed).ok());
  EXPECT_EQ(changed.count(), 5u);
  ASSERT_EQ(changed.unknown_ids_size(), 1);
  v1::DeadLettersRequest purge;
  purge.set_namespace_("jobs");
  purge.set_all(true);
  grpc::ClientContext uctx;
  Prepare(&uctx);
  ASSERT_TRUE(stub_b_->PurgeDeadLetters(&uctx, purge, &changed).ok());
  EXPECT_EQ(changed.count(), 15u);
  EXPECT_TRUE(DeadLetters(*stub_a_, 100).empty());
}

}  // namespace
}  // namespace delayd::testing
