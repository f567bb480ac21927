// With a store, a timer's or event's in-memory Blob holds its key and, as
// its payload, the 8-byte id under which the store keeps the real payload
// (read back when it is needed: store.h).
#ifndef DELAYD_SERVER_CORE_PAYLOAD_REF_H_
#define DELAYD_SERVER_CORE_PAYLOAD_REF_H_

#include <cstdint>
#include <cstring>
#include <string_view>

#include "server/common/types.h"

namespace delayd {

inline Blob KeyBlob(std::string_view key, std::uint64_t payload_id) {
  return Blob(key, std::string_view(reinterpret_cast<const char*>(&payload_id),
                                    sizeof payload_id));
}

inline std::uint64_t PayloadIdOf(const Blob& blob) {
  std::uint64_t id = 0;
  if (blob.payload().size() == sizeof id) {
    std::memcpy(&id, blob.payload().data(), sizeof id);
  }
  return id;
}

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_PAYLOAD_REF_H_
