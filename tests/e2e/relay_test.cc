// A worker or watcher subscribed to any node of a cluster gets the events
// of every partition of its namespace, relayed from their owners, and its
// Ack, Nack and ExtendLease reach the owners through the node it calls.
// Its max_in_flight is split between the owners, its max_events holds
// across them, and events its client never got go back to their owners
// uncounted. Real processes on one PostgreSQL.
#include <set>

#include "tests/e2e/cluster_harness.h"

namespace delayd::testing {
namespace {

v1::SubscribeRequest Worker(std::uint32_t max_in_flight,
                            std::uint64_t max_events = 0) {
  v1::SubscribeRequest req;
  req.set_mode(v1::SubscribeRequest::WORKER);
  req.set_max_in_flight(max_in_flight);
  req.set_max_events(max_events);
  req.mutable_ack_timeout()->set_seconds(60);
  return req;
}

template <typename Req>
Req About(const std::vector<std::uint64_t>& ids) {
  Req req;
  req.set_namespace_("jobs");
  for (auto id : ids) req.add_event_ids(id);
  return req;
}

class Relaying : public TwoNodes {
 protected:
  // Sets `n` timers due at `at` (now if 0) through a; how many of them b
  // owns.
  int SetDue(int n, WallNanos at = 0) {
    SetAll(n, at != 0 ? at : WallNow(), {stub_a_.get()});
    int on_b = 0;
    for (int i = 0; i < n; ++i) {
      on_b += OwnerOf("job-" + std::to_string(i)) == "b";
    }
    return on_b;
  }
};

// A stream's registration message means every owner has registered it:
// with b frozen, a watcher on a is not told it is registered; once b runs
// again it is, and gets what then comes due on b at once.
TEST_F(Relaying, ARegistrationWaitsForEveryOwner) {
  ASSERT_TRUE(b_->Freeze());
  v1::SubscribeRequest watch;
  watch.set_mode(v1::SubscribeRequest::WATCHER);
  Stream watcher(*stub_a_, watch);
  // (Well within b's lease of 1 s, and a's wait of 2 s.)
  const bool early = watcher.Registered(300ms);
  ASSERT_TRUE(b_->Thaw());
  EXPECT_FALSE(early) << "registered while b could not have registered it";
  ASSERT_TRUE(watcher.Registered());
  const int on_b = SetDue(20);
  ASSERT_GT(on_b, 0);
  ASSERT_TRUE(Eventually([&] { return watcher.size() >= 20; }, 15s))
      << watcher.size() << "\n"
      << a_->output() << b_->output();
}

TEST_F(Relaying, AWorkerOnOneNodeGetsEveryNodesEventsAndAcksThroughIt) {
  v1::SubscribeRequest watch;
  watch.set_mode(v1::SubscribeRequest::WATCHER);
  Stream watcher(*stub_a_, watch);
  Stream worker(*stub_a_, Worker(100));
  // A watcher gets what fires once it is registered: its registration
  // waits for b's.
  ASSERT_TRUE(watcher.Registered());
  ASSERT_TRUE(worker.Registered());
  const int on_b = SetDue(40);
  ASSERT_GT(on_b, 5);
  ASSERT_LT(on_b, 35);
  ASSERT_TRUE(Eventually([&] { return worker.size() >= 40; }, 15s))
      << worker.size() << "\n"
      << a_->output() << b_->output();
  ASSERT_TRUE(Eventually([&] { return watcher.size() >= 40; }, 15s))
      << watcher.size();
  std::set<std::string> keys;
  std::vector<std::uint64_t> ids;
  for (const auto& e : worker.events()) {
    keys.insert(e.key());
    ids.push_back(e.id());
    EXPECT_EQ(e.attempt(), 1u) << e.key();
  }
  EXPECT_EQ(keys.size(), 40u);
  std::set<std::string> watched;
  for (const auto& e : watcher.events()) watched.insert(e.key());
  EXPECT_EQ(watched, keys);

  // Acknowledged through a, each at its owner: none outstanding after.
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::AckResponse acked;
  ASSERT_TRUE(stub_a_->Ack(&ctx, About<v1::AckRequest>(ids), &acked).ok());
  EXPECT_EQ(acked.acked(), 40u);
  EXPECT_EQ(acked.unknown_ids_size(), 0);
  grpc::ClientContext again;
  Prepare(&again);
  ASSERT_TRUE(stub_b_->Ack(&again, About<v1::AckRequest>(ids), &acked).ok());
  EXPECT_EQ(acked.acked(), 0u);
  EXPECT_EQ(acked.unknown_ids_size(), 40);
  EXPECT_EQ(worker.size(), 40u);  // Nothing came twice.
}

TEST_F(Relaying, NackAndExtendLeaseThroughTheEntryNodeReachTheOwner) {
  const std::string key = KeysOf("b", 1)[0];
  Stream worker(*stub_a_, Worker(10));
  v1::SetTimerResponse set;
  const grpc::Status s =
      Retried([&] { return Set(*stub_a_, key, WallNow(), &set); });
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_TRUE(Eventually([&] { return worker.size() == 1; }, 10s));
  const v1::Event first = worker.events()[0];
  EXPECT_EQ(first.key(), key);
  EXPECT_EQ(first.attempt(), 1u);

  auto extend = About<v1::ExtendLeaseRequest>({first.id(), 12345});
  extend.mutable_extension()->set_seconds(30);
  v1::ExtendLeaseResponse extended;
  // (Retried: an owner still loading a partition answers UNAVAILABLE for
  // its ids, 12345's included, rather than calling them unknown.)
  const grpc::Status ext = Retried([&] {
    grpc::ClientContext c1;
    Prepare(&c1);
    extended.Clear();
    return stub_a_->ExtendLease(&c1, extend, &extended);
  });
  ASSERT_TRUE(ext.ok()) << ext.error_message();
  EXPECT_EQ(extended.extended(), 1u);
  ASSERT_EQ(extended.unknown_ids_size(), 1);
  EXPECT_EQ(extended.unknown_ids(0), 12345u);

  auto nack = About<v1::NackRequest>({first.id()});
  nack.mutable_retry_after()->set_nanos(1000);
  grpc::ClientContext c2;
  Prepare(&c2);
  v1::NackResponse nacked;
  ASSERT_TRUE(stub_a_->Nack(&c2, nack, &nacked).ok());
  EXPECT_EQ(nacked.nacked(), 1u);
  ASSERT_TRUE(Eventually([&] { return worker.size() == 2; }, 10s));
  EXPECT_EQ(worker.events()[1].id(), first.id());
  EXPECT_EQ(worker.events()[1].attempt(), 2u);

  grpc::ClientContext c3;
  Prepare(&c3);
  v1::AckResponse acked;
  ASSERT_TRUE(
      stub_a_->Ack(&c3, About<v1::AckRequest>({first.id()}), &acked).ok());
  EXPECT_EQ(acked.acked(), 1u);
}

TEST_F(Relaying, MaxInFlightIsSplitBetweenTheOwners) {
  const int on_b = SetDue(30);
  ASSERT_GT(on_b, 3);
  ASSERT_LT(on_b, 27);
  // 4 over two nodes: 2 from each, and no more while none is acknowledged.
  Stream worker(*stub_a_, Worker(4));
  ASSERT_TRUE(Eventually([&] { return worker.size() >= 4; }, 10s))
      << worker.size();
  // (Anything beyond would come within this wait.)
  EXPECT_FALSE(Eventually([&] { return worker.size() > 4; }, 1s));
  int from_b = 0;
  for (const auto& e : worker.events()) from_b += OwnerOf(e.key()) == "b";
  EXPECT_EQ(from_b, 2);
}

TEST_F(Relaying, MaxEventsHoldsAcrossOwnersAndWhatIsBeyondGoesBack) {
  // 5 due on a fill a worker on a that takes 5 in all; 10 then due on b
  // are beyond it: b offers them (up to 5), a gives them back.
  for (const auto& key : KeysOf("a", 5)) {
    v1::SetTimerResponse r;
    ASSERT_TRUE(
        Retried([&] { return Set(*stub_a_, key, WallNow(), &r); }).ok());
  }
  auto req = Worker(100, 5);
  req.set_keep_leases(true);
  std::set<std::string> taken;
  {
    Stream first(*stub_a_, req);
    ASSERT_TRUE(Eventually([&] { return first.size() >= 5; }, 10s));
    for (const auto& key : KeysOf("b", 10)) {
      v1::SetTimerResponse r;
      ASSERT_TRUE(
          Retried([&] { return Set(*stub_a_, key, WallNow(), &r); }).ok());
    }
    EXPECT_FALSE(Eventually([&] { return first.size() > 5; }, 1s));
    for (const auto& e : first.events()) taken.insert(e.key());
  }
  // b's 10 reach the next worker at once (not after the first's 60 s ack
  // timeout), as first attempts; a's 5 stay leased.
  Stream next(*stub_b_, Worker(100));
  ASSERT_TRUE(Eventually([&] { return next.size() >= 10; }, 10s))
      << next.size() << "\n"
      << a_->output() << b_->output();
  EXPECT_FALSE(Eventually([&] { return next.size() > 10; }, 1s));
  for (const auto& e : next.events()) {
    EXPECT_FALSE(taken.contains(e.key())) << e.key();
    EXPECT_EQ(e.attempt(), 1u) << e.key();
  }
}

}  // namespace
}  // namespace delayd::testing
