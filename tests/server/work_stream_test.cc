// Work streams against a daemon on loopback (and, built as
// cluster_api_test, through one node of a three-node cluster): a worker's
// acks, nacks and lease extensions on its stream, each answered on it.
#include <gtest/gtest.h>

#include "tests/server/service_fixture.h"

namespace delayd::testing {
namespace {

// A Work stream, its messages read on a thread of its own.
class TestWork {
 public:
  explicit TestWork(v1::Delayd::Stub& stub) : stream_(stub.Work(&ctx_)) {
    thread_ = std::thread([this] {
      v1::SubscribeResponse msg;
      while (stream_->Read(&msg)) {
        std::lock_guard lock(mu_);
        registered_ = true;
        for (const auto& e : msg.events()) events_.push_back(e);
        for (const auto& a : msg.answers()) {
          answers_[a.ref()] = a;
          events_with_[a.ref()] = static_cast<std::size_t>(msg.events_size());
        }
        cv_.notify_all();
      }
      grpc::Status status = stream_->Finish();
      std::lock_guard lock(mu_);
      status_ = status;
      done_ = true;
      cv_.notify_all();
    });
  }
  ~TestWork() {
    ctx_.TryCancel();
    thread_.join();
  }
  bool Send(const v1::WorkRequest& req) { return stream_->Write(req); }
  bool Subscribe(std::uint32_t max_in_flight = 100, const std::string& ns = "",
                 std::int64_t ack_timeout_ms = 30000) {
    v1::WorkRequest req;
    *req.mutable_subscribe() =
        TestStream::Worker(ns, max_in_flight, ack_timeout_ms);
    return Send(req);
  }
  bool Ack(std::uint64_t ref, const std::vector<std::uint64_t>& ids,
           const std::string& ns = "") {
    v1::WorkRequest req;
    req.set_ref(ref);
    req.mutable_ack()->set_namespace_(ns);
    for (auto id : ids) req.mutable_ack()->add_event_ids(id);
    return Send(req);
  }
  bool WaitRegistered() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, 5s, [&] { return registered_ || done_; }) &&
           registered_;
  }
  std::vector<v1::Event> WaitFor(std::size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 5s, [&] { return events_.size() >= n || done_; });
    return events_;
  }
  // The answer to request `ref` (code UNKNOWN with "none" if none came).
  v1::WorkAnswer WaitAnswer(std::uint64_t ref) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, 5s, [&] { return answers_.count(ref) || done_; });
    if (answers_.count(ref) == 0) {
      v1::WorkAnswer none;
      none.set_code(grpc::StatusCode::UNKNOWN);
      none.set_message("none");
      return none;
    }
    return answers_[ref];
  }
  // How many events came in the message that answered request `ref`.
  std::size_t EventsWithAnswer(std::uint64_t ref) {
    std::lock_guard lock(mu_);
    return events_with_[ref];
  }
  grpc::Status WaitDone() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, 5s, [&] { return done_; })) {
      return grpc::Status(grpc::StatusCode::UNKNOWN, "stream did not end");
    }
    return status_;
  }
  void CloseWrites() { stream_->WritesDone(); }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::WorkRequest, v1::SubscribeResponse>>
      stream_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool registered_ = false;
  bool done_ = false;
  grpc::Status status_;
  std::vector<v1::Event> events_;
  std::map<std::uint64_t, v1::WorkAnswer> answers_;
  std::map<std::uint64_t, std::size_t> events_with_;
};

TEST_F(DelaydTest, AWorkStreamTakesItsAcksAndAnswersThem) {
  TestWork w(d_.stub());
  ASSERT_TRUE(w.Subscribe());
  ASSERT_TRUE(w.WaitRegistered());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Set("k" + std::to_string(i), 0).ok());
  const auto events = w.WaitFor(3);
  ASSERT_EQ(events.size(), 3u);
  ASSERT_TRUE(w.Ack(7, Ids(events)));
  const v1::WorkAnswer a = w.WaitAnswer(7);
  EXPECT_EQ(a.code(), 0) << a.message();
  EXPECT_EQ(a.done(), 3u);
  EXPECT_EQ(a.unknown_ids_size(), 0);
  // Acknowledged for good: nothing in flight, and a second ack finds none.
  EXPECT_EQ(Stats().in_flight_events(), 0u);
  ASSERT_TRUE(w.Ack(8, {events[0].id()}));
  const v1::WorkAnswer again = w.WaitAnswer(8);
  EXPECT_EQ(again.done(), 0u);
  ASSERT_EQ(again.unknown_ids_size(), 1);
  EXPECT_EQ(again.unknown_ids(0), events[0].id());
}

