// A TCP proxy on 127.0.0.1 (a port the OS picks) to a port on 127.0.0.1,
// that a test can cut: while cut, it takes connections and bytes and
// passes none on (a network that has gone silent, not one that refuses);
// Heal closes every connection (as keepalives would, at last) and passes
// new ones on again.
//
// Thread safety: Cut and Heal from any thread; the proxy runs on its own.
#ifndef DELAYD_TESTS_COMMON_TCP_PROXY_H_
#define DELAYD_TESTS_COMMON_TCP_PROXY_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

namespace delayd::testing {

class TcpProxy {
 public:
  explicit TcpProxy(int target_port) : target_(target_port) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = Loopback(0);
    socklen_t len = sizeof(addr);
    if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
            0 ||
        listen(listener_, 64) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~TcpProxy() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    CloseAll();
    close(listener_);
  }

  // The port to connect to; 0 if it could not listen.
  int port() const { return port_; }
  void Cut() { cut_ = true; }
  void Heal() {
    heal_ = true;
    cut_ = false;
  }

 private:
  struct Pair {
    int client, server;
  };

  static sockaddr_in Loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return addr;
  }

  void CloseAll() {
    for (const Pair& p : pairs_) close(p.client), close(p.server);
    pairs_.clear();
  }

  void Accept() {
    const int client = accept(listener_, nullptr, nullptr);
    if (client < 0) return;
    const int server = socket(AF_INET, SOCK_STREAM, 0);
    const sockaddr_in addr = Loopback(target_);
    if (connect(server, reinterpret_cast<const sockaddr*>(&addr),
                sizeof(addr)) != 0) {
      close(client), close(server);
      return;
    }
    pairs_.push_back({client, server});
  }

  // Moves what `from` has to `to` (dropped while cut); false: closed.
  bool Pass(int from, int to) {
    char buf[16384];
    const ssize_t n = read(from, buf, sizeof(buf));
    if (n <= 0) return false;
    if (cut_) return true;
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = write(to, buf + done, n - done);
      if (w <= 0) return false;
      done += w;
    }
    return true;
  }

  void Run() {
    while (!stop_) {
      if (heal_.exchange(false)) CloseAll();
      std::vector<pollfd> fds{{listener_, POLLIN, 0}};
      for (const Pair& p : pairs_) {
        fds.push_back({p.client, POLLIN, 0});
        fds.push_back({p.server, POLLIN, 0});
      }
      if (poll(fds.data(), fds.size(), 20) <= 0) continue;
      const std::size_t polled = pairs_.size();
      if (fds[0].revents & POLLIN) Accept();
      std::vector<Pair> open;
      for (std::size_t i = 0; i < polled; ++i) {
        const Pair p = pairs_[i];
        const bool ok =
            (!(fds[1 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) ||
             Pass(p.client, p.server)) &&
            (!(fds[2 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)) ||
             Pass(p.server, p.client));
        if (ok) {
          open.push_back(p);
        } else {
          close(p.client), close(p.server);
        }
      }
      // (Accept may have added one after the polled ones.)
      for (std::size_t i = polled; i < pairs_.size(); ++i) {
        open.push_back(pairs_[i]);
      }
      pairs_ = std::move(open);
    }
  }

  const int target_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false}, cut_{false}, heal_{false};
  std::vector<Pair> pairs_;  // Only on thread_ (and after it ends).
  std::thread thread_;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_TCP_PROXY_H_
