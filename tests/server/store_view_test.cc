// Store::View: what the store held at one instant, read later, at a cost
// that does not grow with what is written while the view lives.
#include <gtest/gtest.h>
#include <malloc.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "server/store/rocksdb/rocks_store.h"
#include "tests/common/temp_dir.h"

namespace delayd::testing {
namespace {

class StoreView : public ::testing::Test {
 protected:
  void SetUp() override { Open(RocksOptions{}); }
  void Open(RocksOptions o) {
    store_.reset();
    o.dir = dir_ / "data";
    o.fsync = FsyncPolicy::kNever;
    ASSERT_TRUE(RocksStore::Open(o, StoreHooks(), &store_).ok());
  }

  // Commits `fill` to a batch and waits until it is written.
  template <typename Fill>
  void Write(Fill fill) {
    Batch batch;
    fill(batch);
    std::promise<Status> written;
    store_->Commit(batch, [&](Status s) { written.set_value(std::move(s)); });
    ASSERT_TRUE(written.get_future().get().ok());
  }

  struct Got {
    Status status;
    std::vector<std::string> payloads;
    std::vector<bool> readable, gone;
  };
  Got Read(const std::vector<std::uint64_t>& ids,
           const std::shared_ptr<const Store::View>& view) {
    Got got;
    got.status = store_->GetPayloads(ids, *view, &got.payloads, &got.readable,
                                     &got.gone);
    return got;
  }

