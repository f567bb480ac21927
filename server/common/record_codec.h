// How the store's records lay out numbers: keys big-endian (so that they
// sort by value), values in host order (checked little-endian, so a store
// moves between the machines delayd runs on). Shared by the store's files
// and the policy record.
#ifndef DELAYD_SERVER_COMMON_RECORD_CODEC_H_
#define DELAYD_SERVER_COMMON_RECORD_CODEC_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

namespace delayd::record {

static_assert(std::endian::native == std::endian::little,
              "values are stored in host order, which must be little-endian");

inline void AppendBE(std::string& out, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) {
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
}
inline std::uint64_t ReadBE(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v = (v << 8) | static_cast<unsigned char>(p[i]);
  }
  return v;
}
template <typename T>
void AppendRaw(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
T ReadRaw(const char*& p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  p += sizeof v;
  return v;
}

}  // namespace delayd::record

#endif  // DELAYD_SERVER_COMMON_RECORD_CODEC_H_
