// A plain HTTP/1.1 client for tests: one request per connection, over a
// socket to 127.0.0.1, so that tests see exactly what a server sends (and
// can send what no well-behaved client would).
#ifndef DELAYD_TESTS_COMMON_HTTP_CLIENT_H_
#define DELAYD_TESTS_COMMON_HTTP_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace delayd::testing {

struct HttpResponse {
  int status = 0;  // 0: no response (connection failed or closed)
  std::string head;
  std::string body;
};

// A connected socket to 127.0.0.1:port (-1 on failure), with a receive
// timeout so that no test waits forever.
inline int HttpConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool SendAll(int fd, const std::string& data) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n =
        send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

// Reads a response to its end (the server closes: the request said
// `Connection: close`).
inline HttpResponse ReadResponse(int fd) {
  std::string all;
  char buf[8192];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    all.append(buf, static_cast<std::size_t>(n));
  }
  HttpResponse r;
  const std::size_t end = all.find("\r\n\r\n");
  if (all.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return r;
  r.status = std::stoi(all.substr(9, 3));
  r.head = all.substr(0, end);
  r.body = all.substr(end + 4);
  return r;
}

inline HttpResponse HttpRequest(int port, const std::string& method,
                                const std::string& target,
                                const std::string& body = "",
                                const std::vector<std::string>& headers = {}) {
  const int fd = HttpConnect(port);
  if (fd < 0) return {};
  std::string req = method + " " + target +
                    " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  for (const auto& h : headers) req += h + "\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") {
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  HttpResponse r;
  if (SendAll(fd, req)) r = ReadResponse(fd);
  close(fd);
  return r;
}

// A request on a kept-alive connection `fd`, and its one response, read
// to the end of its body (Content-Length); status 0 if the connection
// ended first.
inline HttpResponse HttpRequestOn(int fd, const std::string& method,
                                  const std::string& target,
                                  const std::string& body = "") {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") {
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  HttpResponse r;
  if (!SendAll(fd, req + "\r\n" + body)) return r;
  std::string all;
  char buf[8192];
  std::size_t end = std::string::npos, length = 0;
  for (;;) {
    if (end == std::string::npos) {
      end = all.find("\r\n\r\n");
      if (end != std::string::npos) {
        const std::size_t at = all.find("Content-Length: ");
        if (at != std::string::npos && at < end) {
          length = std::stoul(all.substr(at + 16));
        }
      }
    }
    if (end != std::string::npos && all.size() >= end + 4 + length) break;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return r;
    all.append(buf, static_cast<std::size_t>(n));
  }
  r.status = std::stoi(all.substr(9, 3));
  r.head = all.substr(0, end);
  r.body = all.substr(end + 4, length);
  return r;
}

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_HTTP_CLIENT_H_
