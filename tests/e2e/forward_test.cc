// Any node of a cluster takes any call on a key: a node that does not own
// the key's partition forwards the call to the owner (one hop) and answers
// as the owner did, naming it in the delayd-owner trailer. The entry node
// checks the caller's token; nodes present the cluster token to each other,
// and a call that claims to be forwarded is neither forwarded again nor
// taken without it. Real processes on one PostgreSQL.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>

#include "tests/e2e/cluster_harness.h"

namespace delayd::testing {
namespace {

constexpr const char* kClient = "client-token-0123456789";
constexpr const char* kOther = "other-token-0123456789";
constexpr const char* kAdmin = "admin-token-0123456789";

// The delayd-owner trailer of a finished call; empty if none.
std::string OwnerTrailer(const grpc::ClientContext& ctx) {
  const auto& md = ctx.GetServerTrailingMetadata();
  const auto it = md.find("delayd-owner");
  return it == md.end() ? ""
                        : std::string(it->second.data(), it->second.size());
}

class Forwarding : public Cluster {
 protected:
  void SetUp() override {
    Cluster::SetUp();
    std::ofstream(dir_ / "tokens") << kClient << " jobs read,write,work\n"
                                   << kOther << " other write\n"
                                   << kAdmin << " * admin\n";
    ASSERT_NO_FATAL_FAILURE(
        StartTwo(&a_, &b_, {"--auth-tokens", dir_ / "tokens"}));
    ASSERT_TRUE(a_->WaitForOutput("loaded in", 10s)) << a_->output();
    ASSERT_TRUE(b_->WaitForOutput("loaded in", 10s)) << b_->output();
    stub_a_ = StubOf(*a_);
    stub_b_ = StubOf(*b_);
    // Each node knows who owns what after its next lease round.
    ASSERT_TRUE(Eventually(
        [&] {
          for (int i = 0; i < 20; ++i) {
            v1::SetTimerResponse r;
            if (!Set(*stub_a_, "warm-" + std::to_string(i),
                     WallNow() + 3'600'000'000'000, &r, kClient)
                     .ok()) {
              return false;
            }
          }
          return true;
        },
        10s));
  }

