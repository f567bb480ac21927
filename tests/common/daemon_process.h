// Runs the real delayd binary as a child process on 127.0.0.1 with an
// OS-picked port, for end-to-end tests and the load generator.
#ifndef DELAYD_TESTS_COMMON_DAEMON_PROCESS_H_
#define DELAYD_TESTS_COMMON_DAEMON_PROCESS_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace delayd::testing {

class DaemonProcess {
 public:
  // Starts `binary` with `args` plus --listen 127.0.0.1:0 and waits (up to
  // `timeout`) for the line that gives its port. ok() tells whether it did.
  DaemonProcess(const std::string& binary, std::vector<std::string> args,
                std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    int out[2];
    if (pipe(out) != 0) return;
    args.insert(args.begin(), {binary, "--listen", "127.0.0.1:0"});
    // Everything the child needs is built before fork(): other threads of a
    // test may hold the allocator's lock at that moment, and a child that
    // allocated before exec would wait for it forever.
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      dup2(out[1], STDERR_FILENO);
      close(out[0]);
      close(out[1]);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    fd_ = out[0];
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (port_ == 0 && ReadSome(deadline)) {
      const auto at = output_.find(" port ");
      if (at != std::string::npos) {
        const auto end = output_.find(' ', at + 6);
        if (end != std::string::npos) {
          port_ = std::stoi(output_.substr(at + 6, end - at - 6));
        }
      }
    }
  }
  ~DaemonProcess() {
    if (pid_ > 0 && !exit_code_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }

  bool ok() const { return port_ != 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& output() const { return output_; }

  // Sends `signo` and waits up to `timeout` for the exit; returns the exit
  // code (128 + signal if killed by one), or nullopt if it did not exit.
  std::optional<int> Stop(int signo, std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return std::nullopt;
    kill(pid_, signo);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ =
            WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        while (ReadSome(std::chrono::steady_clock::now())) {
        }
        return exit_code_;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      ReadSome(std::chrono::steady_clock::now() +
               std::chrono::milliseconds(10));
    }
  }

 private:
  // Reads what the child printed, waiting at most until `deadline`.
  bool ReadSome(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::max<long>(0, left.count()))) <= 0) {
      return false;
    }
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    output_.append(buf, static_cast<std::size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  int port_ = 0;
  std::optional<int> exit_code_;
  std::string output_;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_DAEMON_PROCESS_H_
