#include "server/store/rocksdb/rocks_mark.h"

#include <charconv>
#include <memory>
#include <string_view>

namespace delayd {
namespace {

// The mark is three lines of text, so that an operator can read it:
//   delayd store mark 1
//   sequence 8940
//   manifest MANIFEST-000012 4567
constexpr std::string_view kHeader = "delayd store mark 1\n";

std::string Path(const std::string& dir) { return dir + "/" + kMarkFile; }

bool ParseNumber(std::string_view text, std::uint64_t* out) {
  const auto [end, ec] =
      std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

// Takes the next line of `text` (without its newline); false if none.
bool NextLine(std::string_view& text, std::string_view* line) {
  const auto nl = text.find('\n');
  if (nl == text.npos) return false;
  *line = text.substr(0, nl);
  text.remove_prefix(nl + 1);
  return true;
}

bool Parse(std::string_view text, StoreMark* mark) {
  if (!text.starts_with(kHeader)) return false;
  text.remove_prefix(kHeader.size());
  std::string_view line;
  if (!NextLine(text, &line) || !line.starts_with("sequence ") ||
      !ParseNumber(line.substr(9), &mark->sequence)) {
    return false;
  }
  if (!NextLine(text, &line) || !line.starts_with("manifest ")) return false;
  line.remove_prefix(9);
  const auto space = line.find(' ');
  if (space == line.npos || !line.starts_with("MANIFEST-")) return false;
  mark->manifest = std::string(line.substr(0, space));
  return ParseNumber(line.substr(space + 1), &mark->manifest_size) &&
         text.empty();
}

}  // namespace

Status ReadMark(rocksdb::Env* env, const std::string& dir, StoreMark* mark,
                bool* found) {
  *found = false;
  const std::string path = Path(dir);
  if (env->FileExists(path).IsNotFound()) return Status::Ok();
  std::string text;
  if (rocksdb::Status s = rocksdb::ReadFileToString(env, path, &text);
      !s.ok()) {
    return Status::Internal("cannot read " + path + ": " + s.ToString());
  }
  if (!Parse(text, mark)) {
    return Status::Internal(
        path +
        " is damaged (it records how much the store had made "
        "durable, and cannot be read)");
  }
  *found = true;
  return Status::Ok();
}

Status WriteMark(rocksdb::Env* env, const std::string& dir,
                 const StoreMark& mark) {
  const std::string path = Path(dir);
  const std::string text = std::string(kHeader) + "sequence " +
                           std::to_string(mark.sequence) + "\nmanifest " +
                           mark.manifest + " " +
                           std::to_string(mark.manifest_size) + "\n";
  const std::string temp = path + ".new";
  rocksdb::Status s =
      rocksdb::WriteStringToFile(env, text, temp, /*should_sync=*/true);
  if (s.ok()) s = env->RenameFile(temp, path);
  std::unique_ptr<rocksdb::Directory> directory;
  if (s.ok()) s = env->NewDirectory(dir, &directory);
  if (s.ok()) s = directory->Fsync();
  if (!s.ok()) {
    return Status::Internal("cannot write " + path + ": " + s.ToString());
  }
  return Status::Ok();
}

std::string ManifestShortfall(rocksdb::Env* env, const std::string& dir,
                              const StoreMark& mark) {
  std::string current;
  if (!rocksdb::ReadFileToString(env, dir + "/CURRENT", &current).ok()) {
    return "";  // RocksDB itself refuses a store without one.
  }
  while (!current.empty() && current.back() == '\n') current.pop_back();
  // Another MANIFEST: a newer one, or damage RocksDB detects itself.
  if (current != mark.manifest) return "";
  std::uint64_t size = 0;
  if (!env->GetFileSize(dir + "/" + current, &size).ok()) return "";
  if (size >= mark.manifest_size) return "";
  return current + " is " + std::to_string(size) + " bytes long, but had " +
         std::to_string(mark.manifest_size) + " synced bytes when " +
         kMarkFile +
         " was written: it was cut short, and the table files it recorded "
         "since are lost to RocksDB";
}

std::string SequenceShortfall(const std::string& dir, const StoreMark& mark,
                              std::uint64_t recovered) {
  if (recovered >= mark.sequence) return "";
  return "it recovers its writes up to number " + std::to_string(recovered) +
         ", but writes up to number " + std::to_string(mark.sequence) +
         " had been made durable (" + dir + "/" + kMarkFile +
         "): " + std::to_string(mark.sequence - recovered) +
         " durable writes are missing (a log or MANIFEST cut short, or lost "
         "files)";
}

}  // namespace delayd
