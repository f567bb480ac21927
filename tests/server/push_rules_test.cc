// Push delivery's pure parts: the address rules, Standard Webhooks
// signatures, and the policy record with a push target.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include "server/common/policy.h"
#include "server/push/address_rules.h"
#include "server/push/signature.h"

namespace delayd::push {
namespace {

std::optional<std::string> Refused(const AddressRules& rules,
                                   const std::string& address,
                                   const std::string& host = "example.com") {
  std::array<std::uint8_t, 16> a{};
  EXPECT_TRUE(ParseAddress(address, &a)) << address;
  return rules.Refuses(a, host);
}

TEST(AddressRules, EveryForbiddenRangeIsRefusedByDefaultNamingItsRule) {
  AddressRules rules;
  ASSERT_TRUE(AddressRules::Parse({}, &rules).ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"127.0.0.1", "loopback"},
      {"127.255.0.9", "loopback"},
      {"10.1.2.3", "RFC 1918"},
      {"172.16.0.1", "RFC 1918"},
      {"172.31.255.255", "RFC 1918"},
      {"192.168.0.1", "RFC 1918"},
      {"100.64.0.1", "RFC 6598"},
      {"169.254.169.254", "link-local"},
      {"0.0.0.0", "unspecified"},
      {"224.0.0.251", "multicast"},
      {"255.255.255.255", "broadcast"},
      {"::1", "loopback"},
      {"::", "unspecified"},
      {"fd00::1", "unique-local"},
      {"fe80::1", "link-local"},
      {"ff02::1", "multicast"},
      {"::ffff:10.0.0.1", "RFC 1918"},
      {"64:ff9b::a00:1", "NAT64"},
      {"[::ffff:127.0.0.1]", "loopback"}};
  for (const auto& [address, rule] : cases) {
    auto why = Refused(rules, address);
    ASSERT_TRUE(why.has_value()) << address;
    EXPECT_NE(why->find(rule), std::string::npos) << address << ": " << *why;
  }
  for (const std::string ok : {"8.8.8.8", "172.32.0.1", "100.128.0.1",
                               "2001:4860:4860::8888", "192.169.0.1"}) {
    EXPECT_FALSE(Refused(rules, ok).has_value()) << ok;
  }
}

TEST(AddressRules, AllowancesByAddressRangeAndHostName) {
  AddressRules rules;
  ASSERT_TRUE(
      AddressRules::Parse(
          {"127.0.0.1", "10.8.0.0/16", "fd00::/8", "Hooks.Internal"}, &rules)
          .ok());
  EXPECT_FALSE(Refused(rules, "127.0.0.1").has_value());
  EXPECT_TRUE(Refused(rules, "127.0.0.2").has_value());
  EXPECT_FALSE(Refused(rules, "10.8.255.1").has_value());
  EXPECT_TRUE(Refused(rules, "10.9.0.1").has_value());
  EXPECT_FALSE(Refused(rules, "fd12::1").has_value());
  EXPECT_TRUE(Refused(rules, "fe80::1").has_value());
  // A host name allowed: whatever it resolves to (the case does not
  // matter).
  EXPECT_FALSE(Refused(rules, "10.200.0.1", "hooks.internal").has_value());
  // Through a socket address as curl hands it over.
  sockaddr_in in{};
  in.sin_family = AF_INET;
  inet_pton(AF_INET, "169.254.169.254", &in.sin_addr);
  EXPECT_TRUE(rules.Refuses(reinterpret_cast<sockaddr*>(&in), "x").has_value());
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, "::ffff:127.0.0.1", &in6.sin6_addr);
  EXPECT_FALSE(
      rules.Refuses(reinterpret_cast<sockaddr*>(&in6), "x").has_value());
}

TEST(AddressRules, WhatIsNoAllowanceIsRefusedAtStart) {
  AddressRules rules;
  for (const std::string bad :
       {"10.0.0.0/33", "::/129", "a b", "1.2.3.4/x", "", "host/8"}) {
    Status s = AddressRules::Parse({bad}, &rules);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
  }
}

TEST(AddressRules, ANameIsCheckedByWhatItResolvesTo) {
  AddressRules rules;
  ASSERT_TRUE(AddressRules::Parse({}, &rules).ok());
  Status s = rules.CheckHost("localhost");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("localhost resolves to"), std::string::npos)
      << s.message();
  ASSERT_TRUE(AddressRules::Parse({"localhost"}, &rules).ok());
  EXPECT_TRUE(rules.CheckHost("localhost").ok());
}

// The example of the Standard Webhooks specification
// (github.com/standard-webhooks/standard-webhooks, spec/standard-webhooks.md);
// npm's standardwebhooks 1.0.0 signs it the same.
TEST(Signature, MatchesTheSpecificationsExample) {
  auto key = SecretKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(Sign({*key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
                 R"({"test": 2432232314})"),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
  // Two keys: two signatures, space-separated, in the secrets' order.
  const std::string two = Sign({*key, *key}, "a", 1, "b");
  EXPECT_EQ(two.find(' '), two.size() / 2);
}

TEST(Signature, SecretsAreWhsecAndBase64OfTwentyFourToSixtyFourBytes) {
  EXPECT_FALSE(SecretKey("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").has_value());
  EXPECT_FALSE(SecretKey("whsec_").has_value());
  EXPECT_FALSE(SecretKey("whsec_c2hvcnQ=").has_value());  // 5 bytes.
  EXPECT_FALSE(SecretKey("whsec_!!!!").has_value());
  EXPECT_EQ(SecretKey("whsec_" + std::string(32, 'A'))->size(), 24u);
  EXPECT_EQ(SecretKey("whsec_" + std::string(86, 'A') + "==")->size(), 64u);
  EXPECT_FALSE(SecretKey("whsec_" + std::string(88, 'A')).has_value());
  const std::string id = SecretId("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  EXPECT_EQ(id.size(), 14u);
  EXPECT_EQ(id.find("MfKQ"), std::string::npos);
}

TEST(PolicyRecord, APushTargetRoundTripsAndAPolicyWithoutOneKeepsTheOldForm) {
  Policy p;
  p.paused = true;
  const std::string fixed = EncodePolicy(p);
  EXPECT_EQ(fixed[0], 1);  // The form builds before push delivery read.
  p.push.url = "https://hooks.example.com/delayd?x=1";
  p.push.method = "PUT";
  p.push.headers = {{"x-a", "1"}, {"x-b", "two"}};
  p.push.content_type = "application/json";
  p.push.timeout = std::chrono::milliseconds(2500);
  p.push.secrets = {"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"};
  p.push.retry_client_errors = true;
  p.push.follow_redirects = true;
  p.push.ca_pem = "-----BEGIN CERTIFICATE-----ca";
  p.push.client_cert_pem = "-----BEGIN CERTIFICATE-----c";
  p.push.client_key_pem = "-----BEGIN PRIVATE KEY-----k";
  p.push.max_in_flight = 7;
  const std::string bytes = EncodePolicy(p);
  EXPECT_EQ(bytes[0], 2);
  EXPECT_EQ(DecodePolicy(bytes), p);
  for (std::size_t cut = fixed.size(); cut < bytes.size(); cut += 7) {
    EXPECT_FALSE(DecodePolicy(bytes.substr(0, cut)).has_value()) << cut;
  }
  EXPECT_FALSE(DecodePolicy(bytes + "x").has_value());
}

}  // namespace
}  // namespace delayd::push
