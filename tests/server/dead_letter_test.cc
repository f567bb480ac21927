// Dead letters: an event whose last attempt (the policy's max_attempts)
// fails, by Nack or ack timeout, is kept apart exactly once, listed with
// the worker's last error, requeued or purged; dead letters and the
// attempts of failing events survive a restart.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tests/common/temp_dir.h"
#include "tests/server/calls.h"
#include "tests/server/test_client.h"
#include "tests/server/test_stores.h"

namespace delayd::testing {
namespace {

class DeadLetterTest : public ::testing::Test {
 protected:
  static DelaydServer::Options Options(const TestStore* store = nullptr) {
    auto o = TestDaemon::DefaultOptions();
    return store != nullptr ? store->On(o) : o;
  }
  // max_attempts `n`, retries at once.
  void Limit(TestDaemon& d, std::uint32_t n) {
    v1::SetPolicyRequest req;
    req.set_namespace_("jobs");
    req.mutable_policy()->set_max_attempts(n);
    *req.mutable_policy()->mutable_initial_backoff() = Millis(0);
    *req.mutable_policy()->mutable_max_backoff() = Millis(0);
    v1::Policy resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().SetPolicy(&ctx, req, &resp).ok());
  }
  void Set(TestDaemon& d, const std::string& key) {
    ASSERT_TRUE(
        testing::Set(d.stub(), "jobs", key, 0, "payload of " + key).ok());
  }
  void Nack(TestDaemon& d, std::uint64_t id, const std::string& error) {
    v1::NackRequest req;
    req.set_namespace_("jobs");
    req.add_event_ids(id);
    req.set_error(error);
    v1::NackResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Nack(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.nacked(), 1u);
  }
  v1::NamespaceStats Stats(TestDaemon& d) {
    return NamespaceStats(d.stub(), "jobs");
  }
  v1::ListDeadLettersResponse List(TestDaemon& d, std::uint32_t page_size = 0,
                                   const std::string& token = "") {
    v1::ListDeadLettersRequest req;
    req.set_namespace_("jobs");
    req.set_page_size(page_size);
    req.set_page_token(token);
    v1::ListDeadLettersResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(d.stub().ListDeadLetters(&ctx, req, &resp).ok());
    return resp;
  }
  // Requeues (or purges) `ids`, or all when empty.
  v1::DeadLettersResponse Change(TestDaemon& d, std::vector<std::uint64_t> ids,
                                 bool purge) {
    v1::DeadLettersRequest req;
    req.set_namespace_("jobs");
    for (auto id : ids) req.add_event_ids(id);
    req.set_all(ids.empty());
    v1::DeadLettersResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE((purge ? d.stub().PurgeDeadLetters(&ctx, req, &resp)
                       : d.stub().RequeueDeadLetters(&ctx, req, &resp))
                    .ok());
    return resp;
  }
  v1::DeadLettersResponse Requeue(TestDaemon& d,
                                  std::vector<std::uint64_t> ids) {
    return Change(d, std::move(ids), false);
  }
  v1::DeadLettersResponse Purge(TestDaemon& d, std::vector<std::uint64_t> ids) {
    return Change(d, std::move(ids), true);
  }
  // Nacks each delivery of `w` until it has seen `n` events.
  std::vector<v1::Event> NackEach(TestDaemon& d, TestStream& w, std::size_t n) {
    for (std::size_t seen = 1; seen <= n; ++seen) {
      auto got = w.WaitFor(seen, 10'000ms);
      if (got.size() < seen) return got;
      Nack(d, got[seen - 1].id(), "boom " + std::to_string(seen));
    }
    return w.Events();
  }
  // Waits (up to 10 s) for `n` dead letters.
  bool WaitDead(TestDaemon& d, std::uint64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (Stats(d).dead_letters() != n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(5ms);  // The pause of a bounded poll.
    }
    return true;
  }
};

TEST_F(DeadLetterTest, LastFailedAttemptMakesADeadLetterOnce) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  Limit(d, 3);
  TestStream watcher(d.stub(), TestStream::Watcher("jobs"));
  TestStream worker(d.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(watcher.WaitRegistered());
  ASSERT_TRUE(worker.WaitRegistered());
  Set(d, "poison");
  auto got = NackEach(d, worker, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].attempt(), 3u);
  ASSERT_TRUE(WaitDead(d, 1));
  auto s = Stats(d);
  EXPECT_EQ(s.in_flight_events(), 0u);
  EXPECT_EQ(s.retrying_events(), 0u);
  EXPECT_EQ(s.ready_events(), 0u);
  EXPECT_EQ(s.events_delivered(), 3u);
  // The watcher saw it fire, then become a dead letter.
  auto seen = watcher.WaitFor(2);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].reason(), v1::REASON_DEAD_LETTERED);
  EXPECT_EQ(seen[1].attempt(), 3u);
  auto list = List(d);
  ASSERT_EQ(list.dead_letters_size(), 1);
  EXPECT_EQ(list.dead_letters(0).event().key(), "poison");
  EXPECT_EQ(list.dead_letters(0).event().payload(), "payload of poison");
  EXPECT_EQ(list.dead_letters(0).event().attempt(), 3u);
  EXPECT_EQ(list.dead_letters(0).error(), "boom 3");
  EXPECT_TRUE(list.next_page_token().empty());
  // Not acknowledged as an event in flight would be.
  v1::AckRequest ack;
  ack.set_namespace_("jobs");
  ack.add_event_ids(got[0].id());
  v1::AckResponse acked;
  grpc::ClientContext ctx;
  ASSERT_TRUE(d.stub().Ack(&ctx, ack, &acked).ok());
  EXPECT_EQ(acked.unknown_ids_size(), 1);
  EXPECT_EQ(worker.Events().size(), 3u);
}

