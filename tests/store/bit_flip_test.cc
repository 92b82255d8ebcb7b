// Bit flips: N random single-bit flips in live extents and in index values.
// Every flip is reported (object, version, path, file, offset for extents;
// object and version for index records) and none reaches a reader: the
// store returns DataLoss instead of bytes, and the optimizer stops its step.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "gtest/gtest.h"
#include "optimizer/optimizer.h"
#include "rocksdb/db.h"
#include "store/admin/verify.h"
#include "tests/optimizer/optimizer_test_util.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

TEST(BitFlipTest, EveryFlipInAnExtentIsReportedAndNoneIsRead) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.6, 0.4});
  const int kObjects = 8;
  std::vector<std::tuple<std::string, uint64_t, VersionRecord>> live;
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < kObjects; ++i) {
      std::string n = "f" + std::to_string(i);
      ASSERT_TRUE((*s)->Declare(n, TestLayout(40000)).ok());
      auto l = (*s)->Checkout(n).get();
      FillFor(l->get(), 1);
      ASSERT_TRUE((*s)->Commit(*l, 1).get().ok());
      auto rec = (*s)->GetVersion(n, 0);
      ASSERT_TRUE(rec.ok());
      live.emplace_back(n, 1, *rec);
    }
  }
  // N flips, each in a different extent, at a random byte and bit.
  std::mt19937 rng(99);
  struct Flip {
    std::string object;
    std::string path, file;
    uint64_t extent_offset;  // the extent's offset in the file
  };
  std::vector<Flip> flips;
  std::set<std::pair<std::string, uint64_t>> used;
  const int kFlips = 20;
  while (static_cast<int>(flips.size()) < kFlips) {
    auto& [obj, v, rec] = live[rng() % live.size()];
    const ExtentRef& e = rec.extents[rng() % rec.extents.size()];
    if (!used.insert({obj, e.blob_offset}).second) continue;
    const auto& po = o.paths[e.path].path;
    uint64_t seg = po.segment_bytes;
    Flip f;
    f.object = obj;
    f.path = po.root;
    f.file = SegFile(po, e.offset);
    f.extent_offset = e.offset % seg;
    FlipBit(f.file, f.extent_offset + rng() % e.length, rng() % 8);
    flips.push_back(f);
  }
  StoreOptions ro = o;
  ro.read_only = true;
  auto s = ObjectStore::Open(ro);
  ASSERT_TRUE(s.ok()) << s.status();
  auto rep = Verify(*(*s));
  ASSERT_TRUE(rep.ok());
  // Reported: exactly the flipped extents, each by object, version, path,
  // file and offset, as checksum mismatches.
  std::set<std::tuple<std::string, std::string, uint64_t>> want, got;
  for (auto& f : flips) want.insert({f.object, f.file, f.extent_offset});
  for (auto& b : rep->bad) {
    got.insert({b.object, b.file, b.file_offset});
    EXPECT_EQ(b.step, 1u);
    EXPECT_EQ(b.code, absl::StatusCode::kDataLoss);
    EXPECT_NE(b.error.find("checksum"), std::string::npos) << b.error;
  }
  EXPECT_EQ(got, want);
  RecordProperty("flips_injected", kFlips);
  RecordProperty("flips_reported", static_cast<int>(got.size()));
  // Never read: a checkout of a flipped object is DataLoss, the others are
  // bit-identical.
  std::set<std::string> hit;
  for (auto& f : flips) hit.insert(f.object);
  for (auto& [obj, v, rec] : live) {
    auto l = (*s)->Checkout(obj).get();
    if (hit.count(obj)) {
      EXPECT_EQ(l.status().code(), absl::StatusCode::kDataLoss) << obj;
    } else {
      ASSERT_TRUE(l.ok()) << obj;
      EXPECT_TRUE(Matches(**l, 1));
    }
  }
}

