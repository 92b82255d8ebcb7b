#include "store/admin/gc.h"
#include "store/admin/verify.h"
#include "store/object_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <set>

#include <cerrno>
#include <filesystem>

#include "gtest/gtest.h"
#include "store/fs/fault_injection_fs.h"
#include "store/placement/stripe.h"
#include "store/store_target.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

class RoundTripTest : public ::testing::TestWithParam<std::vector<double>> {};

TEST_P(RoundTripTest, ManyObjectsAndVersionsReadBackExactly) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, GetParam());
  const int kObjects = 12;
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int i = 0; i < kObjects; ++i) {
      std::string name = "sg-" + std::to_string(i);
      // Uneven sizes: 4 KiB .. ~1.4 MiB, not all multiples of the extent.
      ASSERT_TRUE((*s)->Declare(name, TestLayout(1000 + i * 40000)).ok());
      auto fresh = (*s)->Checkout(name).get();
      ASSERT_TRUE(fresh.ok());
      EXPECT_TRUE((*fresh)->is_new());
      EXPECT_EQ((*fresh)->Section<float>("m")[7], 0.0f);
    }
    for (uint64_t v = 1; v <= 4; ++v)
      for (int i = 0; i < kObjects; ++i)
        ASSERT_TRUE(CommitFilled(s->get(), "sg-" + std::to_string(i), v).ok());
    for (int i = 0; i < kObjects; ++i) {
      auto l = (*s)->Checkout("sg-" + std::to_string(i)).get();
      ASSERT_TRUE(l.ok()) << l.status();
      EXPECT_EQ((*l)->step(), 4u);
      EXPECT_TRUE(Matches(**l, 4));
    }
    // Striping follows the fractions.
    auto rec = (*s)->GetVersion("sg-11", 0);
    ASSERT_TRUE(rec.ok());
    std::vector<uint64_t> per(GetParam().size(), 0);
    for (auto& e : rec->extents) per[e.path] += e.length;
    auto want = SplitBytes(rec->blob_bytes, (*s)->placement()->fractions());
    EXPECT_EQ(per, want);
    ExpectNoLeak(s->get());
  }
  // After reopen: the same bytes; allocator rebuilt from the index.
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  for (int i = 0; i < kObjects; ++i) {
    auto l = (*s)->Checkout("sg-" + std::to_string(i)).get();
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_TRUE(Matches(**l, 4));
  }
  ExpectNoLeak(s->get());
  auto rep = Verify(*(*s));
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->bad.empty());
  EXPECT_EQ(rep->objects, static_cast<uint64_t>(kObjects));
}

INSTANTIATE_TEST_SUITE_P(Paths, RoundTripTest,
                         ::testing::Values(std::vector<double>{1.0},
                                           std::vector<double>{0.7, 0.3},
                                           std::vector<double>{0.5, 0.3, 0.2}));

