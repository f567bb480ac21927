// Test helpers: an HTTP GET on loopback (bounded in time) and a reader of
// Prometheus's text format, to check what a metrics endpoint serves.
#ifndef DELAYD_TESTS_COMMON_METRICS_SCRAPE_H_
#define DELAYD_TESTS_COMMON_METRICS_SCRAPE_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace delayd::testing {

// The body of GET `path` from 127.0.0.1:`port` (HTTP/1.0, so the server
// closes the connection after it); nullopt on any failure or after 5 s.
inline std::optional<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request =
        "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buf[65536];
      for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) {
        response.append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  close(fd);
  const auto body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || body == std::string::npos ||
      response.find(" 200 ") == std::string::npos) {
    return std::nullopt;
  }
  return response.substr(body + 4);
}

// The metrics port a daemon's log `output` names ("metrics on
// http://ADDR/metrics (port N"), or 0 if it names none yet.
inline int MetricsPortIn(const std::string& output) {
  const std::size_t at = output.find("/metrics (port ");
  return at == std::string::npos ? 0 : std::atoi(output.c_str() + at + 15);
}

// The value of series `series` (its name and labels, as the endpoint
// writes them) in the metrics on `port`; -1 if absent.
inline double Metric(int port, const std::string& series) {
  const std::string text = HttpGet(port, "/metrics").value_or("");
  const std::size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

// One scrape, read: each sample by name and labels.
class Scrape {
 public:
  using Labels = std::map<std::string, std::string>;
  explicit Scrape(const std::string& text) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      const auto space = line.rfind(' ');
      if (space == std::string::npos) continue;
      std::string series = line.substr(0, space);
      Labels labels;
      std::string name = series;
      if (const auto brace = series.find('{'); brace != std::string::npos) {
        name = series.substr(0, brace);
        // key="value" pairs; delayd's label values hold no quotes.
        std::size_t i = brace + 1;
        while (i < series.size() && series[i] != '}') {
          const auto eq = series.find('=', i);
          const auto end = series.find('"', eq + 2);
          labels[series.substr(i, eq - i)] =
              series.substr(eq + 2, end - (eq + 2));
          i = end + 1;
          if (i < series.size() && series[i] == ',') ++i;
        }
      }
      samples_[name].emplace_back(std::move(labels),
                                  std::stod(line.substr(space + 1)));
    }
  }
  // The sample of `name` with exactly `labels`.
  std::optional<double> Get(const std::string& name,
                            const Labels& labels = {}) const {
    auto it = samples_.find(name);
    if (it == samples_.end()) return std::nullopt;
    for (const auto& [l, v] : it->second) {
      if (l == labels) return v;
    }
    return std::nullopt;
  }
  // How many samples `name` has.
  std::size_t Count(const std::string& name) const {
    auto it = samples_.find(name);
    return it == samples_.end() ? 0 : it->second.size();
  }

 private:
  std::map<std::string, std::vector<std::pair<Labels, double>>> samples_;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_METRICS_SCRAPE_H_
