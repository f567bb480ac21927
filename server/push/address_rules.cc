#include "server/push/address_rules.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace delayd::push {
namespace {

std::array<std::uint8_t, 16> Mapped(const std::uint8_t v4[4]) {
  std::array<std::uint8_t, 16> a{};
  a[10] = 0xff;
  a[11] = 0xff;
  std::memcpy(a.data() + 12, v4, 4);
  return a;
}

Range V4(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d,
         int prefix) {
  const std::uint8_t v4[4] = {a, b, c, d};
  return Range{Mapped(v4), 96 + prefix};
}

Range V6(std::initializer_list<std::uint8_t> head, int prefix) {
  Range r;
  std::copy(head.begin(), head.end(), r.bytes.begin());
  r.prefix = prefix;
  return r;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

std::string Text(const std::array<std::uint8_t, 16>& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  static constexpr std::uint8_t kMappedHead[12] = {0, 0, 0, 0, 0,    0,
                                                   0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a.data(), kMappedHead, 12) == 0) {
    inet_ntop(AF_INET, a.data() + 12, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, a.data(), buf, sizeof buf);
  }
  return buf;
}

}  // namespace

bool Range::Contains(const std::array<std::uint8_t, 16>& a) const {
  const int whole = prefix / 8;
  if (std::memcmp(a.data(), bytes.data(), whole) != 0) return false;
  const int rest = prefix % 8;
  if (rest == 0) return true;
  const std::uint8_t mask = static_cast<std::uint8_t>(0xff << (8 - rest));
  return (a[whole] & mask) == (bytes[whole] & mask);
}

const std::vector<Forbidden>& ForbiddenRanges() {
  static const std::vector<Forbidden> kRanges = {
      {V4(0, 0, 0, 0, 8), "unspecified (0.0.0.0/8)"},
      {V4(127, 0, 0, 0, 8), "loopback (127.0.0.0/8)"},
      {V4(10, 0, 0, 0, 8), "private (10.0.0.0/8, RFC 1918)"},
      {V4(172, 16, 0, 0, 12), "private (172.16.0.0/12, RFC 1918)"},
      {V4(192, 168, 0, 0, 16), "private (192.168.0.0/16, RFC 1918)"},
      {V4(100, 64, 0, 0, 10), "shared address space (100.64.0.0/10, RFC 6598)"},
      {V4(169, 254, 0, 0, 16),
       "link-local (169.254.0.0/16, cloud metadata included)"},
      {V4(224, 0, 0, 0, 4), "multicast (224.0.0.0/4)"},
      {V4(240, 0, 0, 0, 4), "reserved (240.0.0.0/4, broadcast included)"},
      {V6({}, 128), "unspecified (::)"},
      {V6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128),
       "loopback (::1)"},
      {V6({0xfc}, 7), "unique-local (fc00::/7)"},
      {V6({0xfe, 0x80}, 10), "link-local (fe80::/10)"},
      {V6({0xff}, 8), "multicast (ff00::/8)"},
      // IPv4 inside IPv6 forms that reach the IPv4 address: NAT64 and
      // 6to4 are checked as such only when allowed outright.
      {V6({0, 0x64, 0xff, 0x9b}, 96), "NAT64 (64:ff9b::/96)"},
      {V6({0x20, 0x02}, 16), "6to4 (2002::/16)"},
  };
  return kRanges;
}

bool ParseAddress(std::string_view text, std::array<std::uint8_t, 16>* out) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  if (text.empty() || text.size() >= INET6_ADDRSTRLEN) return false;
  const std::string s(text);
  std::uint8_t v4[4];
  if (inet_pton(AF_INET, s.c_str(), v4) == 1) {
    *out = Mapped(v4);
    return true;
  }
  return inet_pton(AF_INET6, s.c_str(), out->data()) == 1;
}

Status AddressRules::Parse(const std::vector<std::string>& allow,
                           AddressRules* out) {
  AddressRules rules;
  for (const std::string& item : allow) {
    const auto slash = item.find('/');
    Range r;
    if (ParseAddress(std::string_view(item).substr(0, slash), &r.bytes)) {
      const bool v4 = r.bytes[10] == 0xff && r.bytes[11] == 0xff &&
                      std::all_of(r.bytes.begin(), r.bytes.begin() + 10,
                                  [](std::uint8_t b) { return b == 0; });
      int prefix = v4 ? 32 : 128;
      if (slash != std::string::npos) {
        const char* b = item.data() + slash + 1;
        const char* e = item.data() + item.size();
        const auto [at, err] = std::from_chars(b, e, prefix);
        if (err != std::errc() || at != e || prefix < 0 ||
            prefix > (v4 ? 32 : 128)) {
          return Status::InvalidArgument("--push-allow " + item +
                                         ": not a prefix length");
        }
      }
      r.prefix = v4 ? 96 + prefix : prefix;
      rules.ranges_.push_back(r);
      continue;
    }
    const bool name = !item.empty() && item.size() <= 253 &&
                      slash == std::string::npos &&
                      std::all_of(item.begin(), item.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) ||
                               c == '-' || c == '.';
                      });
    if (!name) {
      return Status::InvalidArgument("--push-allow " + item +
                                     ": neither an address, a range nor a "
                                     "host name");
    }
    rules.hosts_.push_back(Lower(item));
  }
  *out = std::move(rules);
  return Status::Ok();
}

std::optional<std::string> AddressRules::Refuses(
    const std::array<std::uint8_t, 16>& a, std::string_view host) const {
  const std::string lower = Lower(host);
  if (std::find(hosts_.begin(), hosts_.end(), lower) != hosts_.end()) {
    return std::nullopt;
  }
  for (const Range& r : ranges_) {
    if (r.Contains(a)) return std::nullopt;
  }
  for (const Forbidden& f : ForbiddenRanges()) {
    if (f.range.Contains(a)) {
      return Text(a) + " is " + f.rule +
             ", refused for push targets unless --push-allow allows it";
    }
  }
  return std::nullopt;
}

std::optional<std::string> AddressRules::Refuses(const sockaddr* addr,
                                                 std::string_view host) const {
  std::array<std::uint8_t, 16> a{};
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    a = Mapped(reinterpret_cast<const std::uint8_t*>(&in->sin_addr));
  } else if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    std::memcpy(a.data(), &in6->sin6_addr, 16);
  } else {
    return "address family " + std::to_string(addr->sa_family) +
           " is refused for push targets";
  }
  return Refuses(a, host);
}

Status AddressRules::CheckHost(const std::string& host) const {
  std::array<std::uint8_t, 16> literal{};
  if (ParseAddress(host, &literal)) {
    if (auto why = Refuses(literal, host)) {
      return Status::InvalidArgument("push.url: " + *why);
    }
    return Status::Ok();
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int err = getaddrinfo(host.c_str(), nullptr, &hints, &found);
      err != 0) {
    return Status::InvalidArgument("push.url: host " + host +
                                   " does not resolve: " + gai_strerror(err));
  }
  Status s = Status::Ok();
  for (const addrinfo* ai = found; ai != nullptr && s.ok(); ai = ai->ai_next) {
    if (auto why = Refuses(ai->ai_addr, host)) {
      s = Status::InvalidArgument("push.url: " + host + " resolves to " + *why);
    }
  }
  freeaddrinfo(found);
  return s;
}

}  // namespace delayd::push