TEST(ObjectStoreTest, CorruptByteIsDataLossNamingTheExtentAndOthersStayReadable) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  for (std::string obj : {"a", "b"}) {
    ASSERT_TRUE((*s)->Declare(obj, TestLayout(100000)).ok());
    ASSERT_TRUE(CommitFilled(s->get(), obj, 3).ok());
  }
  auto rec = (*s)->GetVersion("a", 0);
  const ExtentRef& e = rec->extents[rec->extents.size() - 1];  // on path 1
  StoragePath* p = (*s)->path(e.path);
  std::string file = p->SegmentFile(e.offset);
  uint64_t off = p->SegmentOffset(e.offset) + 100;
  {
    int fd = ::open(file.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char c;
    ASSERT_EQ(pread(fd, &c, 1, off), 1);
    c ^= 0x40;
    ASSERT_EQ(pwrite(fd, &c, 1, off), 1);
    ::close(fd);
  }
  auto l = (*s)->Checkout("a").get();
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kDataLoss);
  std::string msg(l.status().message());
  EXPECT_NE(msg.find("object a"), std::string::npos) << msg;
  EXPECT_NE(msg.find("step 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find(p->root()), std::string::npos) << msg;
  EXPECT_NE(msg.find("offset " + std::to_string(p->SegmentOffset(e.offset))),
            std::string::npos)
      << msg;
  auto b = (*s)->Checkout("b").get();
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(Matches(**b, 3));
  auto rep = Verify(*(*s));
  ASSERT_TRUE(rep.ok());
  ASSERT_EQ(rep->bad.size(), 1u);
  EXPECT_EQ(rep->bad[0].object, "a");
  EXPECT_EQ(rep->bad[0].file, file);
  EXPECT_EQ(rep->bad[0].file_offset, p->SegmentOffset(e.offset));
  EXPECT_EQ(rep->bad[0].step, 3u);
}

TEST(ObjectStoreTest, TagCommitRestoreAndDropTagGcFreesSpace) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.6, 0.4});
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  for (std::string obj : {"x", "y"}) {
    ASSERT_TRUE((*s)->Declare(obj, TestLayout(50000)).ok());
    ASSERT_TRUE(CommitFilled(s->get(), obj, 1).ok());
  }
  ASSERT_TRUE((*s)->Tag("ckpt1").ok());
  EXPECT_EQ((*s)->Tag("ckpt1").code(), absl::StatusCode::kAlreadyExists);
  uint64_t used_at_tag = (*s)->Stats().paths[0].usage.used;
  ASSERT_TRUE((*s)->Declare("z", TestLayout(1000)).ok());  // after the tag
  for (uint64_t v = 2; v <= 5; ++v) {
    ASSERT_TRUE(CommitFilled(s->get(), "x", v).ok());
    ASSERT_TRUE(CommitFilled(s->get(), "y", v).ok());
  }
  ASSERT_TRUE(CommitFilled(s->get(), "z", 5).ok());
  ExpectNoLeak(s->get());
  ASSERT_TRUE((*s)->Restore("ckpt1").ok());
  for (std::string obj : {"x", "y"}) {
    auto l = (*s)->Checkout(obj).get();
    ASSERT_TRUE(l.ok());
    EXPECT_EQ((*l)->step(), 1u);
    EXPECT_TRUE(Matches(**l, 1));
  }
  auto z = (*s)->Checkout("z").get();
  ASSERT_TRUE(z.ok());
  EXPECT_TRUE((*z)->is_new()) << "z did not exist at the tag";
  EXPECT_EQ((*s)->Stats().paths[0].usage.used, used_at_tag);
  ExpectNoLeak(s->get());
  // Move on past the tag, then drop it: gc frees the tagged versions.
  ASSERT_TRUE(CommitFilled(s->get(), "x", 6).ok());
  ASSERT_TRUE(CommitFilled(s->get(), "y", 6).ok());
  uint64_t before = (*s)->Stats().paths[0].usage.used;
  ASSERT_TRUE((*s)->DropTag("ckpt1").ok());
  EXPECT_EQ((*s)->Stats().paths[0].usage.used, before);
  auto freed = Gc(**s);
  ASSERT_TRUE(freed.ok());
  EXPECT_GT(*freed, 0u);
  EXPECT_LT((*s)->Stats().paths[0].usage.used, before);
  ExpectNoLeak(s->get());
  EXPECT_EQ((*s)->Restore("ckpt1").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*s)->DropTag("ckpt1").code(), absl::StatusCode::kNotFound);
}

// A tag of a store with no committed object is a tag too: it survives a
// reopen (found by the power-loss test: such a tag had no record at all).
TEST(ObjectStoreTest, ATagOfAnEmptyStoreSurvivesReopenAndDrop) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {1.0});
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Declare("a", TestLayout(1000)).ok());
    ASSERT_TRUE((*s)->Tag("empty").ok());
  }
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok());
    ASSERT_EQ((*s)->Tags().count("empty"), 1u);
    EXPECT_TRUE((*s)->Tags()["empty"].empty());
    ASSERT_TRUE(CommitFilled(s->get(), "a", 1).ok());
    ASSERT_TRUE((*s)->Restore("empty").ok());  // back to nothing committed
    auto l = (*s)->Checkout("a").get();
    ASSERT_TRUE(l.ok());
    EXPECT_TRUE((*l)->is_new());
    ASSERT_TRUE((*s)->DropTag("empty").ok());
  }
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->Tags().count("empty"), 0u);
}