TEST_F(DelaydTest, AWorkStreamsAcksLetTheNextEventsCome) {
  TestWork w(d_.stub());
  ASSERT_TRUE(w.Subscribe(2));
  ASSERT_TRUE(w.WaitRegistered());
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Set("k" + std::to_string(i), 0).ok());
#ifndef DELAYD_API_ON_CLUSTER
  // (On a cluster each node delivers its share of the limit, at least 1.)
  ASSERT_TRUE(WaitDispatched(4));
  ASSERT_EQ(w.WaitFor(2).size(), 2u);
  EXPECT_EQ(Stats().ready_events(), 2u) << "more than max_in_flight delivered";
#endif
  // Each ack on the stream frees its events' slots for the next ones.
  std::size_t acked = 0;
  for (std::uint64_t ref = 1; acked < 4 && ref < 10; ++ref) {
    const auto events = w.WaitFor(acked + 1);
    ASSERT_GT(events.size(), acked);
    std::vector<std::uint64_t> ids;
    for (std::size_t k = acked; k < events.size(); ++k) {
      ids.push_back(events[k].id());
    }
    ASSERT_TRUE(w.Ack(ref, ids));
    EXPECT_EQ(w.WaitAnswer(ref).done(), ids.size());
    acked = events.size();
  }
  EXPECT_EQ(acked, 4u);
}

#ifndef DELAYD_API_ON_CLUSTER
// An ack's answer comes with the events the ack let go, in one message (on
// a daemon whose acks need no store write, answered at once): the worker
// reads once per ack, not twice. (On a cluster, parts of an ack go to other
// nodes, whose answers come later.)
TEST_F(DelaydTest, AWorkStreamsAckIsAnsweredWithTheEventsItLetsGo) {
  TestWork w(d_.stub());
  ASSERT_TRUE(w.Subscribe(2));
  ASSERT_TRUE(w.WaitRegistered());
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(Set("k" + std::to_string(i), 0).ok());
  ASSERT_TRUE(WaitDispatched(8));
  for (std::uint64_t ref = 1; ref <= 3; ++ref) {
    const auto events = w.WaitFor(2 * ref);
    ASSERT_EQ(events.size(), 2 * ref);
    ASSERT_TRUE(
        w.Ack(ref, {events[2 * ref - 2].id(), events[2 * ref - 1].id()}));
    EXPECT_EQ(w.WaitAnswer(ref).done(), 2u);
    EXPECT_EQ(w.EventsWithAnswer(ref), 2u) << "ack " << ref;
  }
}
#endif

TEST_F(DelaydTest, AWorkStreamsNackBringsTheEventBackOnIt) {
  TestWork w(d_.stub());
  ASSERT_TRUE(w.Subscribe());
  ASSERT_TRUE(w.WaitRegistered());
  ASSERT_TRUE(Set("k", 0).ok());
  const auto first = w.WaitFor(1);
  ASSERT_EQ(first.size(), 1u);
  v1::WorkRequest nack;
  nack.set_ref(3);
  nack.mutable_nack()->add_event_ids(first[0].id());
  *nack.mutable_nack()->mutable_retry_after() = Millis(0);
  nack.mutable_nack()->set_error("try again");
  ASSERT_TRUE(w.Send(nack));
  EXPECT_EQ(w.WaitAnswer(3).done(), 1u);
  const auto both = w.WaitFor(2);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[1].id(), first[0].id());
  EXPECT_EQ(both[1].attempt(), 2u);
}

TEST_F(DelaydTest, AWorkStreamExtendsLeases) {
  TestWork w(d_.stub());
  ASSERT_TRUE(w.Subscribe());
  ASSERT_TRUE(w.WaitRegistered());
  ASSERT_TRUE(Set("k", 0).ok());
  const auto events = w.WaitFor(1);
  ASSERT_EQ(events.size(), 1u);
  v1::WorkRequest extend;
  extend.set_ref(4);
  extend.mutable_extend_lease()->add_event_ids(events[0].id());
  extend.mutable_extend_lease()->add_event_ids(12345);
  *extend.mutable_extend_lease()->mutable_extension() = Millis(60000);
  ASSERT_TRUE(w.Send(extend));
  const v1::WorkAnswer a = w.WaitAnswer(4);
  EXPECT_EQ(a.code(), 0) << a.message();
  EXPECT_EQ(a.done(), 1u);
  ASSERT_EQ(a.unknown_ids_size(), 1);
  EXPECT_EQ(a.unknown_ids(0), 12345u);
}

