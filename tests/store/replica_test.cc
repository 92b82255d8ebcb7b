// A tag's second copy (`mlpo tag --copy-to`, store/admin/copy.h): reads
// fall back to it, verify names what only it still holds, it survives
// reopening, its space is freed with its version, and a copy that fails
// leaves the tag as it was.
#include <filesystem>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "store/admin/copy.h"
#include "store/admin/gc.h"
#include "store/admin/recover.h"
#include "store/admin/verify.h"
#include "store/fs/fault_injection_fs.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

constexpr int kObjects = 6;

std::string Name(int i) { return "o" + std::to_string(i); }

// kObjects objects committed at version 1 and tagged "t1".
void Populate(ObjectStore* s, uint64_t numel = 30000) {
  for (int i = 0; i < kObjects; ++i) {
    ASSERT_TRUE(s->Declare(Name(i), TestLayout(numel + 1000 * i)).ok());
    auto l = s->Checkout(Name(i)).get();
    ASSERT_TRUE(l.ok());
    FillFor(l->get(), 1);
    ASSERT_TRUE(s->Commit(*l, 1).get().ok());
  }
  ASSERT_TRUE(s->Tag("t1").ok());
}

// Flips a bit in every extent object `obj` holds on `path` (first copy or
// replica), so that no read of that copy succeeds.
int DamageOn(const StoreOptions& o, const VersionRecord& rec,
             const std::vector<ExtentRef>& list, uint32_t path) {
  int n = 0;
  for (const ExtentRef& e : list) {
    if (e.path != path) continue;
    const PathOptions& po = o.paths[e.path].path;
    FlipBit(SegFile(po, e.offset), e.offset % po.segment_bytes + e.length / 2,
            3);
    ++n;
  }
  return n;
}

TEST(ReplicaTest, ACopiedTagReadsFromItsReplicaWhenTheFirstCopyFails) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.6, 0.4});
  uint64_t path1_before = 0;
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    Populate(s->get());
    path1_before = (*s)->Stats().paths[1].usage.used;
    auto rep = CopyTagTo(**s, "t1", 1);
    ASSERT_TRUE(rep.ok()) << rep.status();
    EXPECT_EQ(rep->copied, static_cast<uint64_t>(kObjects));
    EXPECT_EQ(rep->already, 0u);
    uint64_t blobs = 0;
    for (auto& info : (*s)->List()) blobs += info.layout.total_bytes();
    EXPECT_EQ(rep->bytes, blobs);
    EXPECT_EQ((*s)->Stats().paths[1].usage.used, path1_before + blobs);
    ExpectNoLeak(s->get());
    // Again: every version has its copy there already.
    auto again = CopyTagTo(**s, "t1", 1);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->copied, 0u);
    EXPECT_EQ(again->already, static_cast<uint64_t>(kObjects));
  }
  // Reopened: the replicas are in the index; the deep check counts them.
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto rec = (*s)->GetVersion(Name(0), 0);
  ASSERT_TRUE(rec.ok());
  ASSERT_FALSE(rec->replica.empty());
  for (const ExtentRef& e : rec->replica) EXPECT_EQ(e.path, 1u);
  EXPECT_TRUE(CheckExtentMap(*(*s)).empty());
  auto v = Verify(*(*s), "t1", nullptr, /*deep=*/true);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->bad.empty());
  EXPECT_EQ(v->replicas, static_cast<uint64_t>(kObjects));
  // The first copy's extents on path 0 damaged for o0 and o1: reads come
  // from the replica, bit-identical; verify names them as held by the
  // replica only, not as bad.
  std::set<std::string> damaged;
  for (int i : {0, 1}) {
    auto r = (*s)->GetVersion(Name(i), 0);
    ASSERT_TRUE(r.ok());
    if (DamageOn(o, *r, r->extents, 0) > 0) damaged.insert(Name(i));
  }
  ASSERT_EQ(damaged.size(), 2u);
  for (int i = 0; i < kObjects; ++i) {
    auto l = (*s)->Checkout(Name(i)).get();
    ASSERT_TRUE(l.ok()) << Name(i) << ": " << l.status();
    EXPECT_TRUE(Matches(**l, 1)) << Name(i);
  }
  v = Verify(*(*s), "t1");
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->bad.empty());
  std::set<std::string> named;
  for (auto& b : v->covered) named.insert(b.object);
  EXPECT_EQ(named, damaged);
  // Both copies of o0 damaged: DataLoss naming it, never wrong bytes.
  rec = (*s)->GetVersion(Name(0), 0);
  ASSERT_GT(DamageOn(o, *rec, rec->replica, 1), 0);
  auto l0 = (*s)->Checkout(Name(0)).get();
  EXPECT_EQ(l0.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(l0.status().message().find(Name(0)), std::string::npos);
  v = Verify(*(*s), "t1");
  ASSERT_TRUE(v.ok());
  ASSERT_FALSE(v->bad.empty());
  for (auto& b : v->bad) EXPECT_EQ(b.object, Name(0));
  // New versions, the tag dropped, gc: the replicas' space comes back.
  for (int i = 1; i < kObjects; ++i) {
    auto l = (*s)->Checkout(Name(i)).get();
    ASSERT_TRUE(l.ok());
    FillFor(l->get(), 2);
    ASSERT_TRUE((*s)->Commit(*l, 2).get().ok());
  }
  ASSERT_TRUE((*s)->DropTag("t1").ok());
  ASSERT_TRUE(Gc(**s).ok());
  ExpectNoLeak(s->get());
  uint64_t live1 = 0;
  for (int i = 1; i < kObjects; ++i) {
    auto r = (*s)->GetVersion(Name(i), 0);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->replica.empty());
  }
  auto st = (*s)->Stats();
  live1 = st.paths[1].referenced_bytes;
  EXPECT_EQ(st.paths[1].usage.used, live1 + st.paths[1].unreferenced_bytes);
}

