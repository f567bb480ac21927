// grpc_floor_store.h: a timer's writes to RocksDB, on the polling thread or
// on a writer thread.
#include "tests/bench/grpc_floor_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace delayd::bench::floor {
namespace {

std::string IdKey(std::uint64_t id) {
  std::string key(8, '\0');
  for (int i = 7; i >= 0; --i, id >>= 8) key[i] = static_cast<char>(id);
  return key;
}

void Check(const rocksdb::Status& s) {
  if (s.ok()) return;
  std::fprintf(stderr, "rocksdb: %s\n", s.ToString().c_str());
  std::_Exit(1);
}

// The database and the ids of the timers and events it holds: the set's id
// counts up; a firing takes the oldest timer (all are due kAhead after
// their set, so in order); an ack the oldest event (the bench's worker
// acknowledges each event as it reads it, in order).
class RocksTimers : public TimerStore {
 public:
  RocksTimers(const std::string& dir, bool writer_thread) {
    std::filesystem::remove_all(dir);
    rocksdb::Options options;
    // As delayd's store opens it (rocks_open.cc), in one column family.
    options.create_if_missing = true;
    options.db_write_buffer_size = 16 << 20;
    options.write_buffer_size = 4 << 20;
    options.max_write_buffer_number = 3;
    options.max_background_jobs = 2;
    options.allow_concurrent_memtable_write = false;
    options.compression = rocksdb::kNoCompression;
    rocksdb::DB* db = nullptr;
    Check(rocksdb::DB::Open(options, dir, &db));
    db_.reset(db);
    if (writer_thread) thread_ = std::thread([this] { WriteLoop(); });
  }
  // (Never destroyed: the shape's process ends when it is killed.)

  bool Set(AsyncCall* c) override {
    const std::uint64_t id = next_id_++;
    timers_.push_back(id);
    return Write(c, [&](rocksdb::WriteBatch& b) {
      b.Put(IdKey(id), payload_);
      b.Put(IdKey(id | kTimer), record_);
    });
  }
  void Fire() override {
    const std::uint64_t id = timers_.front();
    timers_.pop_front();
    events_.push_back(id);
    Write(nullptr, [&](rocksdb::WriteBatch& b) {
      b.Delete(IdKey(id | kTimer));
      b.Put(IdKey(id | kEvent), record_);
    });
  }
  bool Ack(AsyncCall* c) override {
    if (events_.empty()) return false;  // (A warm-up's stray ack.)
    const std::uint64_t id = events_.front();
    events_.pop_front();
    return Write(c, [&](rocksdb::WriteBatch& b) {
      b.Delete(IdKey(id | kEvent));
      b.Delete(IdKey(id));
    });
  }

 private:
  static constexpr std::uint64_t kTimer = 1ull << 62, kEvent = 1ull << 63;

  // Writes a batch that `fill` makes here, or adds it to the writer's next
  // group with the call `c` it answers (none: nullptr).
  template <typename Fill>
  bool Write(AsyncCall* c, Fill fill) {
    if (!thread_.joinable()) {
      rocksdb::WriteBatch b;
      fill(b);
      Check(db_->Write(rocksdb::WriteOptions(), &b));
      return false;
    }
    {
      std::lock_guard lock(mu_);
      fill(pending_);
      if (c != nullptr) answers_.push_back(c);
    }
    cv_.notify_one();
    return c != nullptr;
  }

  [[noreturn]] void WriteLoop() {
    rocksdb::WriteBatch group;
    std::vector<AsyncCall*> answers;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return pending_.Count() > 0; });
        std::swap(group, pending_);
        answers.swap(answers_);
      }
      Check(db_->Write(rocksdb::WriteOptions(), &group));
      for (AsyncCall* c : answers) AnswerServing(c);
      group.Clear();
      answers.clear();
    }
  }

  std::unique_ptr<rocksdb::DB> db_;
  const std::string payload_ = std::string(64, 'p'),
                    record_ = std::string(24, 'r');
  std::uint64_t next_id_ = 1;
  std::deque<std::uint64_t> timers_, events_;  // The polling thread's.
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  rocksdb::WriteBatch pending_;      // Under mu_.
  std::vector<AsyncCall*> answers_;  // Under mu_.
};

}  // namespace

std::unique_ptr<TimerStore> MakeRocksTimerStore(const std::string& dir,
                                                bool writer_thread) {
  return std::make_unique<RocksTimers>(dir, writer_thread);
}

}  // namespace delayd::bench::floor
