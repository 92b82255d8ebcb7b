// A copy made with hard links (`cp -al`, `cp -l`, `rsync --link-dest`)
// shares the files the store writes in place (segments, the index seal)
// with the original. The probe that found it: `cp -al STORE COPY`, `mlpo
// relocate COPY`, train on the copy, and the original no longer opened (its
// seal had taken the copy's identity) while the copy's writes went into the
// original's segment files. Now a writable open of either refuses while
// anything is shared, `Unshare` gives a store files of its own, and
// `Relocate` does so for a copy before it writes.
#include <filesystem>
#include <map>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "store/admin/relocate.h"
#include "store/admin/unshare.h"
#include "store/fs/fault_injection_fs.h"
#include "store/store_files.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {
namespace fs = std::filesystem;

uint64_t Links(const std::string& f) {
  struct stat st;
  return ::stat(f.c_str(), &st) == 0 ? st.st_nlink : 0;
}

std::string Bytes(const std::string& f) {
  std::ifstream in(f, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// No unshare temporary is left in `dir`.
void ExpectNoTemporaries(const std::string& dir) {
  for (auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().rfind("unshare-", 0),
              std::string::npos)
        << e.path();
}

// The store `o` in a hard-linked copy under `to`: its options there.
StoreOptions LinkCopy(const TempDir& dir, const StoreOptions& o,
                      const std::string& to) {
  EXPECT_EQ(std::system(("cp -al " + dir.path() + " " + to).c_str()), 0);
  StoreOptions c = o;
  for (size_t i = 0; i < c.paths.size(); ++i)
    c.paths[i].path.root = to + "/p" + std::to_string(i);
  c.meta_dir.clear();
  return c;
}

TEST(HardLinkCopyTest, AWritableOpenIsRefusedWhileFilesAreSharedAndUnshareEndsIt) {
  TempDir dir, other;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  MakeTwoObjectStore(o);
  const std::string seal = DefaultMetaDir(o) + "/MLPO-SEAL";
  StoreOptions c = LinkCopy(dir, o, other.path() + "/copy");
  ASSERT_EQ(Links(seal), 2u);
  const std::string seal_before = Bytes(seal);

  auto refused = ObjectStore::Open(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(refused.status().message());
  EXPECT_NE(msg.find("hard links"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Nothing was changed"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mlpo unshare"), std::string::npos) << msg;
  EXPECT_EQ(Bytes(seal), seal_before);
  // Reading is harmless: a read-only open works, and sees the state.
  ExpectTwoObjectStoreAt(o, 3);

  // A store with nothing to share unshares nothing; a store whose records
  // name another place (the copy, before relocate) is refused.
  auto moved = Unshare(c, nullptr);
  ASSERT_FALSE(moved.ok());
  EXPECT_NE(moved.status().message().find("relocate"), std::string::npos)
      << moved.status();

  int calls = 0;
  auto rep = Unshare(o, [&](const std::string&, size_t, size_t, uint64_t,
                            uint64_t) { ++calls; });
  ASSERT_TRUE(rep.ok()) << rep.status();
  EXPECT_GE(rep->files.size(), 3u);  // the seal and both paths' segments
  EXPECT_GT(rep->bytes, 0u);
  EXPECT_GT(calls, 0);
  EXPECT_EQ(Links(seal), 1u);
  for (const std::string& f : rep->files) EXPECT_EQ(Links(f), 1u) << f;
  auto again = Unshare(o, nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->files.empty());

  // The original is writable now, and its writes stay its own.
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    for (const char* n : {"a", "b"})
      ASSERT_TRUE(CommitFilled(s->get(), n, 4).ok());
  }
  ExpectTwoObjectStoreAt(o, 4);
  auto rel = Relocate(c, /*new_identity=*/true);
  ASSERT_TRUE(rel.ok()) << rel.status();
  EXPECT_TRUE(rel->unshared_files.empty());  // nothing left to share
  ExpectTwoObjectStoreAt(c, 3);
}

// The probe, as it was: relocate the hard-linked copy, write to it, and the
// original must open for writing and read back as it was.
TEST(HardLinkCopyTest, RelocatingAHardLinkedCopyLeavesTheOriginalIntact) {
  TempDir dir, other;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  MakeTwoObjectStore(o);
  std::string uuid;
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok());
    uuid = (*s)->store_uuid();
  }
  StoreOptions c = LinkCopy(dir, o, other.path() + "/copy");
  auto rel = Relocate(c, /*new_identity=*/true);
  ASSERT_TRUE(rel.ok()) << rel.status();
  EXPECT_GE(rel->unshared_files.size(), 3u);
  EXPECT_GT(rel->unshared_bytes, 0u);
  // Issue 51 item 6: RocksDB's info log is appended in place by every open:
  // the copy's is its own (it shared the original's).
  EXPECT_EQ(Links(DefaultMetaDir(c) + "/LOG"), 1u);
  {
    auto s = ObjectStore::Open(c);
    ASSERT_TRUE(s.ok()) << s.status();
    for (uint64_t step = 4; step <= 6; ++step)
      for (const char* n : {"a", "b"})
        ASSERT_TRUE(CommitFilled(s->get(), n, step).ok());
    ASSERT_TRUE((*s)->Tag("t6").ok());
  }
  ExpectTwoObjectStoreAt(c, 6);
  ExpectTwoObjectStoreAt(o, 3);
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->store_uuid(), uuid);
  EXPECT_EQ((*s)->Tags().count("t6"), 0u);
}