TEST(ReplicaTest, BadCopiesAreRefusedAndAFailedCopyLeavesTheTagAsItWas) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  // Path 1 has room for its share of the state (~3.7 MB), not for a
  // second copy of all of it (~7.4 MB).
  o.paths[1].path.capacity = 4 << 20;
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  Populate(s->get(), 100000);
  EXPECT_EQ(CopyTagTo(**s, "nope", 1).status().code(),
            absl::StatusCode::kNotFound);
  auto bad_path = CopyTagTo(**s, "t1", 2);
  EXPECT_EQ(bad_path.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_path.status().message().find("0..1"), std::string::npos);
  const StoreStats before = (*s)->Stats();
  auto full = CopyTagTo(**s, "t1", 1);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("the tag is as it was"),
            std::string::npos)
      << full.status();
  const StoreStats after = (*s)->Stats();
  for (size_t p = 0; p < 2; ++p)
    EXPECT_EQ(after.paths[p].usage.used, before.paths[p].usage.used);
  for (int i = 0; i < kObjects; ++i) {
    auto r = (*s)->GetVersion(Name(i), 0);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->replica.empty());
  }
  ExpectStoreVerifies(s->get());
  // Read-only stores do not copy.
  s->reset();
  StoreOptions ro = o;
  ro.read_only = true;
  auto r = ObjectStore::Open(ro);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(CopyTagTo(**r, "t1", 0).ok());
}

// Issue 17: a failed --copy-to left a segment file behind for good. The
// segments a failed copy grew stay, but their space is free at once and
// the next versions are written into it: the path does not grow again.
TEST(ReplicaTest, AFailedCopysSegmentSpaceIsReused) {
  TempDir dir;
  FaultInjectionFileSystem fsys;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  o.fs = &fsys;
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  Populate(s->get(), 100000);
  auto segments = [&] {
    int n = 0;
    for (auto& e : std::filesystem::directory_iterator(
             o.paths[1].path.root + "/t/rank-0"))
      n += e.path().filename().string().rfind("seg-", 0) == 0;
    return n;
  };
  const int before = segments();
  const uint64_t used_before = (*s)->Stats().paths[1].usage.used;
  fsys.FailWhile(FaultInjectionFileSystem::Op::kWrite, EIO,
                 o.paths[1].path.root);
  auto failed = CopyTagTo(**s, "t1", 1);
  ASSERT_FALSE(failed.ok());
  fsys.ClearFaults();
  const int grown = segments();
  EXPECT_GT(grown, before) << "the copy did not need a new segment";
  EXPECT_EQ((*s)->Stats().paths[1].usage.used, used_before);
  ExpectNoLeak(s->get());
  // A step of every object (half of it on path 1, as much as the failed
  // copy wanted there): written into the freed space.
  for (int i = 0; i < kObjects; ++i) {
    auto l = (*s)->Checkout(Name(i)).get();
    ASSERT_TRUE(l.ok());
    FillFor(l->get(), 2);
    ASSERT_TRUE((*s)->Commit(*l, 2).get().ok());
  }
  EXPECT_EQ(segments(), grown);
  // And a copy that succeeds uses it too.
  ASSERT_TRUE((*s)->Tag("t2").ok());
  auto ok = CopyTagTo(**s, "t2", 0);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(segments(), grown);
  ExpectStoreVerifies(s->get());
}

