#include "server/push/signature.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <cstdio>

namespace delayd::push {
namespace {

constexpr std::string_view kPrefix = "whsec_";

std::string Base64(const unsigned char* data, std::size_t n) {
  std::string out(4 * ((n + 2) / 3), '\0');
  const int len = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                  data, static_cast<int>(n));
  out.resize(len);
  return out;
}

}  // namespace

std::optional<std::string> SecretKey(std::string_view secret) {
  if (!secret.starts_with(kPrefix)) return std::nullopt;
  const std::string_view b64 = secret.substr(kPrefix.size());
  if (b64.empty() || b64.size() % 4 != 0 || b64.size() > 128) {
    return std::nullopt;
  }
  for (char c : b64) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                    (c >= '0' && c <= '9') || c == '+' || c == '/' || c == '=';
    if (!ok) return std::nullopt;
  }
  std::string key(b64.size() / 4 * 3, '\0');
  const int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(key.data()),
                      reinterpret_cast<const unsigned char*>(b64.data()),
                      static_cast<int>(b64.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding's bytes as data.
  std::size_t len = static_cast<std::size_t>(n);
  if (b64.ends_with("==")) {
    len -= 2;
  } else if (b64.ends_with("=")) {
    len -= 1;
  }
  key.resize(len);
  if (key.size() < 24 || key.size() > 64) return std::nullopt;
  return key;
}

std::string Sign(const std::vector<std::string>& keys, std::string_view id,
                 std::int64_t timestamp, std::string_view body) {
  std::string message;
  message.reserve(id.size() + body.size() + 24);
  message.append(id).append(".").append(std::to_string(timestamp)).append(".");
  message.append(body);
  std::string header;
  for (const std::string& key : keys) {
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
         reinterpret_cast<const unsigned char*>(message.data()), message.size(),
         mac, &mac_len);
    if (!header.empty()) header.push_back(' ');
    header.append("v1,").append(Base64(mac, mac_len));
  }
  return header;
}

std::string SecretId(std::string_view secret) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(secret.data()), secret.size(),
         digest);
  char hex[9];
  std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", digest[0], digest[1],
                digest[2], digest[3]);
  return std::string(kPrefix) + hex;
}

}  // namespace delayd::push