  TempDir dir_;
  std::unique_ptr<RocksStore> store_;
};

// A payload stored under `id` (with a timer of its own), and its deletion.
void Put(Batch& b, std::uint64_t id, std::string_view payload) {
  b.AddTimer(StoredTimer{0, "k", 0, id, id}, payload);
}
void Delete(Batch& b, std::uint64_t id) { b.RemoveTimer(id); }

TEST_F(StoreView, TellsAPayloadDeletedSinceFromAMissingOne) {
  Write([](Batch& b) { Put(b, 1, "one"); });
  const auto view = store_->NewView();
  Write([](Batch& b) {
    Delete(b, 1);
    Put(b, 2, "two");
  });

  // Deleted since (its timer gone meanwhile): gone, not damage.
  Got got = Read({1}, view);
  EXPECT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_FALSE(got.readable[0]);
  EXPECT_TRUE(got.gone[0]);
  // Written since: read.
  got = Read({2}, view);
  ASSERT_TRUE(got.readable[0]);
  EXPECT_EQ(got.payloads[0], "two");
  // Never there: damage.
  got = Read({3}, view);
  EXPECT_FALSE(got.readable[0]);
  EXPECT_FALSE(got.gone[0]);
  EXPECT_FALSE(got.status.ok());
  // A view taken after the delete does not take it for one since.
  const auto later = store_->NewView();
  got = Read({1}, later);
  EXPECT_FALSE(got.gone[0]);
  EXPECT_FALSE(got.status.ok());
}

// The deletes since a view are looked through a slice at a time (the
// store's lock let go between slices): ids deleted in the first slice, in
// the middle and in the last are all told from one never stored.
TEST_F(StoreView, TellsDeletesApartAcrossALongLog) {
  constexpr std::uint64_t kDeletes = 10'000;  // Two slices and a part.
  Write([](Batch& b) {
    for (std::uint64_t id = 1; id <= kDeletes; ++id) Put(b, id, "p");
  });
  const auto view = store_->NewView();
  for (std::uint64_t id = 1; id <= kDeletes; id += 500) {
    Write([id](Batch& b) {
      for (std::uint64_t d = id; d < id + 500; ++d) Delete(b, d);
    });
  }
  Got got = Read({1, 5'000, kDeletes, kDeletes + 1}, view);
  EXPECT_TRUE(got.gone[0]);
  EXPECT_TRUE(got.gone[1]);
  EXPECT_TRUE(got.gone[2]);
  EXPECT_FALSE(got.gone[3]);
  EXPECT_FALSE(got.status.ok()) << "a payload never stored read as gone";
}

// Deletes are kept for views up to a bound: a view older than that takes a
// missing payload as deleted (it can no longer tell).
TEST_F(StoreView, ViewsOlderThanTheKeptDeletesTakeMissingAsDeleted) {
  RocksOptions o;
  o.max_deletes_kept = 4;
  Open(o);
  Write([](Batch& b) {
    for (std::uint64_t id = 1; id <= 6; ++id) Put(b, id, "p");
  });
  const auto old = store_->NewView();
  for (std::uint64_t id = 1; id <= 3; ++id) {
    Write([id](Batch& b) { Delete(b, id); });
  }
  const auto recent = store_->NewView();
  for (std::uint64_t id = 4; id <= 6; ++id) {
    Write([id](Batch& b) { Delete(b, id); });
  }
  // Six deletes since `old`, four kept: it cannot tell, and takes even one
  // never stored as deleted.
  Got got = Read({1, 99}, old);
  EXPECT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_TRUE(got.gone[0]);
  EXPECT_TRUE(got.gone[1]);
  // Three since `recent`, all kept: it tells them apart.
  got = Read({5, 99}, recent);
  EXPECT_TRUE(got.gone[0]);
  EXPECT_FALSE(got.gone[1]);
  EXPECT_FALSE(got.status.ok());
}

// Malloc's in-use bytes (glibc's own allocator; the sanitizers bring theirs).
std::size_t InUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// A view keeps the ids of payloads deleted while it lives, not the batches
// written (before, it kept those: a view held by a read that hung kept every
// later write in memory).
TEST_F(StoreView, KeepsNoCopyOfWhatIsWrittenWhileItLives) {
#ifdef DELAYD_SANITIZED
  GTEST_SKIP() << "measures glibc malloc's in-use bytes";
#endif
  constexpr std::size_t kMiB = 1 << 20;
  constexpr int kBatches = 64;
  const std::string payload(kMiB, 'p');
  std::uint64_t next = 1;
  // Each payload replaced by the next: the store's live data stays small.
  const auto write_all = [&] {
    for (int i = 0; i < kBatches; ++i) {
      Write([&](Batch& b) {
        if (next > 1) Delete(b, next - 1);
        Put(b, next, payload);
      });
      ++next;
    }
  };
  write_all();  // RocksDB's memtables and caches reach their size.
  const std::size_t before = InUse();
  const auto view = store_->NewView();
  write_all();
  // 64 MiB written while the view lived; its memtables (16 MiB at most)
  // and block cache (8 MiB) bound what the store holds once its flushes and
  // compactions are done. On a loaded machine they may still run (their
  // buffers in use) when the writes end: so the growth is read until it is
  // under the bound, for up to 20 s. A view that kept the batches would
  // hold all 64 MiB for as long as it lives.
  const auto growth = [&] {
    const std::size_t now = InUse();
    return now > before ? now - before : 0;
  };
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::size_t grown = growth();
  while (grown >= 32 * kMiB && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // (polls)
    grown = growth();
  }
  EXPECT_LT(grown, 32 * kMiB) << grown / kMiB << " MiB";
  // And the view still tells the payload of its instant, deleted since, from
  // damage, and reads the newest.
  const Got got = Read({std::uint64_t{kBatches}, next - 1}, view);
  EXPECT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_TRUE(got.gone[0]);
  ASSERT_TRUE(got.readable[1]);
  EXPECT_EQ(got.payloads[1].size(), kMiB);
}

TEST_F(StoreView, OutlivesTheStoresClose) {
  Write([](Batch& b) { Put(b, 1, "one"); });
  auto view = store_->NewView();
  store_->Close();
  const Got got = Read({1}, view);
  EXPECT_EQ(got.status.code(), Code::kUnavailable);
  EXPECT_FALSE(got.readable[0]);
  view.reset();  // (After Close: nothing is left to release.)
  const auto after = store_->NewView();
  EXPECT_FALSE(Read({1}, after).readable[0]);
}

}  // namespace
}  // namespace delayd::testing