TEST(ObjectStoreTest, EnospcOnOnePathMidCommitKeepsPreviousHead) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  FaultInjectionFileSystem fsys;
  o.fs = &fsys;
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Declare("w", TestLayout(200000)).ok());
  ASSERT_TRUE(CommitFilled(s->get(), "w", 1).ok());
  fsys.FailWhile(FaultInjectionFileSystem::Op::kWrite, ENOSPC,
                 o.paths[1].path.root);
  absl::Status st = CommitFilled(s->get(), "w", 2);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("(step 2)"), std::string::npos)
      << st;
  EXPECT_NE(st.message().find(o.paths[1].path.root), std::string::npos) << st;
  fsys.ClearFaults();
  auto l = (*s)->Checkout("w").get();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->step(), 1u);
  EXPECT_TRUE(Matches(**l, 1));
  ExpectNoLeak(s->get());
  // Capacity exhaustion of every path (no I/O error) also leaves the head.
  s->reset();
  o.fs = nullptr;
  o.paths[0].path.capacity = 4 << 20;
  o.paths[1].path.capacity = 8 << 20;
  s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Declare("big", TestLayout(1 << 20)).ok());  // 12 MiB
  st = CommitFilled(s->get(), "big", 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("every path is full"), std::string::npos) << st;
  EXPECT_NE(st.message().find(o.paths[0].path.root), std::string::npos) << st;
  EXPECT_NE(st.message().find(o.paths[1].path.root), std::string::npos) << st;
  l = (*s)->Checkout("w").get();
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(Matches(**l, 1));
  ExpectNoLeak(s->get());
}

// Spill-over: when one path is full its share goes to the paths with room;
// the commit succeeds and reads back; a later commit with room is striped
// by the fractions again.
TEST(ObjectStoreTest, AFullPathSpillsItsShareToThePathsWithRoom) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.25, 0.25});
  o.paths[0].path.capacity = 8 << 20;  // two 4 MiB segments
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  const uint64_t n = 600000;  // 7.2 MB objects: 3.6 MB wanted on path 0
  for (const char* name : {"a", "b", "c", "d"})
    ASSERT_TRUE((*s)->Declare(name, TestLayout(n)).ok());
  for (const char* name : {"a", "b", "c", "d"}) {
    absl::Status st = CommitFilled(s->get(), name, 1);
    ASSERT_TRUE(st.ok()) << name << ": " << st;
  }
  uint64_t on_path0 = 0, total = 0;
  for (const char* name : {"a", "b", "c", "d"}) {
    auto rec = (*s)->GetVersion(name, 0);
    ASSERT_TRUE(rec.ok());
    for (auto& e : rec->extents) {
      total += e.length;
      if (e.path == 0) on_path0 += e.length;
    }
    auto l = (*s)->Checkout(name).get();
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_TRUE(Matches(**l, 1));
  }
  EXPECT_LE(on_path0, 8u << 20);      // path 0 never past its capacity
  EXPECT_LT(on_path0, total / 2);     // ... so it took less than its half
  ExpectNoLeak(s->get());
  auto rep = Verify(*(*s));
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->bad.empty());
  // Space frees up (a's old version goes); new versions fit on path 0 again.
  ASSERT_TRUE(CommitFilled(s->get(), "a", 2).ok());
  ExpectNoLeak(s->get());
}

// One read path, one error mapping: a read that fails with an errno keeps
// the errno's code (here EACCES -> PermissionDenied) in Checkout,
// ReadVersion and Verify alike, naming object, version, path and file.
TEST(ObjectStoreTest, ReadErrorsKeepTheErrnoCodeOnEveryReadPath) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  FaultInjectionFileSystem fsys;
  o.fs = &fsys;
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Declare("r", TestLayout(50000)).ok());
  ASSERT_TRUE(CommitFilled(s->get(), "r", 3).ok());
  fsys.FailWhile(FaultInjectionFileSystem::Op::kRead, EACCES,
                 o.paths[1].path.root);
  auto l = (*s)->Checkout("r").get();
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), absl::StatusCode::kPermissionDenied)
      << l.status();
  EXPECT_NE(l.status().message().find("object r step 3"), std::string::npos)
      << l.status();
  EXPECT_NE(l.status().message().find(o.paths[1].path.root), std::string::npos);
  auto rv = (*s)->ReadVersion("r", 0);  // the head
  EXPECT_EQ(rv.status().code(), absl::StatusCode::kPermissionDenied);
  auto rep = Verify(*(*s));
  ASSERT_TRUE(rep.ok());
  ASSERT_FALSE(rep->bad.empty());
  EXPECT_EQ(rep->bad[0].code, absl::StatusCode::kPermissionDenied);
  fsys.ClearFaults();
  l = (*s)->Checkout("r").get();
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(Matches(**l, 3));
}

