// The FileSystem seam and its fault-injecting implementation: every kind of
// call the store makes for its own files goes through it (a fault injected
// for the kind is seen), and power loss undoes exactly what was not durable.
#include "store/fs/fault_injection_fs.h"

#include <cerrno>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "gtest/gtest.h"
#include "store/fs/file_system.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

using Op = FaultInjectionFileSystem::Op;

std::string Slurp(FileSystem* fs, const std::string& f) {
  auto t = fs->ReadFile(f, 1 << 20);
  return t.ok() ? *t : std::string("<") + std::string(t.status().message()) +
                           ">";
}

TEST(FaultInjectionFsTest, PowerLossUndoesWhatWasNotDurable) {
  TempDir dir;
  const std::string d = dir.path();
  FaultInjectionFileSystem f;
  ASSERT_TRUE(f.CreateDirs(d + "/a/b").ok());  // durable on return
  ASSERT_TRUE(f.WriteFileAtomic(d + "/a/kept", "kept").ok());
  // Written and synced, but its directory entry never synced: gone.
  ASSERT_TRUE(f.WriteFileSynced(d + "/a/b/unsynced-entry", "x").ok());
  // A link whose directory is synced survives; the source's unlink, not
  // synced, is undone.
  ASSERT_TRUE(f.WriteFileAtomic(d + "/a/src", "linked").ok());
  ASSERT_TRUE(f.Link(d + "/a/src", d + "/a/dst").ok());
  ASSERT_TRUE(f.SyncDir(d + "/a").ok());
  ASSERT_TRUE(f.Unlink(d + "/a/src").ok());
  EXPECT_TRUE(absl::IsAlreadyExists(f.Link(d + "/a/kept", d + "/a/dst")));
  // A directory renamed and the rename never synced: renamed back, with
  // what it holds.
  ASSERT_TRUE(f.CreateDirs(d + "/a/stage").ok());
  ASSERT_TRUE(f.WriteFileSynced(d + "/a/stage/file", "staged").ok());
  ASSERT_TRUE(f.SyncDir(d + "/a/stage").ok());
  ASSERT_TRUE(f.Rename(d + "/a/stage", d + "/a/final").ok());
  ASSERT_TRUE(f.IsDirectory(d + "/a/final"));
  // A tree removed is gone for good.
  ASSERT_TRUE(f.CreateDirs(d + "/a/trash").ok());
  ASSERT_TRUE(f.WriteFileAtomic(d + "/a/trash/x", "x").ok());
  ASSERT_TRUE(f.RemoveTree(d + "/a/trash").ok());

  f.CutPower();
  EXPECT_FALSE(f.WriteFileSynced(d + "/a/late", "late").ok());
  ASSERT_TRUE(f.RestoreToLastSync().ok());

  FileSystem* real = DefaultFileSystem();
  EXPECT_EQ(Slurp(real, d + "/a/kept"), "kept");
  EXPECT_FALSE(real->Exists(d + "/a/b/unsynced-entry"));
  EXPECT_TRUE(real->IsDirectory(d + "/a/b"));
  EXPECT_EQ(Slurp(real, d + "/a/dst"), "linked");
  EXPECT_EQ(Slurp(real, d + "/a/src"), "linked");  // the unlink was undone
  EXPECT_FALSE(real->Exists(d + "/a/final"));
  EXPECT_EQ(Slurp(real, d + "/a/stage/file"), "staged");
  EXPECT_FALSE(real->Exists(d + "/a/trash"));
  EXPECT_FALSE(real->Exists(d + "/a/late"));
  auto names = real->ListDir(d + "/a");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->size(), 5u);  // b, dst, kept, src, stage
}

// Torn writes: after a cut, each 4 KiB block written to a segment file
// since its last sync holds wholly the new bytes or wholly the old, some of
// each; other files lose all of it.
TEST(FaultInjectionFsTest, TornWritesKeepWholeBlocksOfWhatWasInFlight) {
  TempDir dir;
  const std::string seg = dir.path() + "/seg-000000";
  const std::string other = dir.path() + "/other";
  const size_t kBlocks = 64, kBlock = 4096;
  FaultInjectionFileSystem f;
  f.SetTornWrites(42);
  for (const std::string& path : {seg, other}) {
    bool direct = false;
    auto fd = f.OpenForIo(path, true, false, &direct, false);
    ASSERT_TRUE(fd.ok()) << fd.status();
    ASSERT_TRUE(f.WriteAt(*fd, path, std::string(kBlocks * kBlock, 'a'), 0)
                    .ok());
    ASSERT_TRUE(f.Fdatasync(*fd, path).ok());
    ASSERT_TRUE(f.WriteAt(*fd, path, std::string(kBlocks * kBlock, 'b'), 0)
                    .ok());
    ::close(*fd);
  }
  ASSERT_TRUE(f.SyncDir(dir.path()).ok());
  f.CutPower();
  ASSERT_TRUE(f.RestoreToLastSync().ok());
  FileSystem* real = DefaultFileSystem();
  std::string got = Slurp(real, seg);
  ASSERT_EQ(got.size(), kBlocks * kBlock);
  size_t new_blocks = 0;
  for (size_t b = 0; b < kBlocks; ++b) {
    std::string block = got.substr(b * kBlock, kBlock);
    bool all_a = block == std::string(kBlock, 'a');
    bool all_b = block == std::string(kBlock, 'b');
    ASSERT_TRUE(all_a || all_b) << "block " << b << " is mixed";
    new_blocks += all_b;
  }
  EXPECT_GT(new_blocks, 0u);
  EXPECT_LT(new_blocks, kBlocks);
  EXPECT_EQ(f.torn_blocks(), new_blocks);
  EXPECT_EQ(Slurp(real, other), std::string(kBlocks * kBlock, 'a'));
}

