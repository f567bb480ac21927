// Runs the real delayd binary as a child process on 127.0.0.1 with an
// OS-picked port, for end-to-end tests and the load generator.
#ifndef DELAYD_TESTS_COMMON_DAEMON_PROCESS_H_
#define DELAYD_TESTS_COMMON_DAEMON_PROCESS_H_

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/common/temp_dir.h"

extern char** environ;

namespace delayd::testing {

class DaemonProcess {
 public:
  // Starts `binary` with `args` plus --listen 127.0.0.1:0 and waits (up to
  // `timeout`) for the line that gives its port. ok() tells whether it did.
  // A non-zero `max_file_bytes` makes every write past that size in any
  // file fail (EFBIG, through RLIMIT_FSIZE): a disk that is full for it.
  // The child's TMPDIR is a directory of its own, removed with this object:
  // what a daemon killed with SIGKILL leaves there (its TLS certificates'
  // private copies) goes too.
  DaemonProcess(const std::string& binary, std::vector<std::string> args,
                std::chrono::milliseconds timeout = std::chrono::seconds(10),
                rlim_t max_file_bytes = 0) {
    int out[2];
    if (pipe(out) != 0) return;
    args.insert(args.begin(), {binary, "--listen", "127.0.0.1:0"});
    // Everything the child needs is built before fork(): other threads of a
    // test may hold the allocator's lock at that moment, and a child that
    // allocated before exec would wait for it forever.
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string_view(*e).starts_with("TMPDIR=")) continue;
      env_strings.emplace_back(*e);
    }
    if (!tmp_.path().empty()) env_strings.push_back("TMPDIR=" + tmp_.path());
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      if (max_file_bytes != 0) {
        signal(SIGXFSZ, SIG_IGN);  // Kept across exec: writes fail instead.
        const rlimit limit{max_file_bytes, max_file_bytes};
        setrlimit(RLIMIT_FSIZE, &limit);
      }
      dup2(out[1], STDOUT_FILENO);
      dup2(out[1], STDERR_FILENO);
      close(out[0]);
      close(out[1]);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(out[1]);
    if (pid_ < 0) {
      close(out[0]);
      return;
    }
    // The pipe is read for the child's whole life: a child whose output
    // nobody reads blocks in write() once the pipe's buffer (64 KiB) is
    // full, with whatever locks its logging thread holds.
    reader_ = std::thread([this, fd = out[0]] { Drain(fd); });
    std::unique_lock lock(mu_);
    changed_.wait_until(lock, std::chrono::steady_clock::now() + timeout,
                        [&] { return port_ != 0 || eof_; });
  }
  ~DaemonProcess() {
    if (pid_ > 0 && !exit_code_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();  // EOF follows the exit.
  }

  bool ok() const {
    std::lock_guard lock(mu_);
    return port_ != 0;
  }
  int port() const {
    std::lock_guard lock(mu_);
    return port_;
  }
  // Waits up to `timeout` for the port line (a daemon started with a short
  // timeout that is still starting): ok().
  bool WaitForPort(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return changed_.wait_until(lock, std::chrono::steady_clock::now() + timeout,
                               [&] { return port_ != 0 || eof_; }) &&
           port_ != 0;
  }
  // Waits up to `timeout` for `text` in what the child printed.
  bool WaitForOutput(std::string_view text, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return changed_.wait_until(
               lock, std::chrono::steady_clock::now() + timeout,
               [&] {
                 return output_.find(text) != std::string::npos || eof_;
               }) &&
           output_.find(text) != std::string::npos;
  }
  pid_t pid() const { return pid_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port()); }
  // Whether the child's output has ended: it and what it forked exited.
  bool exited() const {
    std::lock_guard lock(mu_);
    return eof_;
  }
  // What the child printed so far (the start and the latest part of it, if
  // it printed more than kKeepBytes).
  std::string output() const {
    std::lock_guard lock(mu_);
    return output_;
  }

  // Stops the child with SIGSTOP and waits until all its threads have
  // stopped: a stop takes effect once one of its threads runs to take the
  // signal, and until then the others go on (on a busy machine, for
  // milliseconds). False if the child exited instead (then its exit code
  // is kept for Stop).
  bool Freeze() {
    if (pid_ <= 0 || exit_code_ || kill(pid_, SIGSTOP) != 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WUNTRACED) != pid_) return false;
    if (WIFSTOPPED(status)) return true;
    exit_code_ =
        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  // Lets a frozen child run on.
  bool Thaw() { return pid_ > 0 && !exit_code_ && kill(pid_, SIGCONT) == 0; }

  // Sends `signo` and waits up to `timeout` for the exit; returns the exit
  // code (128 + signal if killed by one), or nullopt if it did not exit.
  // After an exit, output() holds everything the child printed.
  std::optional<int> Stop(int signo, std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return std::nullopt;
    if (exit_code_) return exit_code_;
    kill(pid_, signo);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::unique_lock lock(mu_);
    // EOF comes when the child and everything it forked have exited.
    if (!changed_.wait_until(lock, deadline, [&] { return eof_; })) {
      return std::nullopt;
    }
    lock.unlock();
    int status = 0;
    if (waitpid(pid_, &status, 0) != pid_) return std::nullopt;
    exit_code_ =
        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_code_;
  }

 private:
  static constexpr std::size_t kKeepBytes = 4 << 20;

  // Runs on reader_ until EOF: appends what the child prints to output_
  // and finds the port in it.
  void Drain(int fd) {
    char buf[4096];
    for (;;) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      std::lock_guard lock(mu_);
      if (n <= 0) {
        eof_ = true;
        changed_.notify_all();
        break;
      }
      output_.append(buf, static_cast<std::size_t>(n));
      changed_.notify_all();
      if (output_.size() > kKeepBytes) {
        // Keeps the first lines (the port) and the newest half.
        output_.replace(64 << 10, output_.size() - kKeepBytes / 2 - (64 << 10),
                        "\n[... output cut ...]\n");
      }
      if (port_ == 0) {
        // ("delayd listening on ADDRESS port N (...": the daemon's line,
        // not a port that another message names.)
        const auto line = output_.find("delayd listening on ");
        const auto at = line == std::string::npos
                            ? std::string::npos
                            : output_.find(" port ", line);
        if (at != std::string::npos) {
          const auto end = output_.find(' ', at + 6);
          if (end != std::string::npos) {
            port_ = std::stoi(output_.substr(at + 6, end - at - 6));
            changed_.notify_all();
          }
        }
      }
    }
    close(fd);
  }

  pid_t pid_ = -1;
  TempDir tmp_;  // the child's TMPDIR (made before, removed after it)
  std::optional<int> exit_code_;
  std::thread reader_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  int port_ = 0;        // Guarded by mu_.
  bool eof_ = false;    // Guarded by mu_.
  std::string output_;  // Guarded by mu_.
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_DAEMON_PROCESS_H_