TEST(ObjectStoreTest, FailedSyncFailsTheCommitAndKeepsThePreviousHead) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  FaultInjectionFileSystem fsys;
  o.fs = &fsys;
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Declare("d", TestLayout(100000)).ok());
  ASSERT_TRUE(CommitFilled(s->get(), "d", 1).ok());
  // Every path's fdatasync fails (one failing path alone is degraded mode:
  // see DegradedMode...).
  fsys.FailWhile(FaultInjectionFileSystem::Op::kSync, EIO,
                 o.paths[0].path.root);
  fsys.FailWhile(FaultInjectionFileSystem::Op::kSync, EIO,
                 o.paths[1].path.root);
  absl::Status st = CommitFilled(s->get(), "d", 2);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("fdatasync"), std::string::npos) << st;
  EXPECT_NE(st.message().find("seg-000000"), std::string::npos) << st;
  EXPECT_NE(st.message().find("(step 2)"), std::string::npos)
      << st;
  ExpectNoLeak(s->get());
  fsys.ClearFaults();
  auto l = (*s)->Checkout("d").get();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->step(), 1u);
  EXPECT_TRUE(Matches(**l, 1));
  // The path recovers: the next commit syncs again and succeeds.
  ASSERT_TRUE(CommitFilled(s->get(), "d", 2).ok());
  s->reset();
  s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  l = (*s)->Checkout("d").get();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ((*l)->step(), 2u);
  EXPECT_TRUE(Matches(**l, 2));
  ExpectNoLeak(s->get());
}

TEST(ObjectStoreTest, BadInputsAreClearErrors) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  // Layout mismatch.
  ASSERT_TRUE((*s)->Declare("a", TestLayout(100)).ok());
  ASSERT_TRUE((*s)->Declare("a", TestLayout(100)).ok());  // idempotent
  EXPECT_EQ((*s)->Declare("a", TestLayout(101)).code(),
            absl::StatusCode::kFailedPrecondition);
  // Names that could traverse paths.
  for (std::string bad : {"../x", "a/b", "..", "", "x..y", "sp ace"})
    EXPECT_EQ((*s)->Declare(bad, TestLayout(10)).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  EXPECT_EQ((*s)->Tag("../t").code(), absl::StatusCode::kInvalidArgument);
  // Undeclared object; a step going back (the same step again is a
  // rewrite of it, e.g. edited masters).
  EXPECT_EQ((*s)->Checkout("nope").get().status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(CommitFilled(s->get(), "a", 5).ok());
  EXPECT_TRUE(CommitFilled(s->get(), "a", 5).ok());
  absl::Status back = CommitFilled(s->get(), "a", 4);
  EXPECT_EQ(back.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(back.message().find("never go back"), std::string::npos) << back;
  // Second opener.
  auto second = ObjectStore::Open(o);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("pid " + std::to_string(getpid())),
            std::string::npos)
      << second.status();
  s->reset();
  // Path replaced by another directory: identity mismatch.
  std::string p1 = o.paths[1].path.root;
  std::filesystem::rename(p1, p1 + ".old");
  std::filesystem::create_directories(p1);
  auto r = ObjectStore::Open(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition)
      << r.status();
  EXPECT_NE(r.status().message().find(p1), std::string::npos);
  // Swapped paths.
  std::filesystem::remove_all(p1);
  std::filesystem::rename(p1 + ".old", p1);
  StoreOptions swapped = o;
  std::swap(swapped.paths[0], swapped.paths[1]);
  swapped.meta_dir = DefaultMetaDir(o);
  EXPECT_EQ(ObjectStore::Open(swapped).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // Missing path.
  std::filesystem::rename(p1, p1 + ".gone");
  r = ObjectStore::Open(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(p1), std::string::npos);
  std::filesystem::rename(p1 + ".gone", p1);
  // Still intact after all that.
  s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto l = (*s)->Checkout("a").get();
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(Matches(**l, 5));
  // Opening a store that does not exist without create.
  StoreOptions none = TestStoreOptions(dir, {1.0});
  none.name = "absent";
  none.create_if_missing = false;
  EXPECT_EQ(ObjectStore::Open(none).status().code(), absl::StatusCode::kNotFound);
}

TEST(ObjectStoreTest, ReadOnlyOpenBesideAWriterReadsAndRefusesChanges) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  auto w = ObjectStore::Open(o);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Declare("a", TestLayout(5000)).ok());
  ASSERT_TRUE(CommitFilled(w->get(), "a", 2).ok());
  StoreOptions ro = o;
  ro.read_only = true;
  auto r = ObjectStore::Open(ro);
  ASSERT_TRUE(r.ok()) << r.status();
  auto l = (*r)->Checkout("a").get();
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(Matches(**l, 2));
  EXPECT_EQ((*r)->Commit(*l, 3).get().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*r)->Tag("x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Gc(**r).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*r)->Declare("new", TestLayout(10)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*r)->Declare("a", TestLayout(5000)).ok());  // no change
  auto rep = Verify(*(*r));
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->bad.empty());
  r->reset();
  // The writer is unaffected.
  ASSERT_TRUE(CommitFilled(w->get(), "a", 3).ok());
  StoreOptions none = TestStoreOptions(dir, {1.0});
  none.name = "absent";
  none.read_only = true;
  EXPECT_EQ(ObjectStore::Open(none).status().code(), absl::StatusCode::kNotFound);
}