TEST_F(DeadLetterTest, AckTimeoutCountsAsAFailedAttempt) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  Limit(d, 2);
  TestStream worker(d.stub(), TestStream::Worker("jobs", 100, 100));
  ASSERT_TRUE(worker.WaitRegistered());
  Set(d, "slow");
  ASSERT_TRUE(WaitDead(d, 1));
  // (The daemon may bury the event before the worker's stream has read
  // its second delivery.)
  EXPECT_EQ(worker.WaitFor(2).size(), 2u);
  auto list = List(d);
  ASSERT_EQ(list.dead_letters_size(), 1);
  EXPECT_EQ(list.dead_letters(0).event().attempt(), 2u);
  EXPECT_EQ(list.dead_letters(0).error(), "");
}

// A poison event that kills every worker it reaches is never nacked: its
// worker's leaving after the last attempt makes it a dead letter.
TEST_F(DeadLetterTest, WorkerLeavingAfterTheLastAttemptBuriesIt) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  Limit(d, 2);
  Set(d, "crasher");
  for (std::uint32_t attempt = 1; attempt <= 2; ++attempt) {
    TestStream worker(d.stub(), TestStream::Worker("jobs"));
    auto got = worker.WaitFor(1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].attempt(), attempt);
  }  // The worker goes away without a word.
  ASSERT_TRUE(WaitDead(d, 1));
  EXPECT_EQ(Stats(d).ready_events(), 0u);
}

TEST_F(DeadLetterTest, RequeueDeliversAgainFromAttemptOneAndPurgeDeletes) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  Limit(d, 1);
  TestStream worker(d.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(worker.WaitRegistered());
  Set(d, "a");
  Set(d, "b");
  auto got = worker.WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  Nack(d, got[0].id(), "x");
  Nack(d, got[1].id(), "y");
  ASSERT_TRUE(WaitDead(d, 2));
  auto r = Requeue(d, {got[0].id(), 424242});
  EXPECT_EQ(r.count(), 1u);
  ASSERT_EQ(r.unknown_ids_size(), 1);
  auto again = worker.WaitFor(3);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[2].id(), got[0].id());
  EXPECT_EQ(again[2].attempt(), 1u);
  // Its worker leaves: a failed last attempt again, with no error text this
  // time; the requeue cleared the last one.
  worker.Cancel();
  ASSERT_TRUE(WaitDead(d, 2));
  // Keys on different partitions fire in no set order, and ids are not
  // ordered across partitions: the listing is matched by id, not position.
  auto list = List(d);
  ASSERT_EQ(list.dead_letters_size(), 2);
  std::map<std::uint64_t, std::string> errors;
  for (const auto& dead : list.dead_letters()) {
    errors[dead.event().id()] = dead.error();
  }
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[got[0].id()], "");
  EXPECT_EQ(errors[got[1].id()], "y");
  EXPECT_EQ(Purge(d, {}).count(), 2u);  // All.
  EXPECT_EQ(Stats(d).dead_letters(), 0u);
  EXPECT_EQ(List(d).dead_letters_size(), 0);
}

