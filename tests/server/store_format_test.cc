// The RocksDB store's format (rocks_format.h): recorded by a new store,
// upgraded in place from a store that has none, refused when newer, and
// refused by a binary that knows nothing of formats.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <filesystem>
#include <map>
#include <tuple>

#include "delayd/text/build_info.h"
#include "server/common/record_codec.h"
#include "server/store/rocksdb/rocks_format.h"
#include "server/store/rocksdb/rocks_store.h"
#include "tests/common/temp_dir.h"

namespace delayd::testing {
namespace {

// ("default" is rocksdb::kDefaultColumnFamilyName, a global of another
// unit that may not be initialized before this one.)
const std::vector<std::string> kBaseFamilies = {"default", "timers", "payloads",
                                                "events"};

// Opens `dir` with RocksDB alone, as a binary that knows these families
// would; `create` makes them.
rocksdb::Status RawOpen(const std::string& dir,
                        const std::vector<std::string>& names,
                        std::unique_ptr<rocksdb::DB>* db,
                        std::vector<rocksdb::ColumnFamilyHandle*>* handles) {
  rocksdb::DBOptions o;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const auto& n : names) families.push_back({n, {}});
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(o, dir, families, handles, &raw);
  db->reset(raw);
  return s;
}

void RawClose(std::unique_ptr<rocksdb::DB>& db,
              std::vector<rocksdb::ColumnFamilyHandle*>& handles) {
  for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
  handles.clear();
  db.reset();
}

// A store as a build from before formats writes it (format 1), holding
// one namespace record; plus `extra` families and a format record if
// `format` > 0.
void MakeStore(const std::string& dir, std::vector<std::string> extra,
               std::uint32_t format = 0) {
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  std::vector<std::string> names = kBaseFamilies;
  names.insert(names.end(), extra.begin(), extra.end());
  const rocksdb::Status opened = RawOpen(dir, names, &db, &handles);
  ASSERT_TRUE(opened.ok()) << opened.ToString();
  std::string key = "n";
  record::AppendBE(key, 0, 4);
  ASSERT_TRUE(db->Put({}, handles[0], key, "shop").ok());
  if (format > 0) {
    std::string value;
    record::AppendBE(value, format, 4);
    ASSERT_TRUE(db->Put({}, handles[0], "V", value).ok());
  }
  RawClose(db, handles);
}

std::vector<std::string> Families(const std::string& dir) {
  std::vector<std::string> names;
  EXPECT_TRUE(rocksdb::DB::ListColumnFamilies({}, dir, &names).ok());
  return names;
}

std::map<std::string, std::uintmax_t> Files(const std::string& dir) {
  std::map<std::string, std::uintmax_t> files;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    files[f.path().filename()] = f.file_size();
  }
  return files;
}

RocksOptions At(const std::string& dir) {
  RocksOptions o;
  o.dir = dir;
  return o;
}

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The format record of a closed store, read with RocksDB alone.
std::uint32_t FormatRecord(const std::string& dir) {
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  EXPECT_TRUE(RawOpen(dir, Families(dir), &db, &handles).ok());
  std::string value;
  EXPECT_TRUE(db->Get({}, handles[0], "V", &value).ok());
  RawClose(db, handles);
  return value.size() == 4 ? record::ReadBE(value.data(), 4) : 0;
}

TEST(StoreFormat, ANewStoreRecordsItsFormat) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  std::unique_ptr<RocksStore> store;
  ASSERT_TRUE(RocksStore::Open(At(data), StoreHooks(), &store).ok());
  EXPECT_TRUE(store->OpenNotes().empty());
  store.reset();
  EXPECT_TRUE(Contains(Families(data), FormatFamily(kStoreFormat)));
  EXPECT_EQ(FormatRecord(data), kStoreFormat);
}

TEST(StoreFormat, AStoreFromBeforeFormatsIsUpgradedInPlace) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  MakeStore(data, {});
  std::unique_ptr<RocksStore> store;
  ASSERT_TRUE(RocksStore::Open(At(data), StoreHooks(), &store).ok());
  ASSERT_EQ(store->OpenNotes().size(), 1u);
  EXPECT_NE(store->OpenNotes()[0].find("from format 1 to 2"), std::string::npos)
      << store->OpenNotes()[0];
  std::vector<std::string> names;
  ASSERT_TRUE(store->LoadNamespaces(&names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"shop"});
  store.reset();
  EXPECT_TRUE(Contains(Families(data), FormatFamily(2)));
  EXPECT_EQ(FormatRecord(data), 2u);
  // The next start finds format 2: nothing to do.
  ASSERT_TRUE(RocksStore::Open(At(data), StoreHooks(), &store).ok());
  EXPECT_TRUE(store->OpenNotes().empty());
}

TEST(StoreFormat, AnUpgradeCutShortIsFinishedByTheNextStart) {
  // The family made, the record not written (a crash between the two).
  TempDir dir;
  const std::string data = dir.path() + "/data";
  MakeStore(data, {FormatFamily(2)});
  std::unique_ptr<RocksStore> store;
  ASSERT_TRUE(RocksStore::Open(At(data), StoreHooks(), &store).ok());
  ASSERT_EQ(store->OpenNotes().size(), 1u);
  std::vector<std::string> names;
  ASSERT_TRUE(store->LoadNamespaces(&names).ok());
  EXPECT_EQ(names, std::vector<std::string>{"shop"});
  store.reset();
  ASSERT_TRUE(RocksStore::Open(At(data), StoreHooks(), &store).ok());
  EXPECT_TRUE(store->OpenNotes().empty());
}