TEST(FaultInjectionFsTest, EveryKindFailsWithItsErrnoAndNamesTheFile) {
  TempDir dir;
  const std::string d = dir.path();
  FaultInjectionFileSystem f;
  ASSERT_TRUE(f.WriteFileAtomic(d + "/x", "x").ok());
  struct Case {
    Op op;
    std::function<absl::Status()> call;
  };
  int fd = -1;
  std::vector<Case> cases = {
      {Op::kStat, [&] { return f.Stat(d + "/x").status(); }},
      {Op::kMkdir, [&] { return f.CreateDirs(d + "/new"); }},
      {Op::kList, [&] { return f.ListDir(d).status(); }},
      {Op::kLink, [&] { return f.Link(d + "/x", d + "/y"); }},
      {Op::kReadFile, [&] { return f.ReadFile(d + "/x", 10).status(); }},
      {Op::kLock, [&] {
         auto o = f.OpenLockFile(d + "/lock", true);
         if (!o.ok()) return o.status();
         fd = *o;
         return f.TryLock(fd, d + "/lock", true).status();
       }},
      {Op::kUnlink, [&] { return f.Unlink(d + "/x"); }},
  };
  for (auto& c : cases) {
    f.FailNth(c.op, 1, EACCES);
    absl::Status st = c.call();
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied)
        << static_cast<int>(c.op) << ": " << st;
    EXPECT_NE(st.message().find(d), std::string::npos) << st;
    f.ClearFaults();
    EXPECT_TRUE(c.call().ok()) << static_cast<int>(c.op);
  }
  EXPECT_EQ(f.injected(), static_cast<int>(cases.size()));
  if (fd >= 0) ::close(fd);
}

// The store's calls of each kind go through the seam: a fault injected for
// the kind is hit by creating a store, committing, tagging and reopening it;
// whatever it breaks fails with a clear error, and what was committed
// before reads back afterwards.
TEST(FaultInjectionFsTest, StoreCallsOfEveryKindGoThroughTheSeam) {
  for (Op op : {Op::kStat, Op::kMkdir, Op::kList, Op::kUnlink, Op::kLink,
                Op::kLock, Op::kReadFile}) {
    SCOPED_TRACE(static_cast<int>(op));
    TempDir dir;
    StoreOptions base = TestStoreOptions(dir, {0.5, 0.5});
    int injected = 0;
    uint64_t acked = 0;
    for (int round = 0; round < 2; ++round) {  // create, then reuse
      FaultInjectionFileSystem fsys;
      StoreOptions o = base;
      o.fs = &fsys;
      // Fail each call of the kind in turn, up to a few, so calls past the
      // first (the slot lock after the writer lock, ...) are hit as well.
      for (int nth = 1; nth <= 3; ++nth) {
        fsys.FailNth(op, nth, EIO);
        absl::Status st;
        {
          auto s = ObjectStore::Open(o);
          st = s.status();
          if (s.ok()) {
            st = (*s)->Declare("a", TestLayout(100000));
            if (st.ok()) {
              auto l = (*s)->Checkout("a").get();
              st = l.status();
              if (st.ok()) {
                FillFor(l->get(), acked + 1);
                st = (*s)->Commit(*l, acked + 1).get();
                if (st.ok()) ++acked;
              }
            }
            if (st.ok()) st = (*s)->Tag("t" + std::to_string(acked));
          }
        }
        if (!st.ok()) {
          EXPECT_FALSE(st.message().empty());
        }
        fsys.ClearFaults();
      }
      injected += fsys.injected();
      // Nothing committed is lost: the default file system reads it back.
      auto s = ObjectStore::Open(base);
      ASSERT_TRUE(s.ok()) << s.status();
      if (acked > 0) {
        auto l = (*s)->Checkout("a").get();
        ASSERT_TRUE(l.ok()) << l.status();
        EXPECT_EQ((*l)->step(), acked);
        EXPECT_TRUE(Matches(**l, acked));
      }
      ExpectStoreVerifies(s->get());
    }
    EXPECT_GT(injected, 0) << "no call of this kind went through the seam";
  }
}

}  // namespace
}  // namespace mlpo
