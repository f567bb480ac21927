// A RocksDB file system for tests that simulates a power loss: it remembers
// how much of each file written through it was synced, and Crash() cuts every
// such file back to that length, as a machine that lost power would find its
// disk (or, tearing, keeps half of what was not synced: the disk had written
// part of it back, and the last record is cut in the middle). After Crash()
// nothing more reaches the disk (the machine is off) until Revive().
// FailWrites() makes every write and sync fail with a given error (a full disk,
// an I/O error) until it is called with nullopt.
//
// HoldSyncs() stalls every sync until released (a disk that stops
// answering); HoldLogWrites() stalls every append to a write-ahead log file
// (a write stall: the log takes nothing more).
//
// What it does not model: directory entries (a created, renamed or deleted
// file is taken as durable at once) and damage inside a synced range.
#ifndef DELAYD_TESTS_COMMON_POWER_LOSS_FS_H_
#define DELAYD_TESTS_COMMON_POWER_LOSS_FS_H_

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace delayd::testing {

class PowerLossFs : public rocksdb::FileSystemWrapper {
 public:
  PowerLossFs() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "PowerLossFs"; }

  // An Env over this file system, for StoreOptions::env.
  static std::shared_ptr<PowerLossFs> Make(std::unique_ptr<rocksdb::Env>* env) {
    auto fs = std::make_shared<PowerLossFs>();
    *env = rocksdb::NewCompositeEnv(fs);
    return fs;
  }

  struct Loss {
    std::uint64_t bytes = 0;  // Written but not synced, and lost.
    int torn = 0;             // Files left with part of their unsynced tail.
  };
  // Cuts every file written through this file system back to what was
  // synced (with `tear`, to half way between that and its length), and drops
  // every later write.
  Loss Crash(bool tear = false) {
    std::lock_guard lock(mu_);
    dead_ = true;
    Loss loss;
    for (const auto& [name, f] : files_) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(name, ec);
      if (ec || size <= f.synced) continue;
      const auto keep = tear ? f.synced + (size - f.synced) / 2 : f.synced;
      loss.bytes += size - keep;
      loss.torn += keep > f.synced ? 1 : 0;
      std::filesystem::resize_file(name, keep, ec);
      crashed_[name] = keep;
    }
    return loss;
  }
  // Power is back: what is on disk now is all there is.
  void Revive() {
    std::lock_guard lock(mu_);
    dead_ = false;
    files_.clear();
    crashed_.clear();
  }
  void FailWrites(std::optional<rocksdb::IOStatus> error) {
    std::lock_guard lock(mu_);
    fail_ = std::move(error);
  }

  // While held, every sync waits (counted by held_syncs(), and those of
  // write-ahead logs by held_log_syncs() too) until released.
  void HoldSyncs(bool hold) {
    std::lock_guard lock(mu_);
    hold_ = hold;
    hold_cv_.notify_all();
  }
  int held_syncs() const {
    std::lock_guard lock(mu_);
    return held_;
  }
  int held_log_syncs() const {
    std::lock_guard lock(mu_);
    return held_log_;
  }
  void HoldLogWrites(bool hold) {
    std::lock_guard lock(mu_);
    hold_writes_ = hold;
    hold_cv_.notify_all();
  }
  int held_log_writes() const {
    std::lock_guard lock(mu_);
    return held_writes_;
  }

  // Syncs that reached this file system (each one a WAL or file sync).
  std::uint64_t syncs() const {
    std::lock_guard lock(mu_);
    return syncs_;
  }
  // Syncs of write-ahead log files.
  std::uint64_t log_syncs() const {
    std::lock_guard lock(mu_);
    return log_syncs_;
  }

  rocksdb::IOStatus NewWritableFile(
      const std::string& fname, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override {
    if (Dead()) return rocksdb::IOStatus::IOError("power is off");
    if (auto e = Failure()) return *e;
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s = target()->NewWritableFile(fname, options, &file, dbg);
    if (!s.ok()) return s;
    {
      std::lock_guard lock(mu_);
      files_[fname] = FileState{};  // Created (or truncated) empty.
    }
    *result = std::make_unique<File>(std::move(file), this, fname);
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(
      const std::string& fname, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override {
    if (Dead()) return rocksdb::IOStatus::IOError("power is off");
    std::unique_ptr<rocksdb::FSWritableFile> file;
    rocksdb::IOStatus s =
        target()->ReopenWritableFile(fname, options, &file, dbg);
    if (!s.ok()) return s;
    {
      std::lock_guard lock(mu_);
      if (!files_.count(fname)) {
        std::error_code ec;
        const auto size = std::filesystem::file_size(fname, ec);
        files_[fname] = FileState{ec ? 0 : size};  // On disk: durable.
      }
    }
    *result = std::make_unique<File>(std::move(file), this, fname);
    return s;
  }
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& dst,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override {
    if (Dead()) return rocksdb::IOStatus::IOError("power is off");
    rocksdb::IOStatus s = target()->RenameFile(src, dst, options, dbg);
    if (s.ok()) {
      std::lock_guard lock(mu_);
      auto it = files_.find(src);
      if (it != files_.end()) {
        files_[dst] = it->second;
        files_.erase(it);
      } else {
        files_.erase(dst);
      }
    }
    return s;
  }
  rocksdb::IOStatus DeleteFile(const std::string& fname,
                               const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override {
    if (Dead()) return rocksdb::IOStatus::IOError("power is off");
    rocksdb::IOStatus s = target()->DeleteFile(fname, options, dbg);
    if (s.ok()) {
      std::lock_guard lock(mu_);
      files_.erase(fname);
    }
    return s;
  }

 private:
  struct FileState {
    std::uint64_t synced = 0;
  };

  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(std::unique_ptr<rocksdb::FSWritableFile> file, PowerLossFs* fs,
         std::string name)
        : FSWritableFileOwnerWrapper(std::move(file)),
          fs_(fs),
          name_(std::move(name)),
          log_(name_.ends_with(".log")) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      if (log_) fs_->WaitWhileWritesHeld();
      if (fs_->Dead()) return rocksdb::IOStatus::OK();  // Lost.
      if (auto e = fs_->Failure()) return *e;
      return target()->Append(data, options, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (log_) fs_->WaitWhileWritesHeld();
      if (fs_->Dead()) return rocksdb::IOStatus::OK();
      if (auto e = fs_->Failure()) return *e;
      return target()->Append(data, options, info, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                       uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* dbg) override {
      if (log_) fs_->WaitWhileWritesHeld();
      if (fs_->Dead()) return rocksdb::IOStatus::OK();
      if (auto e = fs_->Failure()) return *e;
      return target()->PositionedAppend(data, offset, options, dbg);
    }
    rocksdb::IOStatus Truncate(uint64_t size, const rocksdb::IOOptions& options,
                               rocksdb::IODebugContext* dbg) override {
      if (fs_->Dead()) return rocksdb::IOStatus::OK();
      return target()->Truncate(size, options, dbg);
    }
    // Buffered data goes to the OS on Flush(): not durable yet.
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& options,
                           rocksdb::IODebugContext* dbg) override {
      fs_->WaitWhileHeld(log_);
      if (auto e = fs_->Failure()) return *e;
      const std::uint64_t size = Size();
      return Synced(target()->Sync(options, dbg), size);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* dbg) override {
      fs_->WaitWhileHeld(log_);
      if (auto e = fs_->Failure()) return *e;
      const std::uint64_t size = Size();
      return Synced(target()->Fsync(options, dbg), size);
    }
    rocksdb::IOStatus Close(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* dbg) override {
      auto s = target()->Close(options, dbg);  // Closing syncs nothing.
      fs_->Uncrash(name_);
      return s;
    }
    ~File() override {
      target()->Close(rocksdb::IOOptions(), nullptr);
      fs_->Uncrash(name_);
    }

   private:
    // The size before a sync starts: what it surely covers (appends may
    // run while it does).
    std::uint64_t Size() const {
      std::error_code ec;
      const auto size = std::filesystem::file_size(name_, ec);
      return ec ? 0 : size;
    }
    rocksdb::IOStatus Synced(rocksdb::IOStatus s, std::uint64_t size) {
      if (!s.ok()) return s;
      std::lock_guard lock(fs_->mu_);
      if (fs_->dead_) return s;
      ++fs_->syncs_;
      if (log_) ++fs_->log_syncs_;
      auto it = fs_->files_.find(name_);
      if (it != fs_->files_.end()) {
        it->second.synced = std::max(it->second.synced, size);
      }
      return s;
    }
    PowerLossFs* const fs_;
    const std::string name_;
    const bool log_;  // A write-ahead log file.
  };

  bool Dead() const {
    std::lock_guard lock(mu_);
    return dead_;
  }
  void WaitWhileHeld(bool log) {
    std::unique_lock lock(mu_);
    ++held_;
    if (log) ++held_log_;
    hold_cv_.wait(lock, [&] { return !hold_; });
    --held_;
    if (log) --held_log_;
  }
  void WaitWhileWritesHeld() {
    std::unique_lock lock(mu_);
    ++held_writes_;
    hold_cv_.wait(lock, [&] { return !hold_writes_; });
    --held_writes_;
  }
  // A file closed after the crash: closing sets its length to what was
  // written through it (dropping preallocated space), which would undo the
  // crash's cut with zeros; the cut is put back.
  void Uncrash(const std::string& name) {
    std::lock_guard lock(mu_);
    auto it = crashed_.find(name);
    if (!dead_ || it == crashed_.end()) return;
    std::error_code ec;
    std::filesystem::resize_file(name, it->second, ec);
  }
  std::optional<rocksdb::IOStatus> Failure() const {
    std::lock_guard lock(mu_);
    return fail_;
  }

  mutable std::mutex mu_;
  std::condition_variable hold_cv_;
  bool hold_ = false;
  int held_ = 0;
  int held_log_ = 0;
  bool hold_writes_ = false;
  int held_writes_ = 0;
  bool dead_ = false;
  std::optional<rocksdb::IOStatus> fail_;
  std::uint64_t syncs_ = 0;
  std::uint64_t log_syncs_ = 0;
  std::map<std::string, FileState> files_;        // Written through here.
  std::map<std::string, std::uint64_t> crashed_;  // Lengths Crash() left.
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_POWER_LOSS_FS_H_
