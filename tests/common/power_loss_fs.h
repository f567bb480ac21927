// A RocksDB file system for tests that simulates a power loss: it remembers
// how much of each file written through it was synced, and Crash() cuts every
// such file back to that length, as a machine that lost power would find its
// disk. After Crash() nothing more reaches the disk (the machine is off)
// until Revive(). FailWrites() makes every write and sync fail with a given
// error (a full disk, an I/O error) until it is called with nullopt.
//
// What it does not model: directory entries (a created, renamed or deleted
// file is taken as durable at once) and torn writes inside a synced range.
#ifndef DELAYD_TESTS_COMMON_POWER_LOSS_FS_H_
#define DELAYD_TESTS_COMMON_POWER_LOSS_FS_H_

#include <rocksdb/env.h>
#include <rocksdb/file_system.h>

#include <algorithm>
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

  // Cuts every file written through this file system back to what was
  // synced, and drops every later write. Returns how many bytes were lost.
  std::uint64_t Crash() {
    std::lock_guard lock(mu_);
    dead_ = true;
    std::uint64_t lost = 0;
    for (const auto& [name, f] : files_) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(name, ec);
      if (ec || size <= f.synced) continue;
      lost += size - f.synced;
      std::filesystem::resize_file(name, f.synced, ec);
    }
    return lost;
  }
  // Power is back: what is on disk now is all there is.
  void Revive() {
    std::lock_guard lock(mu_);
    dead_ = false;
    files_.clear();
  }
  void FailWrites(std::optional<rocksdb::IOStatus> error) {
    std::lock_guard lock(mu_);
    fail_ = std::move(error);
  }

  // Syncs that reached this file system (each one a WAL or file sync).
  std::uint64_t syncs() const {
    std::lock_guard lock(mu_);
    return syncs_;
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
          name_(std::move(name)) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             rocksdb::IODebugContext* dbg) override {
      if (fs_->Dead()) return rocksdb::IOStatus::OK();  // Lost.
      if (auto e = fs_->Failure()) return *e;
      return target()->Append(data, options, dbg);
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data,
                             const rocksdb::IOOptions& options,
                             const rocksdb::DataVerificationInfo& info,
                             rocksdb::IODebugContext* dbg) override {
      if (fs_->Dead()) return rocksdb::IOStatus::OK();
      if (auto e = fs_->Failure()) return *e;
      return target()->Append(data, options, info, dbg);
    }
    rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                       uint64_t offset,
                                       const rocksdb::IOOptions& options,
                                       rocksdb::IODebugContext* dbg) override {
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
      if (auto e = fs_->Failure()) return *e;
      const std::uint64_t size = Size();
      return Synced(target()->Sync(options, dbg), size);
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* dbg) override {
      if (auto e = fs_->Failure()) return *e;
      const std::uint64_t size = Size();
      return Synced(target()->Fsync(options, dbg), size);
    }
    rocksdb::IOStatus Close(const rocksdb::IOOptions& options,
                            rocksdb::IODebugContext* dbg) override {
      return target()->Close(options, dbg);  // Closing syncs nothing.
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
      auto it = fs_->files_.find(name_);
      if (it != fs_->files_.end()) {
        it->second.synced = std::max(it->second.synced, size);
      }
      return s;
    }
    PowerLossFs* const fs_;
    const std::string name_;
  };

  bool Dead() const {
    std::lock_guard lock(mu_);
    return dead_;
  }
  std::optional<rocksdb::IOStatus> Failure() const {
    std::lock_guard lock(mu_);
    return fail_;
  }

  mutable std::mutex mu_;
  bool dead_ = false;
  std::optional<rocksdb::IOStatus> fail_;
  std::uint64_t syncs_ = 0;
  std::map<std::string, FileState> files_;  // Written through here.
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_POWER_LOSS_FS_H_
