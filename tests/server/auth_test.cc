#include "server/api/auth.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>

#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_client.h"

namespace delayd {
namespace {

using testing::Millis;
using testing::TestDaemon;
using namespace std::chrono_literals;

std::string Hex(const Digest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (std::uint8_t b : d) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

TEST(TokenTable, ParsesTokensPatternsAndPermissions) {
  TokenTable t;
  const std::string text =
      "# comment\n"
      "\n"
      "alpha team-a,team-b* read,write\r\n"
      "sha256:" +
      Hex(Sha256("beta")) +
      "  *  admin\n"
      "alpha other work\n";
  ASSERT_TRUE(TokenTable::Parse(text, &t).ok());
  EXPECT_EQ(t.size(), 2u);  // alpha's two lines are one token.
  const auto* alpha = t.Find("alpha");
  ASSERT_NE(alpha, nullptr);
  EXPECT_TRUE(Allows(*alpha, "team-a", kRead));
  EXPECT_TRUE(Allows(*alpha, "team-a", kRead | kWrite));
  EXPECT_FALSE(Allows(*alpha, "team-a", kWork));
  EXPECT_FALSE(Allows(*alpha, "team-ab", kRead));  // Exact name.
  EXPECT_TRUE(Allows(*alpha, "team-b", kWrite));   // Prefix.
  EXPECT_TRUE(Allows(*alpha, "team-b7", kWrite));
  EXPECT_TRUE(Allows(*alpha, "other", kWork));
  EXPECT_FALSE(Allows(*alpha, "other", kRead));
  EXPECT_FALSE(Allows(*alpha, "", kRead));  // Every namespace: needs `*`.
  const auto* beta = t.Find("beta");        // Stored only as its digest.
  ASSERT_NE(beta, nullptr);
  EXPECT_TRUE(Allows(*beta, "", kAdmin));
  EXPECT_TRUE(Allows(*beta, "anything", kRead | kWrite | kWork | kAdmin));
  EXPECT_EQ(t.Find("gamma"), nullptr);
  EXPECT_EQ(t.Find(""), nullptr);
  EXPECT_EQ(t.Find("alph"), nullptr);
}

TEST(TokenTable, BadLinesAreRefusedNamingTheLine) {
  const std::map<std::string, std::string> bad = {
      {"ok ns read\nonly-two fields\n", "line 2"},
      {"t ns read,fly\n", "unknown permission 'fly'"},
      {"sha256:abc ns read\n", "64 hex digits"},
      {"t a*b read\n", "only at the end"},
      {"t a,,b read\n", "empty namespace"},
  };
  for (const auto& [text, want] : bad) {
    TokenTable t;
    const Status s = TokenTable::Parse(text, &t);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << text;
    EXPECT_NE(s.message().find(want), std::string::npos)
        << text << " -> " << s.message();
  }
}

TEST(Authorizer, BearerHeaderAndCodes) {
  EXPECT_EQ(Authorizer::BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(Authorizer::BearerToken("bearer abc"), "abc");
  EXPECT_EQ(Authorizer::BearerToken("Basic abc"), "");
  EXPECT_EQ(Authorizer::BearerToken("Bearer "), "");
  Authorizer off;
  EXPECT_TRUE(off.Check("", "x", kAdmin).ok());
  Authorizer a;
  TokenTable t;
  ASSERT_TRUE(TokenTable::Parse("tok ns read\n", &t).ok());
  a.Enable(std::move(t));
  EXPECT_EQ(a.Check("", "ns", kRead).code(), Code::kUnauthenticated);
  EXPECT_EQ(a.Check("Bearer nope", "ns", kRead).code(), Code::kUnauthenticated);
  EXPECT_TRUE(a.Check("Bearer tok", "ns", kRead).ok());
  EXPECT_EQ(a.Check("Bearer tok", "ns", kWrite).code(),
            Code::kPermissionDenied);
  EXPECT_EQ(a.Check("Bearer tok", "other", kRead).code(),
            Code::kPermissionDenied);
  TokenTable t2;
  ASSERT_TRUE(TokenTable::Parse("tok2 ns write\n", &t2).ok());
  a.Reload(std::move(t2));
  EXPECT_EQ(a.Check("Bearer tok", "ns", kRead).code(), Code::kUnauthenticated);
  EXPECT_TRUE(a.Check("Bearer tok2", "ns", kWrite).ok());
}

// --- The matrix: permissions x RPCs x namespaces, against a daemon. ---

class AuthMatrix : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = dir_.path() + "/tokens";
    std::ofstream(path) << "reader team-a* read\n"
                           "writer team-a* write\n"
                           "worker team-a* work\n"
                           "admin-a team-a* admin\n"
                           "root * admin\n";
    auto o = TestDaemon::DefaultOptions();
    o.auth_tokens = path;
    daemon_ = std::make_unique<TestDaemon>(o);
  }

  std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + 10s);
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }

