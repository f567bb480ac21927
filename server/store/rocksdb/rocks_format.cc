#include "server/store/rocksdb/rocks_format.h"

#include <rocksdb/db.h>

#include <algorithm>
#include <charconv>
#include <filesystem>

#include "delayd/text/build_info.h"

namespace delayd {
namespace {
constexpr std::string_view kPrefix = "delayd-format-";
}  // namespace

std::string FormatFamily(std::uint32_t format) {
  return std::string(kPrefix) + std::to_string(format);
}

Status FindFormat(const rocksdb::DBOptions& db, const std::string& dir,
                  FoundFormat* out) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "CURRENT", ec)) {
    return Status::Ok();  // A new store.
  }
  out->exists = true;
  std::vector<std::string> names;
  // A MANIFEST that cannot be read is left to the open that follows, which
  // refuses it (or salvages) in the words it uses for any damage.
  if (!rocksdb::DB::ListColumnFamilies(db, dir, &names).ok()) {
    return Status::Ok();
  }
  for (const std::string& name : names) {
    if (!name.starts_with(kPrefix)) continue;
    std::uint32_t n = 0;
    const char* begin = name.data() + kPrefix.size();
    const char* end = name.data() + name.size();
    const auto [at, err] = std::from_chars(begin, end, n);
    if (err != std::errc() || at != end || n < 2) {
      return Status::Internal("the store in " + dir +
                              " has a column family this delayd does not "
                              "know: " +
                              name);
    }
    out->format = std::max(out->format, n);
    out->format_families.push_back(name);
  }
  return Status::Ok();
}

Status NewerFormat(const std::string& dir, std::uint32_t format) {
  return Status::FailedPrecondition(
      "the store in " + dir + " has format " + std::to_string(format) +
      ", written by a newer delayd; this delayd (" +
      std::string(BuildVersion()) + ") reads formats up to " +
      std::to_string(kStoreFormat) +
      ". Run a delayd that reads it (the release that wrote it, or later), "
      "or restore a backup this release made; the store is left untouched");
}

}  // namespace delayd