// A rename that fails half-way (here on the second path), or a disk that
// fills during the copy, leaves each file shared or unshared, never torn,
// and no temporary; running it again finishes. A temporary left by a
// killed run is removed.
TEST(HardLinkCopyTest, AnUnshareCutShortChangesNothingAndFinishesWhenRunAgain) {
  TempDir dir, other;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  MakeTwoObjectStore(o);
  LinkCopy(dir, o, other.path() + "/copy");
  const std::string p1 = o.paths[1].path.root + "/t/rank-0";
  const std::string stale = p1 + "/unshare-seg-000000.tmp";
  std::ofstream(stale) << "left by a killed run";

  FaultInjectionFileSystem fsys;
  fsys.FailWhile(FaultInjectionFileSystem::Op::kRename, EIO, p1);
  StoreOptions of = o;
  of.fs = &fsys;
  auto cut = Unshare(of, nullptr);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("unshare"), std::string::npos)
      << cut.status();
  ExpectNoTemporaries(p1);
  EXPECT_EQ(Links(p1 + "/seg-000000"), 2u);
  ExpectTwoObjectStoreAt(o, 3);
  EXPECT_FALSE(ObjectStore::Open(o).ok());  // still shared

  // A full disk on that path: the copy fails with ENOSPC naming the file,
  // and again nothing is left half-done.
  fsys.ClearFaults();
  fsys.FailWhile(FaultInjectionFileSystem::Op::kWriteFile, ENOSPC, p1);
  auto full = Unshare(of, nullptr);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted)
      << full.status();
  EXPECT_NE(full.status().message().find(p1 + "/seg-"), std::string::npos)
      << full.status();
  ExpectNoTemporaries(p1);
  EXPECT_EQ(Links(p1 + "/seg-000000"), 2u);
  ExpectTwoObjectStoreAt(o, 3);

  auto done = Unshare(o, nullptr);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(Links(p1 + "/seg-000000"), 1u);
  ASSERT_TRUE(ObjectStore::Open(o).ok());
  ExpectTwoObjectStoreAt(o, 3);
}

// The power lost at each step of an unshare in turn (each copy, sync,
// rename and directory sync; the fault-injecting file system forgets what
// was not synced): the store reads back as it was, the hard-linked copy's
// files are untouched, and a rerun finishes with no temporary left and a
// store that opens for writing.
TEST(HardLinkCopyTest, PowerLostAtAnyStepOfAnUnshareLosesNothing) {
  int cuts = 0;
  bool finished = false;
  for (int k = 0; k < 400 && !finished; ++k) {
    TempDir dir, other;
    StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
    MakeTwoObjectStore(o);
    const std::string copy = other.path() + "/copy";
    LinkCopy(dir, o, copy);
    std::map<std::string, std::string> copy_bytes;
    for (auto& e : fs::recursive_directory_iterator(copy))
      if (e.is_regular_file())
        copy_bytes[e.path().string()] = Bytes(e.path().string());

    FaultInjectionFileSystem fsys;
    fsys.CutPowerAfter(k);
    StoreOptions of = o;
    of.fs = &fsys;
    auto r = Unshare(of, nullptr);
    if (!fsys.power_cut()) {
      ASSERT_TRUE(r.ok()) << r.status();
      finished = true;  // k steps were enough: nothing left to cut
    } else {
      ++cuts;
      ASSERT_TRUE(fsys.RestoreToLastSync().ok()) << "cut after " << k;
    }
    SCOPED_TRACE("power cut after " + std::to_string(k) + " steps");
    ExpectTwoObjectStoreAt(o, 3);
    for (auto& [f, b] : copy_bytes)
      EXPECT_EQ(Bytes(f), b) << f << " of the hard-linked copy changed";
    auto again = Unshare(o, nullptr);
    ASSERT_TRUE(again.ok()) << again.status();
    for (size_t i = 0; i < o.paths.size(); ++i)
      ExpectNoTemporaries(o.paths[i].path.root + "/t/rank-0");
    ExpectNoTemporaries(DefaultMetaDir(o));
    EXPECT_EQ(Links(o.paths[1].path.root + "/t/rank-0/seg-000000"), 1u);
    ASSERT_TRUE(ObjectStore::Open(o).ok());
    ExpectTwoObjectStoreAt(o, 3);
  }
  EXPECT_TRUE(finished);
  EXPECT_GE(cuts, 6);  // a copy, a sync and a rename per file at least
}

// The copy shares the original's writer lock too: while the original is
// open, relocating the copy is refused with a message that says the holder
// may have the other copy open (not "already open" alone), and works once
// it has closed.
TEST(HardLinkCopyTest, ALockHeldOnTheOriginalIsNamedAsSharedWhenTheCopyIsRelocated) {
  TempDir dir, other;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  MakeTwoObjectStore(o);
  StoreOptions c = LinkCopy(dir, o, other.path() + "/copy");
  {
    auto held = WriterLock::Acquire(DefaultMetaDir(o), DefaultFileSystem());
    ASSERT_TRUE(held.ok()) << held.status();
    auto refused = Relocate(c, /*new_identity=*/true);
    ASSERT_FALSE(refused.ok());
    const std::string msg(refused.status().message());
    EXPECT_NE(msg.find("already open"), std::string::npos) << msg;
    EXPECT_NE(msg.find("shared through hard links"), std::string::npos)
        << msg;
  }
  auto rel = Relocate(c, /*new_identity=*/true);
  ASSERT_TRUE(rel.ok()) << rel.status();
  ExpectTwoObjectStoreAt(o, 3);
  ExpectTwoObjectStoreAt(c, 3);
}

}  // namespace
}  // namespace mlpo
