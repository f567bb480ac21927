// Where push delivery may connect (server-side request forgery): the
// address ranges a push target may not reach unless the operator allows
// them (--push-allow), checked at SetPolicy for the addresses a target's
// host resolves to, and again at every connection, on the very address
// connected to (pusher.cc), so a name that resolves elsewhere later gains
// nothing.
#ifndef DELAYD_SERVER_PUSH_ADDRESS_RULES_H_
#define DELAYD_SERVER_PUSH_ADDRESS_RULES_H_

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"

namespace delayd::push {

// An IPv4 or IPv6 address (IPv4 as IPv4-mapped IPv6) and a prefix length.
struct Range {
  std::array<std::uint8_t, 16> bytes{};
  int prefix = 0;  // Of the 128 bits.
  bool Contains(const std::array<std::uint8_t, 16>& a) const;
};

// The ranges refused by default, each with the rule's name.
struct Forbidden {
  Range range;
  const char* rule;
};
const std::vector<Forbidden>& ForbiddenRanges();

// Immutable once built: shared by threads without a lock.
class AddressRules {
 public:
  // Each of `allow` is an address ("127.0.0.1", "::1"), a range in CIDR
  // notation ("10.0.0.0/8") or a host name ("localhost", matched against
  // the URL's host, not resolved). Fails naming the first that is none.
  static Status Parse(const std::vector<std::string>& allow, AddressRules* out);

  // Why an address may not be connected to ("loopback (127.0.0.0/8)"), or
  // nullopt if it may; `host` is the URL's host (an allowed name allows
  // every address it resolves to).
  std::optional<std::string> Refuses(const sockaddr* addr,
                                     std::string_view host) const;
  std::optional<std::string> Refuses(const std::array<std::uint8_t, 16>& a,
                                     std::string_view host) const;

  // Resolves `host` (the system resolver: it may block) and checks every
  // address it gives: INVALID_ARGUMENT naming the address and its rule, or
  // if it does not resolve.
  Status CheckHost(const std::string& host) const;

 private:
  std::vector<Range> ranges_;
  std::vector<std::string> hosts_;  // Lower case.
};

// Parses "a.b.c.d" or an IPv6 text (brackets allowed) into `out`.
bool ParseAddress(std::string_view text, std::array<std::uint8_t, 16>* out);

}  // namespace delayd::push

#endif  // DELAYD_SERVER_PUSH_ADDRESS_RULES_H_
