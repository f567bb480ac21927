// The store's mark: a small file beside RocksDB's own (`DELAYD-MARK` in the
// data directory) recording how much the store had made durable, so that a
// store which comes back holding less is refused instead of served as if
// whole. RocksDB cannot tell on its own: a MANIFEST cut short at a record
// boundary, or a log cut short, reads as an older but valid store.
//
// It records two facts, each true whenever the mark is written:
//   - every write up to RocksDB sequence number `sequence` was durable (it
//     was synced, or flushed into a table file);
//   - the MANIFEST then in use was at least `manifest_size` bytes long, all
//     of them synced (RocksDB only appends to a MANIFEST, and starts a new
//     one at each open).
// RocksDB never rewrites this file, and the mark is replaced whole (written,
// synced, renamed over the old one, directory synced), so a crash leaves the
// old mark or the new one. Neither fact can be broken by a crash or a power
// loss; only damage breaks them.
#ifndef DELAYD_SERVER_STORE_ROCKSDB_ROCKS_MARK_H_
#define DELAYD_SERVER_STORE_ROCKSDB_ROCKS_MARK_H_

#include <rocksdb/env.h>

#include <cstdint>
#include <string>

#include "server/common/status.h"

namespace delayd {

inline constexpr char kMarkFile[] = "DELAYD-MARK";

struct StoreMark {
  std::uint64_t sequence = 0;
  std::string manifest;  // File name, such as "MANIFEST-000012".
  std::uint64_t manifest_size = 0;
  bool operator==(const StoreMark&) const = default;
};

// Reads `dir`'s mark. `*found` is false (and OK returned) if there is none:
// a new store, or one restored from a backup. A mark that does not parse is
// an error naming the file.
Status ReadMark(rocksdb::Env* env, const std::string& dir, StoreMark* mark,
                bool* found);

// Replaces `dir`'s mark with `mark`, durably (see above).
Status WriteMark(rocksdb::Env* env, const std::string& dir,
                 const StoreMark& mark);

// Before RocksDB opens `dir`: if the MANIFEST its CURRENT file names is the
// one `mark` recorded and is now shorter, says so (naming both lengths);
// else returns an empty string.
std::string ManifestShortfall(rocksdb::Env* env, const std::string& dir,
                              const StoreMark& mark);

// After RocksDB opened the store and recovered up to sequence `recovered`:
// if that is below the mark's, says how many durable writes are missing;
// else returns an empty string.
std::string SequenceShortfall(const std::string& dir, const StoreMark& mark,
                              std::uint64_t recovered);

}  // namespace delayd

#endif  // DELAYD_SERVER_STORE_ROCKSDB_ROCKS_MARK_H_