// How many of the value's single-bit flips `decodes` rejects.
template <typename Decodes>
size_t FlipsCaught(const std::string& value, Decodes decodes) {
  size_t caught = 0;
  for (size_t bit = 0; bit < value.size() * 8; ++bit) {
    std::string bad = value;
    bad[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    caught += !decodes(bad);
  }
  return caught;
}

// Flips in index values: every single-bit flip of an encoded record fails
// its decode (the record's own checksum), and a flipped record in a real
// index makes the store refuse to open, naming the object and version.
TEST(BitFlipTest, EveryFlipInAnIndexRecordIsCaught) {
  VersionRecord r;
  r.version = 7;
  r.blob_bytes = 3 << 16;
  for (int i = 0; i < 3; ++i)
    r.extents.push_back({static_cast<uint32_t>(i % 2),
                         static_cast<uint64_t>(i) << 20, 1 << 16,
                         static_cast<uint64_t>(i) << 16, 0x1234u + i});
  std::string enc = r.Encode();
  ASSERT_TRUE(VersionRecord::Decode(enc).ok());
  EXPECT_EQ(FlipsCaught(enc, [](const std::string& v) {
              return VersionRecord::Decode(v).ok();
            }),
            enc.size() * 8);
  std::string lenc = TestLayout(1000).Encode();
  EXPECT_EQ(FlipsCaught(lenc, [](const std::string& v) {
              return ObjectLayout::Decode(v).ok();
            }),
            lenc.size() * 8);

  // End to end: flip one bit of a version value inside the index.
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Declare("victim", TestLayout(20000)).ok());
    auto l = (*s)->Checkout("victim").get();
    FillFor(l->get(), 1);
    ASSERT_TRUE((*s)->Commit(*l, 1).get().ok());
  }
  std::string meta = o.paths[0].path.root + "/t/rank-0/meta";
  {
    std::vector<std::string> names;
    ASSERT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), meta,
                                                &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    for (auto& n : names) cfs.emplace_back(n, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> h;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), meta, cfs, &h, &db).ok());
    size_t vi = std::find(names.begin(), names.end(), "versions") - names.begin();
    ASSERT_LT(vi, names.size());
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator({}, h[vi]));
    it->SeekToFirst();
    ASSERT_TRUE(it->Valid());
    std::string key = it->key().ToString(), value = it->value().ToString();
    it.reset();
    value[value.size() / 2] ^= 0x10;
    rocksdb::WriteOptions wo;
    wo.sync = true;
    ASSERT_TRUE(db->Put(wo, h[vi], key, value).ok());
    for (auto* c : h) db->DestroyColumnFamilyHandle(c);
    delete db;
  }
  for (bool ro : {true, false}) {
    StoreOptions again = o;
    again.read_only = ro;
    auto s = ObjectStore::Open(again);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << s.status();
    EXPECT_NE(s.status().message().find("object victim version 1"),
              std::string::npos)
        << s.status();
  }
}

// The optimizer never computes on a flipped subgroup: its step stops with
// DataLoss, and the store's last tag restores the state bit-identically.
TEST(BitFlipTest, AFlippedSubgroupStopsTheStep) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {60000}, 20000);
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  ASSERT_TRUE(StageAll(opt->get(), 1).ok());
  ASSERT_TRUE((*opt)->Step(1024.0).ok());
  ASSERT_TRUE((*opt)->Tag("good").ok());
  std::vector<float> p0, m0, v0;
  ASSERT_TRUE((*opt)->ReadState(0, &p0, &m0, &v0).ok());
  // Flip a bit in the middle subgroup's first extent.
  const Subgroup& sg = (*opt)->subgroups()[1];
  auto rec = (*opt)->store()->GetVersion(sg.object, 0);
  ASSERT_TRUE(rec.ok());
  const ExtentRef& e = rec->extents.front();
  const auto& po = (*opt)->store()->options().paths[e.path].path;
  FlipBit(SegFile(po, e.offset), e.offset % po.segment_bytes + 100, 3);
  ASSERT_TRUE(StageAll(opt->get(), 2).ok());
  auto r = (*opt)->Step(1024.0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  EXPECT_NE(r.status().message().find(sg.object), std::string::npos)
      << r.status();
}

}  // namespace
}  // namespace mlpo