TEST(ObjectStoreTest, StoreDirectoryDescriptorReopensTheStore) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Declare("a", TestLayout(100)).ok());
    ASSERT_TRUE(CommitFilled(s->get(), "a", 1).ok());
  }
  auto from_dir = StoreOptionsForTarget(o.paths[1].path.root + "/t/rank-0");
  ASSERT_TRUE(from_dir.ok()) << from_dir.status();
  auto s = ObjectStore::Open(*from_dir);
  ASSERT_TRUE(s.ok()) << s.status();
  auto l = (*s)->Checkout("a").get();
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(Matches(**l, 1));
  EXPECT_EQ(StoreOptionsForTarget(dir.path()).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace mlpo

namespace mlpo {
namespace {

// verify --deep checks the index against the data without reading it: a
// truncated segment file is found from its size, and reading agrees.
TEST(ObjectStoreTest, DeepVerifyFindsATruncatedSegmentFromTheIndexAlone) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 8; ++i) {  // ~10 MB per path: three segments each
      ASSERT_TRUE((*s)->Declare("d" + std::to_string(i), TestLayout(200000)).ok());
      ASSERT_TRUE(CommitFilled(s->get(), "d" + std::to_string(i), 1).ok());
    }
    ASSERT_TRUE((*s)->Tag("t").ok());
    EXPECT_TRUE(CheckExtentMap(*(*s)).empty());
    auto clean = Verify(*(*s), "", nullptr, /*deep=*/true);
    ASSERT_TRUE(clean.ok());
    EXPECT_TRUE(clean->bad.empty());
  }
  // Open checks the first segment's size; a later one cut short is what
  // only reading, or --deep, finds.
  std::string seg = o.paths[1].path.root + "/t/rank-0/seg-000001";
  ASSERT_EQ(::truncate(seg.c_str(), 100000), 0);
  StoreOptions ro = o;
  ro.read_only = true;
  auto s = ObjectStore::Open(ro);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<BadExtent> bad = CheckExtentMap(*(*s));
  ASSERT_FALSE(bad.empty());
  for (const BadExtent& b : bad) {
    EXPECT_EQ(b.path, o.paths[1].path.root);
    EXPECT_EQ(b.file, seg);
    EXPECT_GE(b.file_offset + b.length, 100000u);
    EXPECT_NE(b.error.find("shorter"), std::string::npos) << b.error;
  }
  auto rep = Verify(*(*s), "t", nullptr, /*deep=*/true);
  ASSERT_TRUE(rep.ok());
  EXPECT_GT(rep->bad.size(), bad.size());  // the reads fail too
}

