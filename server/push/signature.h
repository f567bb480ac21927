// Standard Webhooks 1.0 signatures (https://www.standardwebhooks.com/):
// HMAC-SHA256 over "<webhook-id>.<webhook-timestamp>.<body>" with the key
// that a "whsec_<base64>" secret carries, sent as "v1,<base64>", one per
// secret, separated by spaces. OpenSSL computes the MAC and the base64.
#ifndef DELAYD_SERVER_PUSH_SIGNATURE_H_
#define DELAYD_SERVER_PUSH_SIGNATURE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace delayd::push {

// The key of a secret ("whsec_" and the base64 of 24 to 64 bytes), or
// nullopt if it is none.
std::optional<std::string> SecretKey(std::string_view secret);

// The webhook-signature header's value for the message, with each of
// `keys` (raw, from SecretKey).
std::string Sign(const std::vector<std::string>& keys, std::string_view id,
                 std::int64_t timestamp, std::string_view body);

// "whsec_" and the first 8 hex digits of the secret's SHA-256: names it
// without revealing it.
std::string SecretId(std::string_view secret);

}  // namespace delayd::push

#endif  // DELAYD_SERVER_PUSH_SIGNATURE_H_
