// The RocksDB store's format version: which record layouts a store holds,
// so that a binary opens a store of its own format, upgrades an older one
// in place, and refuses a newer one instead of reading it wrongly.
//
// Format 1: every store written before formats were recorded (delayd 0.1).
// Format 2: the same records; the format is recorded (a meta record, and a
// column family named for it, below); keys' fates in a dedup window (meta
// records 'd', delayd 0.2).
//
// A store of format N has an empty column family "delayd-format-N".
// RocksDB refuses to open a store for writing unless every column family
// it has is named, so a binary that knows nothing of formats (0.1) refuses
// a store of format 2 ("Column families not opened: delayd-format-2")
// instead of misreading it; a binary that knows formats lists the families
// first and names both formats when it refuses.
#ifndef DELAYD_SERVER_STORE_ROCKSDB_ROCKS_FORMAT_H_
#define DELAYD_SERVER_STORE_ROCKSDB_ROCKS_FORMAT_H_

#include <rocksdb/env.h>
#include <rocksdb/options.h>

#include <cstdint>
#include <string>
#include <vector>

#include "server/common/status.h"

namespace delayd {

inline constexpr std::uint32_t kStoreFormat = 2;

// "delayd-format-N".
std::string FormatFamily(std::uint32_t format);

// What a data directory's column families say of its format.
struct FoundFormat {
  bool exists = false;       // A RocksDB store is there.
  std::uint32_t format = 0;  // The highest format family; 0: none (format 1).
  std::vector<std::string> format_families;  // Every "delayd-format-N".
};
// Fails only on a family of this prefix that names no format; a store
// whose families cannot be listed is taken for format 1 (the open that
// follows refuses it as damaged).
Status FindFormat(const rocksdb::DBOptions& db, const std::string& dir,
                  FoundFormat* out);

// The refusal of a store of a format above kStoreFormat.
Status NewerFormat(const std::string& dir, std::uint32_t format);

}  // namespace delayd

#endif  // DELAYD_SERVER_STORE_ROCKSDB_ROCKS_FORMAT_H_
