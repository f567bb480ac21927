// delayd started on a PostgreSQL database it cannot reach yet: it waits for
// it (the reason logged once, not once per attempt) instead of exiting into
// a supervisor's restart loop, serves once the database is up, and a
// SIGTERM while it waits ends it at once.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "delayd/v1/delayd.grpc.pb.h"
#include "tests/common/daemon_process.h"
#include "tests/common/postgres_server.h"
#include "tests/server/test_client.h"

namespace delayd {
namespace {

using namespace std::chrono_literals;
using testing::DaemonProcess;
using testing::PostgresServer;

std::size_t Count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// A server started and stopped: its database exists, nothing listens.
struct StoppedDatabase {
  StoppedDatabase() {
    std::string error;
    pg = PostgresServer::Start(&error);
    EXPECT_NE(pg, nullptr) << error;
    if (pg == nullptr) return;
    name = pg->NewDatabase();
    url = pg->Url(name);
    pg->Stop();
  }
  std::unique_ptr<PostgresServer> pg;
  std::string name;
  std::string url;
};

TEST(PostgresStart, AnUnreachableDatabaseIsWaitedForThenServed) {
  StoppedDatabase db;
  ASSERT_NE(db.pg, nullptr);
  DaemonProcess d(DELAYD_BINARY, {"--store", db.url, "--node-id", "start"},
                  0ms);
  ASSERT_TRUE(d.WaitForOutput("waiting for the database", 20s)) << d.output();
  EXPECT_FALSE(d.ok());

  std::string error;
  ASSERT_TRUE(db.pg->Restart(&error)) << error;
  ASSERT_TRUE(d.WaitForPort(30s)) << d.output();
  // The attempts while the server started (every 100 ms, doubling) told
  // their reason once.
  EXPECT_EQ(Count(d.output(), "Connection refused"), 1u) << d.output();
  auto channel =
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Delayd::NewStub(channel);
  v1::SetTimerRequest req;
  req.set_key("after-the-wait");
  req.set_payload("p");
  req.mutable_delay()->set_seconds(60);
  v1::SetTimerResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 10s);
  const grpc::Status s = stub->SetTimer(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(db.pg->Exec(db.name, "SELECT count(*) FROM delayd_jobs"), "1");
  EXPECT_EQ(d.Stop(SIGTERM, 30s), 0) << d.output();
}

TEST(PostgresStart, SigtermWhileWaitingEndsIt) {
  StoppedDatabase db;
  ASSERT_NE(db.pg, nullptr);
  DaemonProcess d(DELAYD_BINARY, {"--store", db.url, "--node-id", "start"},
                  0ms);
  ASSERT_TRUE(d.WaitForOutput("waiting for the database", 20s)) << d.output();
  EXPECT_EQ(d.Stop(SIGTERM, 10s), 128 + SIGTERM) << d.output();
}

}  // namespace
}  // namespace delayd