// Degraded mode: one path fails its writes; the commit is written again on
// the other path with a warning, training goes on, and what was committed
// before reads back. Only when no path is left does a commit fail.
TEST(ObjectStoreTest, DegradedModeStripesNewVersionsOverTheRemainingPaths) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  FaultInjectionFileSystem fsys;
  o.fs = &fsys;
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  for (const char* n : {"a", "b"}) {
    ASSERT_TRUE((*s)->Declare(n, TestLayout(100000)).ok());
    ASSERT_TRUE(CommitFilled(s->get(), n, 1).ok());
  }
  ASSERT_TRUE((*s)->Tag("before").ok());
  fsys.FailWhile(FaultInjectionFileSystem::Op::kWrite, EIO,
                 o.paths[1].path.root);
  ASSERT_TRUE(CommitFilled(s->get(), "a", 2).ok());
  EXPECT_EQ((*s)->placement()->degraded_paths(), (std::vector<bool>{false, true}));
  auto rec = (*s)->GetVersion("a", 0);  // the head: step 2
  ASSERT_TRUE(rec.ok());
  for (const ExtentRef& e : rec->extents) EXPECT_EQ(e.path, 0u);
  ASSERT_TRUE(CommitFilled(s->get(), "a", 3).ok());  // no new failure
  auto l = (*s)->Checkout("a").get();
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE(Matches(**l, 3));
  l->reset();
  ExpectNoLeak(s->get());
  // "b" still has half of version 1 on the failed path: reading it fails
  // clearly (here the fault fails reads too) and verify names it.
  fsys.FailWhile(FaultInjectionFileSystem::Op::kRead, EIO,
                 o.paths[1].path.root);
  auto b = (*s)->Checkout("b").get();
  EXPECT_FALSE(b.ok());
  auto rep = Verify(*(*s));
  ASSERT_TRUE(rep.ok());
  std::set<std::string> named;
  for (auto& x : rep->bad) named.insert(x.object);
  EXPECT_EQ(named, (std::set<std::string>{"b"}));
  // No path left: the commit fails and the head stays.
  fsys.FailWhile(FaultInjectionFileSystem::Op::kWrite, EIO,
                 o.paths[0].path.root);
  absl::Status st = CommitFilled(s->get(), "a", 4);
  EXPECT_FALSE(st.ok());
  fsys.ClearFaults();
  s->reset();
  // Reopened (the disk back): every path is in use again, nothing lost.
  auto r = ObjectStore::Open(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->placement()->degraded_paths(), (std::vector<bool>{false, false}));
  auto a = (*r)->Checkout("a").get();
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->step(), 3u);
  EXPECT_TRUE(Matches(**a, 3));
  ExpectStoreVerifies(r->get());
}

// A path's store directory removed while the store is open: its segment
// files live on unlinked, so writes "succeed" into files nobody will find.
// The sync notices (no link left): the commit goes to the other path
// (degraded mode) and a tag says what was lost instead of acknowledging it.
TEST(ObjectStoreTest, ADirectoryRemovedWhileOpenIsNoticedAtTheNextSync) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->Declare("a", TestLayout(100000)).ok());
  ASSERT_TRUE(CommitFilled(s->get(), "a", 1).ok());
  std::filesystem::remove_all(o.paths[1].path.root + "/t");
  ASSERT_TRUE(CommitFilled(s->get(), "a", 2).ok());
  EXPECT_EQ((*s)->placement()->degraded_paths(), (std::vector<bool>{false, true}));
  auto rec = (*s)->GetVersion("a", 0);  // the head: step 2
  ASSERT_TRUE(rec.ok());
  for (const ExtentRef& e : rec->extents) EXPECT_EQ(e.path, 0u);
  absl::Status tag = (*s)->Tag("after");
  EXPECT_EQ(tag.code(), absl::StatusCode::kDataLoss) << tag;
  EXPECT_NE(tag.message().find("deleted while the store had it open"),
            std::string::npos)
      << tag;
}

}  // namespace
}  // namespace mlpo