  // Calls `method` on namespace `ns` with `token`; returns the status (for
  // Subscribe: OK once registered, else the stream's status).
  grpc::StatusCode Call(const std::string& method, const std::string& ns,
                        const std::string& token) {
    auto& stub = daemon_->stub();
    auto ctx = Ctx(token);
    grpc::Status s;
    if (method == "SetTimer") {
      v1::SetTimerRequest r;
      r.set_namespace_(ns);
      r.set_key("k");
      *r.mutable_delay() = Millis(3'600'000);
      v1::SetTimerResponse resp;
      s = stub.SetTimer(ctx.get(), r, &resp);
    } else if (method == "MoveTimer") {
      v1::MoveTimerRequest r;
      r.set_namespace_(ns);
      r.set_key("k");
      *r.mutable_delay() = Millis(3'600'000);
      v1::MoveTimerResponse resp;
      s = stub.MoveTimer(ctx.get(), r, &resp);
    } else if (method == "RemoveTimer") {
      v1::RemoveTimerRequest r;
      r.set_namespace_(ns);
      r.set_key("absent");
      v1::RemoveTimerResponse resp;
      s = stub.RemoveTimer(ctx.get(), r, &resp);
    } else if (method == "Batch") {
      v1::BatchRequest r;
      auto* set = r.add_operations()->mutable_set();
      set->set_namespace_(ns);
      set->set_key("b");
      *set->mutable_delay() = Millis(3'600'000);
      v1::BatchResponse resp;
      s = stub.Batch(ctx.get(), r, &resp);
    } else if (method == "GetTimer") {
      v1::GetTimerRequest r;
      r.set_namespace_(ns);
      r.set_key("k");
      v1::Timer resp;
      s = stub.GetTimer(ctx.get(), r, &resp);
    } else if (method == "ListTimers") {
      v1::ListTimersRequest r;
      r.set_namespace_(ns);
      v1::ListTimersResponse resp;
      s = stub.ListTimers(ctx.get(), r, &resp);
    } else if (method == "Ack") {
      v1::AckRequest r;
      r.set_namespace_(ns);
      r.add_event_ids(12345);
      v1::AckResponse resp;
      s = stub.Ack(ctx.get(), r, &resp);
    } else if (method == "Nack") {
      v1::NackRequest r;
      r.set_namespace_(ns);
      r.add_event_ids(12345);
      v1::NackResponse resp;
      s = stub.Nack(ctx.get(), r, &resp);
    } else if (method == "ExtendLease") {
      v1::ExtendLeaseRequest r;
      r.set_namespace_(ns);
      r.add_event_ids(12345);
      *r.mutable_extension() = Millis(1000);
      v1::ExtendLeaseResponse resp;
      s = stub.ExtendLease(ctx.get(), r, &resp);
    } else if (method == "ListDeadLetters") {
      v1::ListDeadLettersRequest r;
      r.set_namespace_(ns);
      v1::ListDeadLettersResponse resp;
      s = stub.ListDeadLetters(ctx.get(), r, &resp);
    } else if (method == "RequeueDeadLetters" || method == "PurgeDeadLetters") {
      v1::DeadLettersRequest r;
      r.set_namespace_(ns);
      r.set_all(true);
      v1::DeadLettersResponse resp;
      s = method == "PurgeDeadLetters"
              ? stub.PurgeDeadLetters(ctx.get(), r, &resp)
              : stub.RequeueDeadLetters(ctx.get(), r, &resp);
    } else if (method == "GetPolicy") {
      v1::GetPolicyRequest r;
      r.set_namespace_(ns);
      v1::Policy resp;
      s = stub.GetPolicy(ctx.get(), r, &resp);
    } else if (method == "SetPolicy") {
      v1::SetPolicyRequest r;
      r.set_namespace_(ns);
      v1::Policy resp;
      s = stub.SetPolicy(ctx.get(), r, &resp);
    } else if (method == "TestPushTarget") {
      v1::TestPushTargetRequest r;
      r.set_namespace_(ns);
      v1::TestPushTargetResponse resp;
      s = stub.TestPushTarget(ctx.get(), r, &resp);
    } else if (method == "Drain") {
      v1::DrainRequest r;
      r.set_namespace_(ns);
      v1::DrainResponse resp;
      s = stub.Drain(ctx.get(), r, &resp);
    } else if (method == "Stats") {
      v1::StatsResponse resp;
      s = stub.Stats(ctx.get(), v1::StatsRequest(), &resp);
    } else if (method == "StatsOf") {
      // One namespace's figures ("" stands for "default" here: an empty
      // name asks for the whole daemon).
      v1::StatsRequest r;
      r.set_namespace_(ns.empty() ? "default" : ns);
      v1::StatsResponse resp;
      s = stub.Stats(ctx.get(), r, &resp);
    } else if (method == "PreviewSchedule") {
      v1::PreviewScheduleRequest r;
      r.set_namespace_(ns);
      r.mutable_spec()->set_cron("@hourly");
      v1::PreviewScheduleResponse resp;
      s = stub.PreviewSchedule(ctx.get(), r, &resp);
    } else if (method == "SetSchedule") {
      v1::SetScheduleRequest r;
      r.set_namespace_(ns);
      r.set_key("s");
      r.mutable_spec()->set_cron("@hourly");
      v1::Schedule resp;
      s = stub.SetSchedule(ctx.get(), r, &resp);
    } else if (method == "GetSchedule" || method == "DeleteSchedule" ||
               method == "PauseSchedule" || method == "ResumeSchedule" ||
               method == "TriggerSchedule") {
      // (On a key with no schedule: allowed calls find nothing.)
      v1::ScheduleActionRequest r;
      r.set_namespace_(ns);
      r.set_key("none");
      v1::Schedule resp;
      if (method == "GetSchedule") {
        v1::GetScheduleRequest g;
        g.set_namespace_(ns);
        g.set_key("none");
        s = stub.GetSchedule(ctx.get(), g, &resp);
      } else if (method == "DeleteSchedule") {
        v1::DeleteScheduleRequest d;
        d.set_namespace_(ns);
        d.set_key("none");
        v1::DeleteScheduleResponse gone;
        s = stub.DeleteSchedule(ctx.get(), d, &gone);
      } else if (method == "PauseSchedule") {
        s = stub.PauseSchedule(ctx.get(), r, &resp);
      } else if (method == "ResumeSchedule") {
        s = stub.ResumeSchedule(ctx.get(), r, &resp);
      } else {
        s = stub.TriggerSchedule(ctx.get(), r, &resp);
      }
      if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
        return grpc::StatusCode::OK;
      }
    } else if (method == "ListSchedules") {
      v1::ListSchedulesRequest r;
      r.set_namespace_(ns);
      v1::ListSchedulesResponse resp;
      s = stub.ListSchedules(ctx.get(), r, &resp);
    } else if (method == "Backup") {
      v1::BackupRequest r;
      r.set_dir("backup-" + std::to_string(++backups_));
      v1::BackupResponse resp;
      s = stub.Backup(ctx.get(), r, &resp);
    } else if (method == "WorkStream") {
      v1::WorkRequest r;
      r.mutable_subscribe()->set_namespace_(ns);
      auto stream = stub.Work(ctx.get());
      stream->Write(r);
      v1::SubscribeResponse msg;
      if (stream->Read(&msg)) {
        ctx->TryCancel();
        stream->Finish();
        return grpc::StatusCode::OK;
      }
      s = stream->Finish();
    } else {
      v1::SubscribeRequest r;
      r.set_namespace_(ns);
      r.set_mode(method == "Watch" ? v1::SubscribeRequest::WATCHER
                                   : v1::SubscribeRequest::WORKER);
      auto reader = stub.Subscribe(ctx.get(), r);
      v1::SubscribeResponse msg;
      if (reader->Read(&msg)) {
        ctx->TryCancel();
        reader->Finish();
        return grpc::StatusCode::OK;
      }
      s = reader->Finish();
    }
    return s.error_code();
  }

  testing::TempDir dir_;
  std::unique_ptr<TestDaemon> daemon_;
  int backups_ = 0;
};