TEST_F(DeadLetterTest, AllGoesThroughMoreThanOneChunk) {
  // Over two chunks of Dispatcher::kDeadChunk (4096), and a part.
  constexpr std::size_t kDead = 9000;
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  Limit(d, 1);
  TestStream worker(d.stub(), TestStream::Worker("jobs", 10000));
  ASSERT_TRUE(worker.WaitRegistered());
  for (std::size_t i = 0; i < kDead; i += 1000) {
    v1::BatchRequest req;
    for (std::size_t k = i; k < i + 1000; ++k) {
      auto* set = req.add_operations()->mutable_set();
      set->set_namespace_("jobs");
      set->set_key("k" + std::to_string(k));
      *set->mutable_delay() = Millis(0);
    }
    v1::BatchResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Batch(&ctx, req, &resp).ok());
  }
  // Nacks deliveries [from, from + kDead): each is then a dead letter.
  auto nack_all = [&](std::size_t from) {
    const auto got = worker.WaitFor(from + kDead, 20'000ms);
    ASSERT_EQ(got.size(), from + kDead);
    for (std::size_t i = from; i < from + kDead; i += 1000) {
      v1::NackRequest req;
      req.set_namespace_("jobs");
      for (std::size_t k = i; k < i + 1000; ++k) {
        req.add_event_ids(got[k].id());
      }
      v1::NackResponse resp;
      grpc::ClientContext ctx;
      ASSERT_TRUE(d.stub().Nack(&ctx, req, &resp).ok());
      ASSERT_EQ(resp.nacked(), 1000u);
    }
    ASSERT_TRUE(WaitDead(d, kDead));
  };
  nack_all(0);
  EXPECT_EQ(Requeue(d, {}).count(), kDead);
  EXPECT_EQ(Stats(d).dead_letters(), 0u);
  nack_all(kDead);  // Each delivered once more, and dead again.
  std::set<std::uint64_t> twice;
  for (const auto& e : worker.Events()) twice.insert(e.id());
  EXPECT_EQ(twice.size(), kDead);
  EXPECT_EQ(Purge(d, {}).count(), kDead);
  EXPECT_EQ(Stats(d).dead_letters(), 0u);
  EXPECT_EQ(List(d).dead_letters_size(), 0);
}

TEST_F(DeadLetterTest, PagesCoverEveryDeadLetterOnce) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  Limit(d, 1);
  TestStream worker(d.stub(), TestStream::Worker("jobs"));
  ASSERT_TRUE(worker.WaitRegistered());
  for (int i = 0; i < 5; ++i) Set(d, "k" + std::to_string(i));
  auto got = worker.WaitFor(5);
  ASSERT_EQ(got.size(), 5u);
  for (const auto& e : got) Nack(d, e.id(), "");
  ASSERT_TRUE(WaitDead(d, 5));
  std::set<std::uint64_t> ids;
  std::string token;
  int pages = 0;
  do {
    auto page = List(d, 2, token);
    for (const auto& l : page.dead_letters()) ids.insert(l.event().id());
    token = page.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(ids.size(), 5u);
}

// A page holds about 3 MiB of keys, payloads and errors, however many it
// may list: with a store too, where payloads are read only for the listing.
TEST_F(DeadLetterTest, PagesStayWithinTheResponseBound) {
  constexpr int kDead = 60;  // 60 payloads of 64 KiB: 3.75 MiB.
  constexpr std::size_t kBound = 3 << 20;
  TestStore store(Backend::kRocksDb);
  for (const TestStore* with : {static_cast<const TestStore*>(nullptr),
                                static_cast<const TestStore*>(&store)}) {
    SCOPED_TRACE(with == nullptr ? "in memory" : "with a store");
    TestDaemon d(Options(with));
    ASSERT_TRUE(d.started());
    Limit(d, 1);
    TestStream worker(d.stub(), TestStream::Worker("jobs", kDead));
    ASSERT_TRUE(worker.WaitRegistered());
    const std::size_t payload_bytes =
        TestDaemon::DefaultOptions().scheduler.limits.max_payload_bytes;
    for (int i = 0; i < kDead; ++i) {
      v1::SetTimerRequest req;
      req.set_namespace_("jobs");
      req.set_key("big" + std::to_string(i));
      req.set_payload(
          std::string(payload_bytes, static_cast<char>('a' + i % 26)));
      *req.mutable_delay() = Millis(0);
      v1::SetTimerResponse resp;
      grpc::ClientContext ctx;
      ASSERT_TRUE(d.stub().SetTimer(&ctx, req, &resp).ok());
    }
    const auto got = worker.WaitFor(kDead, 20'000ms);
    ASSERT_EQ(got.size(), static_cast<std::size_t>(kDead));
    v1::NackRequest nack;
    nack.set_namespace_("jobs");
    for (const auto& e : got) nack.add_event_ids(e.id());
    v1::NackResponse nacked;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Nack(&ctx, nack, &nacked).ok());
    ASSERT_TRUE(WaitDead(d, kDead));
    std::set<std::uint64_t> ids;
    std::string token;
    int pages = 0;
    do {
      auto page = List(d, 1000, token);
      EXPECT_LE(page.ByteSizeLong(), kBound + 4096) << "page " << pages;
      for (const auto& l : page.dead_letters()) {
        EXPECT_EQ(l.event().payload().size(), payload_bytes);
        ids.insert(l.event().id());
      }
      token = page.next_page_token();
      ++pages;
    } while (!token.empty() && pages < 10);
    EXPECT_EQ(pages, 2);
    EXPECT_EQ(ids.size(), static_cast<std::size_t>(kDead));
  }
}