// A node's NVMe (path 0, which also held the index) is lost after tag t1
// was copied to the PFS (path 1) and t2 was not: `recover --lost-path 0`
// rebuilds the index from the backup on the PFS, promotes t1's replicas,
// names t2 and the heads as lost, and t1 restores bit-identical.
TEST(ReplicaTest, ACopiedTagSurvivesTheLossOfTheOtherPath) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.6, 0.4});
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    Populate(s->get());
    ASSERT_TRUE(CopyTagTo(**s, "t1", 1).ok());
    for (int i = 0; i < kObjects; ++i) {
      auto l = (*s)->Checkout(Name(i)).get();
      ASSERT_TRUE(l.ok());
      FillFor(l->get(), 2);
      ASSERT_TRUE((*s)->Commit(*l, 2).get().ok());
    }
    ASSERT_TRUE((*s)->Tag("t2").ok());
  }
  // Bad input first: the path still has its data; a path that is not one.
  EXPECT_EQ(Recover(o, false, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(Recover(o, false, 7).ok());
  {
    auto s = ObjectStore::Open(o);  // nothing was changed
    ASSERT_TRUE(s.ok()) << s.status();
    ExpectStoreVerifies(s->get());
  }
  // The device dies; a new, empty one is mounted at the same place.
  const std::string root0 = o.paths[0].path.root;
  std::filesystem::remove_all(root0);
  std::filesystem::create_directories(root0);
  EXPECT_FALSE(ObjectStore::Open(o).ok());
  auto rep = Recover(o, false, 0);
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_FALSE(rep->rebuilt_from.empty());  // the index was on path 0
  EXPECT_EQ(rep->lost_path, 0);
  EXPECT_EQ(rep->promoted, static_cast<uint64_t>(kObjects));
  EXPECT_EQ(rep->lost_heads.size(), static_cast<size_t>(kObjects));
  ASSERT_EQ(rep->lost_tags.size(), 1u);
  EXPECT_EQ(rep->lost_tags[0].first, "t2");
  ASSERT_EQ(rep->tags.size(), 1u);
  EXPECT_EQ(rep->tags[0].name, "t1");
  EXPECT_EQ(rep->tags[0].bad_extents, 0u);
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Restore("t1").ok());
  for (int i = 0; i < kObjects; ++i) {
    auto l = (*s)->Checkout(Name(i)).get();
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_TRUE(Matches(**l, 1)) << Name(i);
  }
  EXPECT_TRUE(CheckExtentMap(*(*s)).empty());
  ExpectStoreVerifies(s->get());
  // Training goes on over both paths, the new device included.
  for (int i = 0; i < kObjects; ++i) {
    auto l = (*s)->Checkout(Name(i)).get();
    ASSERT_TRUE(l.ok());
    FillFor(l->get(), 3);
    ASSERT_TRUE((*s)->Commit(*l, 3).get().ok());
  }
  EXPECT_GT((*s)->Stats().paths[0].usage.used, 0u);
  ExpectStoreVerifies(s->get());
}

// A record with a replica: encodes and decodes to itself, and every
// single-bit flip of it is caught (its checksum, its two tilings).
TEST(ReplicaTest, RecordsWithAReplicaRoundTripAndCatchEveryFlip) {
  VersionRecord r;
  r.version = 7;
  r.blob_bytes = 3 * 4096;
  r.extents = {{0, 0, 8192, 0, 11}, {1, 4096, 4096, 8192, 12}};
  r.replica = {{1, 65536, 12288, 0, 13}};
  std::string enc = r.Encode();
  auto d = VersionRecord::Decode(enc);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->replica.size(), 1u);
  EXPECT_EQ(d->replica[0].offset, 65536u);
  EXPECT_EQ(d->replica[0].checksum, 13u);
  EXPECT_EQ(d->extents.size(), 2u);
  size_t caught = 0;
  for (size_t bit = 0; bit < enc.size() * 8; ++bit) {
    std::string bad = enc;
    bad[bit / 8] ^= static_cast<char>(1 << (bit % 8));
    caught += !VersionRecord::Decode(bad).ok();
  }
  EXPECT_EQ(caught, enc.size() * 8);
  // A replica that does not tile the blob is refused even with a good
  // checksum.
  VersionRecord gap = r;
  gap.replica = {{1, 65536, 8192, 0, 13}};
  EXPECT_EQ(VersionRecord::Decode(gap.Encode()).status().code(),
            absl::StatusCode::kDataLoss);
  // Without a replica the encoding is the one older builds wrote.
  VersionRecord plain = r;
  plain.replica.clear();
  EXPECT_EQ(plain.Encode().size() + 8 + 8 + 5 * 8, enc.size());
}

}  // namespace
}  // namespace mlpo