TEST_F(AuthMatrix, EveryRpcNeedsItsPermissionOnItsNamespace) {
  // What each method needs.
  const std::map<std::string, std::uint8_t> needs = {
      {"SetTimer", kWrite},
      {"MoveTimer", kWrite},
      {"RemoveTimer", kWrite},
      {"Batch", kWrite},
      {"GetTimer", kRead},
      {"ListTimers", kRead},
      {"Watch", kRead},
      {"Work", kWork},
      {"WorkStream", kWork},
      {"Ack", kWork},
      {"Drain", kAdmin},
      {"Stats", kAdmin},
      {"Backup", kAdmin},
      {"StatsOf", kRead},
      {"Nack", kWork},
      {"ExtendLease", kWork},
      {"GetPolicy", kRead},
      {"SetPolicy", kAdmin},
      {"TestPushTarget", kAdmin},
      {"ListDeadLetters", kRead},
      {"RequeueDeadLetters", kWrite},
      {"PurgeDeadLetters", kWrite},
      {"PreviewSchedule", kRead},
      {"SetSchedule", kWrite},
      {"GetSchedule", kRead},
      {"ListSchedules", kRead},
      {"DeleteSchedule", kWrite},
      {"PauseSchedule", kWrite},
      {"ResumeSchedule", kWrite},
      {"TriggerSchedule", kWrite},
  };
  const std::map<std::string, std::uint8_t> tokens = {
      {"reader", kRead},
      {"writer", kWrite},
      {"worker", kWork},
      {"admin-a", kRead | kWrite | kWork | kAdmin},
      {"root", kRead | kWrite | kWork | kAdmin},
  };
  int checked = 0;
  for (const auto& [method, need] : needs) {
    for (const std::string ns : {"team-a1", "team-b", ""}) {
      EXPECT_EQ(Call(method, ns, ""), grpc::StatusCode::UNAUTHENTICATED)
          << method << " " << ns;
      EXPECT_EQ(Call(method, ns, "guess"), grpc::StatusCode::UNAUTHENTICATED)
          << method << " " << ns;
      for (const auto& [token, has] : tokens) {
        // Stats and Backup span every namespace: only `*` grants them.
        const bool ns_ok =
            token == "root" || (method != "Stats" && method != "Backup" &&
                                ns.starts_with("team-a"));
        const bool allowed = ns_ok && (has & need) == need;
        const grpc::StatusCode got = Call(method, ns, token);
        if (allowed) {
          EXPECT_NE(got, grpc::StatusCode::PERMISSION_DENIED)
              << method << " " << ns << " " << token;
          EXPECT_NE(got, grpc::StatusCode::UNAUTHENTICATED)
              << method << " " << ns << " " << token;
        } else {
          EXPECT_EQ(got, grpc::StatusCode::PERMISSION_DENIED)
              << method << " " << ns << " " << token;
        }
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 30 * 3 * 5);
}

TEST_F(AuthMatrix, ATenantSeesItsNamespaceFiguresAndNothingElse) {
  for (const std::string ns : {"team-a1", "team-b"}) {
    v1::SetTimerRequest set;
    set.set_namespace_(ns);
    set.set_key("k");
    *set.mutable_delay() = Millis(3'600'000);
    v1::SetTimerResponse set_resp;
    auto root = Ctx("root");
    ASSERT_TRUE(daemon_->stub().SetTimer(root.get(), set, &set_resp).ok());
  }
  v1::StatsRequest r;
  r.set_namespace_("team-a1");
  v1::StatsResponse resp;
  auto ctx = Ctx("reader");
  ASSERT_TRUE(daemon_->stub().Stats(ctx.get(), r, &resp).ok());
  ASSERT_EQ(resp.namespaces_size(), 1);
  EXPECT_EQ(resp.namespaces(0).namespace_(), "team-a1");
  EXPECT_EQ(resp.namespaces(0).pending_timers(), 1u);
  EXPECT_EQ(resp.namespaces(0).timers_set(), 1u);
  // Nothing daemon-wide: it would count the other tenants.
  EXPECT_EQ(resp.pending_timers(), 0u);
  EXPECT_EQ(resp.timers_set(), 0u);
  EXPECT_EQ(resp.partitions(), 0u);
  // The whole daemon's figures name both.
  v1::StatsResponse all;
  auto root = Ctx("root");
  ASSERT_TRUE(daemon_->stub().Stats(root.get(), {}, &all).ok());
  ASSERT_EQ(all.namespaces_size(), 2);
  EXPECT_EQ(all.namespaces(0).namespace_(), "team-a1");
  EXPECT_EQ(all.namespaces(1).namespace_(), "team-b");
  EXPECT_EQ(all.pending_timers(), 2u);
}

TEST_F(AuthMatrix, BatchTouchingAForbiddenNamespaceIsRefusedWhole) {
  v1::BatchRequest r;
  for (const std::string ns : {"team-a1", "team-b"}) {
    auto* set = r.add_operations()->mutable_set();
    set->set_namespace_(ns);
    set->set_key("both");
    *set->mutable_delay() = Millis(3'600'000);
  }
  v1::BatchResponse resp;
  auto ctx = Ctx("writer");
  EXPECT_EQ(daemon_->stub().Batch(ctx.get(), r, &resp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Nothing was set, not even in the namespace it may write.
  v1::GetTimerRequest get;
  get.set_namespace_("team-a1");
  get.set_key("both");
  v1::Timer t;
  auto root = Ctx("root");
  EXPECT_EQ(daemon_->stub().GetTimer(root.get(), get, &t).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(AuthMatrix, HealthStaysOpenAndTokensReloadOnRequest) {
  auto health = grpc::health::v1::Health::NewStub(daemon_->channel());
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(
      health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  std::ofstream(dir_.path() + "/tokens") << "newroot * admin\n";
  ASSERT_TRUE(daemon_->server().Reload().ok());
  EXPECT_EQ(Call("Stats", "", "root"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Call("Stats", "", "newroot"), grpc::StatusCode::OK);
  // A file that does not parse is refused; the table in use stays.
  std::ofstream(dir_.path() + "/tokens") << "broken\n";
  EXPECT_FALSE(daemon_->server().Reload().ok());
  EXPECT_EQ(Call("Stats", "", "newroot"), grpc::StatusCode::OK);
}

}  // namespace
}  // namespace delayd