class DeadLetterRestart : public DeadLetterTest,
                          public ::testing::WithParamInterface<Backend> {};

TEST_P(DeadLetterRestart, DeadLettersAndAttemptsSurviveARestart) {
  TestStore store(GetParam());
  std::uint64_t dead_id = 0, failing_id = 0;
  {
    TestDaemon d(Options(&store));
    ASSERT_TRUE(d.started());
    Limit(d, 2);
    TestStream worker(d.stub(), TestStream::Worker("jobs"));
    ASSERT_TRUE(worker.WaitRegistered());
    Set(d, "dead");
    auto got = NackEach(d, worker, 2);
    ASSERT_EQ(got.size(), 2u);
    dead_id = got[0].id();
    ASSERT_TRUE(WaitDead(d, 1));
    Set(d, "failing");
    got = worker.WaitFor(3);
    ASSERT_EQ(got.size(), 3u);
    failing_id = got[2].id();
    // Failed once, waiting an hour: it waits out its hour after the restart
    // too (store_test.cc checks it comes back then, as its next attempt).
    v1::NackRequest req;
    req.set_namespace_("jobs");
    req.add_event_ids(failing_id);
    *req.mutable_retry_after() = Millis(3'600'000);
    v1::NackResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(d.stub().Nack(&ctx, req, &resp).ok());
    d.Shutdown();
  }
  {
    TestDaemon d(Options(&store));
    ASSERT_TRUE(d.started());
    EXPECT_EQ(Stats(d).dead_letters(), 1u);
    auto list = List(d);
    ASSERT_EQ(list.dead_letters_size(), 1);
    EXPECT_EQ(list.dead_letters(0).event().id(), dead_id);
    EXPECT_EQ(list.dead_letters(0).error(), "boom 2");
    EXPECT_EQ(list.dead_letters(0).event().payload(), "payload of dead");
    EXPECT_EQ(Stats(d).retrying_events(), 1u);
    TestStream worker(d.stub(), TestStream::Worker("jobs"));
    ASSERT_TRUE(worker.WaitRegistered());
    EXPECT_EQ(Requeue(d, {dead_id}).count(), 1u);
    auto got = worker.WaitFor(1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].id(), dead_id);
    EXPECT_EQ(got[0].attempt(), 1u);
    // The failing event still waits for its retry time.
    EXPECT_EQ(Stats(d).retrying_events(), 1u);
    d.Shutdown();
  }
  // Requeued: no longer a dead letter after the next restart either.
  TestDaemon d(Options(&store));
  ASSERT_TRUE(d.started());
  EXPECT_EQ(Stats(d).dead_letters(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Stores, DeadLetterRestart, AllBackends(), BackendName);

TEST_F(DeadLetterTest, BadRequestsAreRefused) {
  TestDaemon d(Options());
  ASSERT_TRUE(d.started());
  v1::DeadLettersRequest both;
  both.set_namespace_("jobs");
  both.add_event_ids(1);
  both.set_all(true);
  v1::DeadLettersResponse resp;
  grpc::ClientContext c1;
  EXPECT_EQ(d.stub().PurgeDeadLetters(&c1, both, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::DeadLettersRequest neither;
  grpc::ClientContext c2;
  EXPECT_EQ(d.stub().RequeueDeadLetters(&c2, neither, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::ListDeadLettersRequest list;
  list.set_page_token("x1");
  v1::ListDeadLettersResponse page;
  grpc::ClientContext c3;
  EXPECT_EQ(d.stub().ListDeadLetters(&c3, list, &page).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::NackRequest nack;
  nack.add_event_ids(1);
  nack.set_error(std::string(1025, 'e'));
  v1::NackResponse nacked;
  grpc::ClientContext c4;
  EXPECT_EQ(d.stub().Nack(&c4, nack, &nacked).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::SetPolicyRequest policy;
  policy.mutable_policy()->set_max_attempts(10'001);
  v1::Policy p;
  grpc::ClientContext c5;
  EXPECT_EQ(d.stub().SetPolicy(&c5, policy, &p).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace delayd::testing