void ExpectRefusedUntouched(const std::string& data, std::uint32_t format) {
  const auto before = Files(data);
  std::unique_ptr<RocksStore> store;
  const Status s = RocksStore::Open(At(data), StoreHooks(), &store);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has format " + std::to_string(format)),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("reads formats up to 2"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find(std::string(BuildVersion())), std::string::npos)
      << s.message();
  EXPECT_EQ(Files(data), before);
}

TEST(StoreFormat, ANewerFormatIsRefusedAndLeftUntouched) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  MakeStore(data, {FormatFamily(3)}, 3);
  ExpectRefusedUntouched(data, 3);
  // delayd check (read-only) refuses it too.
  RocksOptions read_only = At(data);
  read_only.read_only = true;
  std::unique_ptr<RocksStore> store;
  EXPECT_FALSE(RocksStore::Open(read_only, StoreHooks(), &store).ok());
}

TEST(StoreFormat, ANewerFormatRecordIsRefused) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  MakeStore(data, {FormatFamily(2)}, 7);
  std::unique_ptr<RocksStore> store;
  const Status s = RocksStore::Open(At(data), StoreHooks(), &store);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has format 7"), std::string::npos) << s.message();
}

TEST(StoreFormat, ABinaryThatKnowsNoFormatsRefusesTheStore) {
  // What delayd 0.1 does at start: opens the four families it knows.
  TempDir dir;
  const std::string data = dir.path() + "/data";
  {
    std::unique_ptr<RocksStore> store;
    ASSERT_TRUE(RocksStore::Open(At(data), StoreHooks(), &store).ok());
  }
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  const rocksdb::Status s = RawOpen(data, kBaseFamilies, &db, &handles);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find(FormatFamily(2)), std::string::npos)
      << s.ToString();
  if (s.ok()) RawClose(db, handles);
}

// Event ids fixed by versions (Store::FixedEventIdsFrom, with the option):
// from the first version of a new store; in one that held timers before,
// past every number its counters handed out (they go on giving the ids of
// the timers it holds).
RocksOptions Fixed(const std::string& dir) {
  RocksOptions o = At(dir);
  o.fixed_event_ids = true;
  return o;
}

TEST(FixedEventIds, ANewStoreFixesThemFromTheStart) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  std::unique_ptr<RocksStore> store;
  ASSERT_TRUE(RocksStore::Open(Fixed(data), StoreHooks(), &store).ok());
  EXPECT_EQ(store->FixedEventIdsFrom(), 0u);
  EXPECT_TRUE(store->OpenNotes().empty());
  store.reset();
  ASSERT_TRUE(RocksStore::Open(Fixed(data), StoreHooks(), &store).ok());
  EXPECT_EQ(store->FixedEventIdsFrom(), 0u);
  // Without the option, counters give every id (the record stays).
  store.reset();
  ASSERT_TRUE(RocksStore::Open(At(data), StoreHooks(), &store).ok());
  EXPECT_EQ(store->FixedEventIdsFrom(), Store::kNoFixedEventIds);
  store.reset();
  ASSERT_TRUE(RocksStore::Open(Fixed(data), StoreHooks(), &store).ok());
  EXPECT_EQ(store->FixedEventIdsFrom(), 0u);
}

TEST(FixedEventIds, AStoreFromBeforeFixesThemPastItsCounters) {
  TempDir dir;
  const std::string data = dir.path() + "/data";
  MakeStore(data, {FormatFamily(2)}, 2);
  {
    // Two partitions' counters, as the build before reserved them.
    std::unique_ptr<rocksdb::DB> db;
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    ASSERT_TRUE(RawOpen(data, Families(data), &db, &handles).ok());
    for (const auto& [part, versions, events] :
         {std::tuple{0, 5'000, 9'000}, std::tuple{1, 7'000, 3'000}}) {
      std::string key = "c", value;
      record::AppendBE(key, part, 2);
      for (std::uint64_t limit : {versions, events}) {
        value.append(reinterpret_cast<const char*>(&limit), sizeof limit);
      }
      ASSERT_TRUE(db->Put({}, handles[0], key, value).ok());
    }
    RawClose(db, handles);
  }
  const std::uint64_t from = 9'000 + (std::uint64_t{1} << 40);
  std::unique_ptr<RocksStore> store;
  ASSERT_TRUE(RocksStore::Open(At(data), StoreHooks(), &store).ok());
  EXPECT_EQ(store->FixedEventIdsFrom(), Store::kNoFixedEventIds);
  store.reset();
  ASSERT_TRUE(RocksStore::Open(Fixed(data), StoreHooks(), &store).ok());
  EXPECT_EQ(store->FixedEventIdsFrom(), from);
  ASSERT_EQ(store->OpenNotes().size(), 1u);
  EXPECT_NE(store->OpenNotes()[0].find(std::to_string(from << 10)),
            std::string::npos)
      << store->OpenNotes()[0];
  store.reset();
  // Recorded: the next start finds the same, and says nothing.
  ASSERT_TRUE(RocksStore::Open(Fixed(data), StoreHooks(), &store).ok());
  EXPECT_EQ(store->FixedEventIdsFrom(), from);
  EXPECT_TRUE(store->OpenNotes().empty());
}

}  // namespace
}  // namespace delayd::testing