  std::unique_ptr<DaemonProcess> a_, b_;
  std::unique_ptr<v1::Delayd::Stub> stub_a_, stub_b_;
};

TEST_F(Forwarding, AnyNodeTakesAnyCallOnAKeyAsItsOwnerWould) {
  Worker at_a(*a_, kClient), at_b(*b_, kClient);
  const WallNanos far = WallNow() + 3'600'000'000'000;
  std::map<std::string, std::uint64_t> versions;
  int forwarded = 0;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "job-" + std::to_string(i);
    v1::SetTimerRequest req;
    req.set_namespace_("jobs");
    req.set_key(key);
    req.set_payload("p-" + key);
    *req.mutable_fire_time() = FromNanos(far);
    grpc::ClientContext ctx;
    Prepare(&ctx, kClient);
    v1::SetTimerResponse resp;
    ASSERT_TRUE(stub_a_->SetTimer(&ctx, req, &resp).ok()) << key;
    versions[key] = resp.version();
    // Forwarded exactly when b owns the key, and the trailer says where.
    const bool at_b_owner = OwnerOf(key) == "b";
    EXPECT_EQ(OwnerTrailer(ctx), at_b_owner ? b_->address() : "") << key;
    forwarded += at_b_owner;
  }
  EXPECT_GT(forwarded, 5);
  EXPECT_LT(forwarded, 35);
  // Read back through b: the owner's record, whichever node that is.
  for (const auto& [key, version] : versions) {
    v1::GetTimerRequest get;
    get.set_namespace_("jobs");
    get.set_key(key);
    grpc::ClientContext ctx;
    Prepare(&ctx, kClient);
    v1::Timer t;
    ASSERT_TRUE(stub_b_->GetTimer(&ctx, get, &t).ok()) << key;
    EXPECT_EQ(t.payload(), "p-" + key);
    EXPECT_EQ(t.version(), version);
  }
  // Keys 0..19 moved (through a) to fire soon, 20..29 removed (through b).
  const WallNanos due = WallNow() + 1'500'000'000;
  for (int i = 0; i < 30; ++i) {
    const std::string key = "job-" + std::to_string(i);
    grpc::ClientContext ctx;
    Prepare(&ctx, kClient);
    if (i < 20) {
      v1::MoveTimerRequest move;
      move.set_namespace_("jobs");
      move.set_key(key);
      *move.mutable_fire_time() = FromNanos(due);
      move.set_expected_version(versions[key]);
      v1::MoveTimerResponse resp;
      ASSERT_TRUE(stub_a_->MoveTimer(&ctx, move, &resp).ok()) << key;
      EXPECT_GT(resp.version(), versions[key]);
    } else {
      v1::RemoveTimerRequest remove;
      remove.set_namespace_("jobs");
      remove.set_key(key);
      v1::RemoveTimerResponse resp;
      ASSERT_TRUE(stub_b_->RemoveTimer(&ctx, remove, &resp).ok()) << key;
    }
  }
  // A wrong expected version is refused by the owner, through either node.
  {
    v1::RemoveTimerRequest remove;
    remove.set_namespace_("jobs");
    remove.set_key("job-35");
    remove.set_expected_version(versions["job-35"] + 1000);
    for (auto* stub : {stub_a_.get(), stub_b_.get()}) {
      grpc::ClientContext ctx;
      Prepare(&ctx, kClient);
      v1::RemoveTimerResponse resp;
      EXPECT_EQ(stub->RemoveTimer(&ctx, remove, &resp).error_code(),
                grpc::StatusCode::ABORTED);
    }
  }
  // The moved ones fire, each once, on its owner, not early; no other.
  auto fired = [&] {
    std::set<std::string> keys;
    for (const auto& [key, t] : at_a.got()) keys.insert(key);
    for (const auto& [key, t] : at_b.got()) keys.insert(key);
    return keys;
  };
  ASSERT_TRUE(Eventually([&] { return fired().size() >= 20; }, 20s))
      << fired().size();
  std::set<std::string> want;
  for (int i = 0; i < 20; ++i) want.insert("job-" + std::to_string(i));
  EXPECT_EQ(fired(), want);
  EXPECT_EQ(at_a.got().size() + at_b.got().size(), 20u);
  EXPECT_EQ(at_a.again() + at_b.again(), 0);
  for (auto* w : {&at_a, &at_b}) {
    for (const auto& [key, t] : w->got()) EXPECT_GE(t.first, due) << key;
  }
}

// A Batch through one node is split between the keys' owners and answered
// as one, in request order, each operation as its owner answered it.
TEST_F(Forwarding, ABatchIsSplitBetweenOwnersAndAnsweredInOrder) {
  const WallNanos far = WallNow() + 3'600'000'000'000;
  std::vector<std::string> keys;
  for (int i = 0; i < 60; ++i) keys.push_back("bk-" + std::to_string(i));
  auto batch_of = [&](const std::vector<std::string>& ks) {
    v1::BatchRequest req;
    for (const std::string& k : ks) {
      auto* set = req.add_operations()->mutable_set();
      set->set_namespace_("jobs");
      set->set_key(k);
      set->set_payload("p-" + k);
      *set->mutable_fire_time() = FromNanos(far);
    }
    return req;
  };
  v1::BatchRequest req = batch_of(keys);
  // Two that fail, one on each node's side: a move with no fire time of a
  // key b owns (refused by b, which names its own index: renamed), and a
  // move of a key a owns with a wrong version.
  std::string on_a, on_b;
  for (const std::string& k : keys) (OwnerOf(k) == "a" ? on_a : on_b) = k;
  auto* move_b = req.add_operations()->mutable_move();
  move_b->set_namespace_("jobs");
  move_b->set_key(on_b);
  auto* move_a = req.add_operations()->mutable_move();
  move_a->set_namespace_("jobs");
  move_a->set_key(on_a);
  move_a->set_expected_version(1);
  *move_a->mutable_fire_time() = FromNanos(far);
  grpc::ClientContext ctx;
  Prepare(&ctx, kClient);
  v1::BatchResponse resp;
  ASSERT_TRUE(stub_a_->Batch(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.results_size(), 62);
  for (int i = 0; i < 60; ++i) {
    EXPECT_EQ(resp.results(i).code(), 0) << i << resp.results(i).message();
    // Read back through the other node: the version the Batch answered.
    v1::GetTimerRequest get;
    get.set_namespace_("jobs");
    get.set_key(keys[i]);
    grpc::ClientContext c;
    Prepare(&c, kClient);
    v1::Timer t;
    ASSERT_TRUE(stub_b_->GetTimer(&c, get, &t).ok()) << keys[i];
    EXPECT_EQ(t.version(), resp.results(i).version()) << keys[i];
  }
  EXPECT_EQ(resp.results(60).code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(resp.results(60).message().starts_with("operations[60]."))
      << resp.results(60).message();
  EXPECT_EQ(resp.results(61).code(), grpc::StatusCode::ABORTED);
  // A Batch whose keys all belong to b goes to b whole.
  std::vector<std::string> of_b;
  for (int i = 0; of_b.size() < 10; ++i) {
    const std::string k = "only-b-" + std::to_string(i);
    if (OwnerOf(k) == "b") of_b.push_back(k);
  }
  grpc::ClientContext whole;
  Prepare(&whole, kClient);
  v1::BatchResponse all_b;
  ASSERT_TRUE(stub_a_->Batch(&whole, batch_of(of_b), &all_b).ok());
  ASSERT_EQ(all_b.results_size(), 10);
  for (const auto& r : all_b.results()) EXPECT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(OwnerTrailer(whole), b_->address());
}

// Drain on one node fires the namespace's timers on every node, and
// answers how many in all.
TEST_F(Forwarding, ADrainOnOneNodeFiresTheTimersOfEveryNode) {
  Worker at_a(*a_, kClient), at_b(*b_, kClient);
  const WallNanos far = WallNow() + 3'600'000'000'000;
  int of_b = 0;
  for (int i = 0; i < 30; ++i) {
    const std::string key = "d-" + std::to_string(i);
    v1::SetTimerResponse resp;
    ASSERT_TRUE(Set(*stub_a_, key, far, &resp, kClient).ok()) << key;
    of_b += OwnerOf(key) == "b";
  }
  ASSERT_GT(of_b, 0);
  ASSERT_LT(of_b, 30);
  v1::DrainRequest drain;
  drain.set_namespace_("jobs");
  grpc::ClientContext ctx;
  Prepare(&ctx, kAdmin);
  v1::DrainResponse drained;
  ASSERT_TRUE(stub_a_->Drain(&ctx, drain, &drained).ok());
  // The 20 warm-up timers of SetUp are due in an hour too.
  EXPECT_EQ(drained.drained(), 50u);
  ASSERT_TRUE(Eventually(
      [&] { return at_a.got().size() + at_b.got().size() >= 50; }, 10s));
  EXPECT_EQ(at_a.got().size() + at_b.got().size(), 50u);
  EXPECT_EQ(at_a.again() + at_b.again(), 0);
}

TEST_F(Forwarding, SchedulesAreReachedThroughEitherNode) {
  // A key b owns, set through a.
  std::string key;
  for (int i = 0; key.empty(); ++i) {
    if (OwnerOf("s-" + std::to_string(i)) == "b")
      key = "s-" + std::to_string(i);
  }
  v1::SetScheduleRequest set;
  set.set_namespace_("jobs");
  set.set_key(key);
  set.mutable_spec()->set_cron("@daily");
  set.set_payload("nightly");
  grpc::ClientContext ctx;
  Prepare(&ctx, kClient);
  v1::Schedule made;
  ASSERT_TRUE(stub_a_->SetSchedule(&ctx, set, &made).ok());
  EXPECT_EQ(OwnerTrailer(ctx), b_->address());
  for (auto* stub : {stub_a_.get(), stub_b_.get()}) {
    v1::GetScheduleRequest get;
    get.set_namespace_("jobs");
    get.set_key(key);
    grpc::ClientContext c;
    Prepare(&c, kClient);
    v1::Schedule got;
    ASSERT_TRUE(stub->GetSchedule(&c, get, &got).ok());
    EXPECT_EQ(got.payload(), "nightly");
    EXPECT_EQ(got.version(), made.version());
  }
}

TEST_F(Forwarding, TheEntryNodeChecksTheCallerAndPeersTheirToken) {
  // A key each node owns.
  std::string on_a, on_b;
  for (int i = 0; on_a.empty() || on_b.empty(); ++i) {
    const std::string key = "k-" + std::to_string(i);
    (OwnerOf(key) == "a" ? on_a : on_b) = key;
  }
  v1::SetTimerResponse resp;
  const WallNanos far = WallNow() + 3'600'000'000'000;
  // A token without the grant is refused by the entry node, forwarded or
  // not (nothing reaches the owner: no trailer).
  for (const std::string& key : {on_a, on_b}) {
    v1::SetTimerRequest req;
    req.set_namespace_("jobs");
    req.set_key(key);
    *req.mutable_fire_time() = FromNanos(far);
    grpc::ClientContext ctx;
    Prepare(&ctx, kOther);
    EXPECT_EQ(stub_a_->SetTimer(&ctx, req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(OwnerTrailer(ctx), "");
  }
  // One hop: a call that says it was forwarded is answered where it lands.
  v1::SetTimerRequest req;
  req.set_namespace_("jobs");
  req.set_key(on_b);
  *req.mutable_fire_time() = FromNanos(far);
  {
    grpc::ClientContext ctx;
    Prepare(&ctx, kClient);
    ctx.AddMetadata("delayd-forwarded-by", "x");
    const grpc::Status s = stub_a_->SetTimer(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(s.error_message().find("is not served here now"),
              std::string::npos)
        << s.error_message();
  }
  // A made-up token is not a peer's; the cluster token is, and may do what
  // any caller's token allowed (here: write to a namespace no client
  // token may).
  {
    grpc::ClientContext ctx;
    Prepare(&ctx, "not-the-cluster-token");
    ctx.AddMetadata("delayd-forwarded-by", "x");
    EXPECT_EQ(stub_b_->SetTimer(&ctx, req, &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(Set(*stub_b_, on_b, far, &resp, kClusterToken, "reserved").ok());
}

// Nodes that serve TLS forward over TLS: they check each other's
// certificate with --peer-ca (or, with mutual TLS, --tls-client-ca) and,
// with mutual TLS, present their own.
class TlsForwarding : public Cluster,
                      public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    Cluster::SetUp();
    const std::string make =
        "cd '" + dir_.path() +
        "' && openssl req -x509 -newkey ec -pkeyopt "
        "ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem "
        "-days 2 -subj /CN=test-ca 2>/dev/null && openssl req -newkey ec "
        "-pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout node.key -out "
        "node.csr -subj /CN=node 2>/dev/null && printf "
        "'subjectAltName=IP:127.0.0.1\\n' > ext && openssl x509 -req -in "
        "node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out node.pem "
        "-days 2 -extfile ext 2>/dev/null";
    ASSERT_EQ(std::system(make.c_str()), 0);
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST_P(TlsForwarding, NodesServingTlsForwardOverTls) {
  const bool mutual = GetParam();
  std::vector<std::string> tls{"--tls-cert", dir_ / "node.pem", "--tls-key",
                               dir_ / "node.key"};
  if (mutual) {
    tls.insert(tls.end(), {"--tls-client-ca", dir_ / "ca.pem"});
  } else {
    tls.insert(tls.end(), {"--peer-ca", dir_ / "ca.pem"});
  }
  std::unique_ptr<DaemonProcess> a, b;
  ASSERT_NO_FATAL_FAILURE(StartTwo(&a, &b, tls));
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = Read(dir_ / "ca.pem");
  if (mutual) {
    ssl.pem_private_key = Read(dir_ / "node.key");
    ssl.pem_cert_chain = Read(dir_ / "node.pem");
  }
  auto stub_a = v1::Delayd::NewStub(
      grpc::CreateChannel(a->address(), grpc::SslCredentials(ssl)));
  // Keys b owns, through a.
  int forwarded = 0;
  for (int i = 0; forwarded < 5; ++i) {
    const std::string key = "t-" + std::to_string(i);
    if (OwnerOf(key) != "b") continue;
    v1::SetTimerResponse resp;
    ASSERT_TRUE(Eventually(
        [&] {
          return Set(*stub_a, key, WallNow() + 3'600'000'000'000, &resp).ok();
        },
        10s))
        << key << "\n"
        << a->output();
    ++forwarded;
  }
}

INSTANTIATE_TEST_SUITE_P(PeerCaOrMutual, TlsForwarding, ::testing::Bool());

}  // namespace
}  // namespace delayd::testing
