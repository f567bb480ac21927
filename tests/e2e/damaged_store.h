// Helpers for the tests that damage a data directory (damaged_store_test,
// unreadable_payload_test): filling one through the real delayd, finding
// its files and damaging them.
#ifndef DELAYD_TESTS_E2E_DAMAGED_STORE_H_
#define DELAYD_TESTS_E2E_DAMAGED_STORE_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "delayd/v1/delayd.grpc.pb.h"
#include "tests/common/daemon_process.h"
#include "tests/common/temp_dir.h"
#include "tests/server/test_client.h"

namespace delayd::testing {

namespace fs = std::filesystem;
inline constexpr int kTimers = 50;

// The sequence number `dir`'s mark records as durable (0 if none).
inline std::uint64_t MarkedSequence(const std::string& dir) {
  std::ifstream in(dir + "/DELAYD-MARK");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("sequence ")) return std::stoull(line.substr(9));
  }
  return 0;
}

// Fills `dir` with kTimers pending timers, then stops the daemon with
// `signo`: SIGTERM leaves table files, SIGKILL leaves the log. With
// `marked`, SIGKILL waits until the mark covers (nearly) every timer: each
// SetTimer is at least two writes (the timer and its payload).
inline void Populate(const std::string& dir, int signo,
                     const std::string& fsync, bool marked,
                     std::size_t pad = 0) {
  DaemonProcess d(DELAYD_BINARY, {"--data-dir", dir, "--fsync", fsync});
  ASSERT_TRUE(d.ok()) << d.output();
  auto stub = v1::Delayd::NewStub(
      grpc::CreateChannel(d.address(), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < kTimers; ++i) {
    v1::SetTimerRequest req;
    req.set_key("k" + std::to_string(i));
    req.set_payload("payload-" + std::to_string(i) + std::string(pad, '.'));
    *req.mutable_delay() = Millis(3'600'000);
    v1::SetTimerResponse resp;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->SetTimer(&ctx, req, &resp).ok());
  }
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (marked && MarkedSequence(dir) < 2 * kTimers) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "the mark never covered the timers";
    std::this_thread::sleep_for(20ms);
  }
  const auto code = d.Stop(signo, std::chrono::seconds(10));
  ASSERT_TRUE(code.has_value());
  if (signo == SIGTERM) {
    ASSERT_EQ(*code, 0) << d.output();
  }
}

inline std::vector<fs::path> Files(const std::string& dir,
                                   const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().extension() == ext ||
        (ext == "MANIFEST" &&
         f.path().filename().string().starts_with("MANIFEST-"))) {
      out.push_back(f.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

inline void Overwrite(const fs::path& file, std::uintmax_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  f.write("\xde\xad\xbe\xef\xde\xad\xbe\xef", 8);
}

// Flips one byte inside the payloads' table (a data block the start does
// not read). Returns whether it found one.
inline bool FlipPayloadByte(const std::string& dir) {
  bool flipped = false;
  for (const auto& t : Files(dir, ".sst")) {
    std::ifstream in(t, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    const auto at = bytes.find("payload-1");
    if (at == std::string::npos) continue;
    std::fstream f(t, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    f.put(static_cast<char>(bytes[at] ^ 0x01));
    flipped = true;
  }
  return flipped;
}

// A suite's data directories, filled once for all its tests (by the suite's
// own SetUpTestSuite, into dir_), and copies of them to damage.
class DataDirs : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // A copy of the filled directory `from`, named `to`.
  static std::string Copy(const std::string& from, const std::string& to) {
    fs::copy(*dir_ / from, *dir_ / to, fs::copy_options::recursive);
    return *dir_ / to;
  }
  inline static TempDir* dir_ = nullptr;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_E2E_DAMAGED_STORE_H_