TEST_F(DelaydTest, AWorkStreamAnswersABadRequestAndGoesOn) {
  TestWork w(d_.stub());
  ASSERT_TRUE(w.Subscribe(100, "shop"));
  ASSERT_TRUE(w.WaitRegistered());
  ASSERT_TRUE(Set("k", 0, "p", "shop").ok());
  const auto events = w.WaitFor(1);
  ASSERT_EQ(events.size(), 1u);
  // Another namespace's events are not this stream's to ack.
  ASSERT_TRUE(w.Ack(1, Ids(events), "other"));
  v1::WorkAnswer a = w.WaitAnswer(1);
  EXPECT_EQ(a.code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(a.message().find("its own namespace ('shop')"), std::string::npos)
      << a.message();
  v1::WorkRequest again;
  again.set_ref(2);
  *again.mutable_subscribe() = TestStream::Worker("shop");
  ASSERT_TRUE(w.Send(again));
  a = w.WaitAnswer(2);
  EXPECT_EQ(a.code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::WorkRequest nack;  // Its error is over 1024 bytes.
  nack.set_ref(3);
  nack.mutable_nack()->add_event_ids(events[0].id());
  nack.mutable_nack()->set_error(std::string(2000, 'x'));
  ASSERT_TRUE(w.Send(nack));
  EXPECT_EQ(w.WaitAnswer(3).code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Nothing changed, and the stream goes on.
  EXPECT_EQ(NamespaceStats(d_.stub(), "shop").in_flight_events(), 1u);
  ASSERT_TRUE(w.Ack(4, Ids(events), "shop"));
  a = w.WaitAnswer(4);
  EXPECT_EQ(a.code(), 0) << a.message();
  EXPECT_EQ(a.done(), 1u);
}

TEST_F(DelaydTest, AWorkStreamStartsWithAWorkersSubscribe) {
  {
    TestWork w(d_.stub());
    ASSERT_TRUE(w.Ack(1, {1}));
    const grpc::Status s = w.WaitDone();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("starts with a worker's subscribe"),
              std::string::npos)
        << s.error_message();
  }
  {
    TestWork w(d_.stub());
    v1::WorkRequest req;
    *req.mutable_subscribe() = TestStream::Watcher("default");
    ASSERT_TRUE(w.Send(req));
    EXPECT_EQ(w.WaitDone().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    TestWork w(d_.stub());
    v1::WorkRequest req;
    *req.mutable_subscribe() = TestStream::Worker("bad name!");
    ASSERT_TRUE(w.Send(req));
    EXPECT_EQ(w.WaitDone().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST_F(DelaydTest, AWorkStreamReadsNoMoreWhileItsAnswersAreUnread) {
  // A client that sends requests and never reads their answers: past a few
  // answers unwritten the stream reads nothing more, so its writes stall
  // (flow control) instead of answers piling up in the daemon. The client
  // does not probe the bandwidth-delay product: its receive windows stay at
  // HTTP/2's 64 KB, so the answers its transport takes unread are bounded by
  // those, not by how far gRPC would grow them (with the probe, one run
  // under a sanitizer saw all 1,000 requests go through).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto stub = v1::Delayd::NewStub(grpc::CreateCustomChannel(
      d_.target(), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  auto stream = stub->Work(&ctx);
  v1::WorkRequest sub;
  *sub.mutable_subscribe() = TestStream::Worker("default");
  ASSERT_TRUE(stream->Write(sub));
  v1::WorkRequest ack;  // 10,000 unknown ids: each answer names them all.
  for (std::uint64_t id = 1; id <= 10000; ++id) {
    ack.mutable_ack()->add_event_ids(id << 20);
  }
  std::atomic<int> written{0};
  constexpr int kRequests = 1000;
  std::thread writer([&] {
    for (int i = 0; i < kRequests && stream->Write(ack); ++i) {
      written.fetch_add(1);
    }
  });
  // 1,000 requests of 100 KB each are 100 MB, their answers as many; read
  // without bound 400 go within 0.3 s here. The writer must stall before
  // the last (the deadline is the expected outcome): what fits is the
  // daemon's receive windows, 16 requests awaiting answers and the one or
  // two answers the client's windows hold (101-170 requests here), far
  // below the total.
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (written.load() < kRequests &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_LT(written.load(), kRequests) << "the daemon read on without bound";
  std::printf("requests written in 3 s: %d of %d\n", written.load(), kRequests);
  ctx.TryCancel();
  writer.join();
  // The daemon serves on.
  TestWork w(d_.stub());
  ASSERT_TRUE(w.Subscribe());
  EXPECT_TRUE(w.WaitRegistered());
}

TEST_F(DelaydTest, ClosingAWorkStreamGivesItsUnackedEventsToOthers) {
  TestWork w(d_.stub());
  ASSERT_TRUE(w.Subscribe(1));
  ASSERT_TRUE(w.WaitRegistered());
  ASSERT_TRUE(Set("k", 0).ok());
  const auto got = w.WaitFor(1);
  ASSERT_EQ(got.size(), 1u);
  TestStream other(d_.stub(), TestStream::Worker("default"));
  ASSERT_TRUE(other.WaitRegistered());
  w.CloseWrites();
  EXPECT_TRUE(w.WaitDone().ok());
  const auto again = other.WaitFor(1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].id(), got[0].id());
}

}  // namespace
}  // namespace delayd::testing
