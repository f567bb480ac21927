// delayd started on a PostgreSQL database it cannot reach yet: it waits for
// it (the reason logged once, not once per attempt) instead of exiting into
// a supervisor's restart loop, serves once the database is up, and a
// SIGTERM while it waits ends it at once. And the tests' own harness: a
// server goes with the test process that started it, however that ends.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <filesystem>
#include <fstream>

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

// A test that ends without stopping its server (a sanitizer's abort, a
// crash: here _exit, which runs no destructor) leaves no server running.
TEST(PostgresHarness, AServerEndsWithTheProcessThatStartedIt) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  struct Started {
    pid_t pid = -1;
    std::array<char, 256> dir{};
  };
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    std::string error;
    auto pg = PostgresServer::Start(&error);
    Started s;
    if (pg != nullptr) {
      s.pid = pg->pid();
      const std::string dir =
          std::filesystem::path(pg->data_dir()).parent_path().string();
      dir.copy(s.dir.data(), s.dir.size() - 1);
    }
    (void)!write(fds[1], &s, sizeof s);
    _exit(0);
  }
  close(fds[1]);
  Started s;
  const auto got = read(fds[0], &s, sizeof s);
  close(fds[0]);
  waitpid(child, nullptr, 0);
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof s));
  ASSERT_GT(s.pid, 0) << "the server did not start";
  // Gone: no such process, or a zombie its new parent has not reaped.
  auto gone = [pid = s.pid] {
    if (kill(pid, 0) != 0) return errno == ESRCH;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    const auto paren = text.rfind(')');
    return paren != std::string::npos && paren + 2 < text.size() &&
           text[paren + 2] == 'Z';
  };
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!gone() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  const bool ended = gone();
  if (!ended) kill(s.pid, SIGQUIT);  // (Not left running by this test.)
  std::error_code ec;
  std::filesystem::remove_all(s.dir.data(), ec);
  EXPECT_TRUE(ended) << "postgres " << s.pid << " outlived its test process";
}

}  // namespace
}  // namespace delayd
