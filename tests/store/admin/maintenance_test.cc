// The store's maintenance seam: StoreMaintenance's writes (what admin's gc
// and tag copy are made of) keep the store's invariants on their own, and
// the offline helpers admin's repair and relocate use (the writer lock, the
// roots check) refuse what they must; gc and verify across opens and beside
// a writer.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "gtest/gtest.h"
#include "store/admin/gc.h"
#include "store/admin/verify.h"
#include "store/store_files.h"
#include "store/store_maintenance.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

TEST(WriterLockTest, ASecondWriterIsRefusedNamingTheHolder) {
  TempDir dir;
  std::string meta = dir.Sub("meta");
  FileSystem* fs = DefaultFileSystem();
  EXPECT_EQ(WriterLock::HolderPid(meta), 0);
  auto first = WriterLock::Acquire(meta, fs);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->held());
  EXPECT_EQ(WriterLock::HolderPid(meta), getpid());
  // flock conflicts between two opens of the file, even in one process.
  auto second = WriterLock::Acquire(meta, fs);
  ASSERT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("pid " + std::to_string(getpid())),
            std::string::npos)
      << second.status();
  // Moved: one owner, released once.
  WriterLock moved = std::move(*first);
  EXPECT_FALSE(first->held());
  EXPECT_EQ(WriterLock::HolderPid(meta), getpid());
  moved.Release();
  EXPECT_EQ(WriterLock::HolderPid(meta), 0);
  auto again = WriterLock::Acquire(meta, fs);
  EXPECT_TRUE(again.ok()) << again.status();
}

// Something other than mlpo holding the lock (a backup tool, flock(1)) is
// not named by the pid the last mlpo writer left in the file.
TEST(WriterLockTest, AStalePidInTheLockFileIsNotNamedAsTheHolder) {
  TempDir dir;
  std::string meta = dir.Sub("meta");
  FileSystem* fs = DefaultFileSystem();
  { ASSERT_TRUE(WriterLock::Acquire(meta, fs).ok()); }  // writes our pid
  // A pid that is not running: a child that has exited and been reaped.
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  ASSERT_GT(gone, 0);
  int status = 0;
  ASSERT_EQ(waitpid(gone, &status, 0), gone);
  std::string file = meta + "/MLPO-LOCK";
  std::string text = std::to_string(gone) + "\n";
  text.resize(32, ' ');
  int wfd = ::open(file.c_str(), O_WRONLY);
  ASSERT_GE(wfd, 0);
  ASSERT_EQ(::pwrite(wfd, text.data(), text.size(), 0),
            static_cast<ssize_t>(text.size()));
  ::close(wfd);
  int holder = ::open(file.c_str(), O_RDONLY);  // the other tool's lock
  ASSERT_GE(holder, 0);
  ASSERT_EQ(::flock(holder, LOCK_EX | LOCK_NB), 0);
  auto got = WriterLock::Acquire(meta, fs);
  EXPECT_EQ(WriterLock::HolderPid(meta), -1);  // held, holder unknown
  ::close(holder);
  ASSERT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(got.status().message());
  EXPECT_EQ(msg.find("open by pid"), std::string::npos) << msg;
  EXPECT_NE(msg.find("another process"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(gone)), std::string::npos) << msg;
  EXPECT_TRUE(WriterLock::Acquire(meta, fs).ok());  // released: free again
}

TEST(WriterLockTest, AMissingIndexDirectoryIsAnErrorNotACrash) {
  TempDir dir;
  auto got = WriterLock::Acquire(dir.path() + "/no/such/dir",
                                 DefaultFileSystem());
  EXPECT_FALSE(got.ok());
  EXPECT_EQ(WriterLock::HolderPid(dir.path() + "/no/such/dir"), 0);
}

TEST(CheckStoreRootsTest, MissingAndRepeatedRootsAreRefusedByName) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  FileSystem* fs = DefaultFileSystem();
  EXPECT_TRUE(CheckStoreRoots(o, fs).ok());
  StoreOptions missing = o;
  missing.paths[1].path.root = dir.path() + "/gone";
  auto st = CheckStoreRoots(missing, fs);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(st.message().find("path[1]"), std::string::npos) << st;
  // The same directory through a link.
  std::filesystem::create_directory_symlink(o.paths[0].path.root,
                                            dir.path() + "/link");
  StoreOptions twice = o;
  twice.paths[1].path.root = dir.path() + "/link";
  st = CheckStoreRoots(twice, fs);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("same directory"), std::string::npos) << st;
}

class MaintenanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    o_ = TestStoreOptions(dir_, {0.5, 0.5});
    auto s = ObjectStore::Open(o_);
    ASSERT_TRUE(s.ok()) << s.status();
    s_ = std::move(*s);
    ASSERT_TRUE(s_->Declare("x", TestLayout(40000)).ok());
    // v1 tagged "a", v2 tagged "b", v3 the head; then "a" dropped: v1's
    // record stays for gc.
    for (uint64_t step = 1; step <= 3; ++step) {
      ASSERT_TRUE(CommitFilled(s_.get(), "x", step).ok());
      v_[step] = s_->GetVersion("x", 0)->version;
      if (step == 1) {
        ASSERT_TRUE(s_->Tag("a").ok());
      }
      if (step == 2) {
        ASSERT_TRUE(s_->Tag("b").ok());
      }
    }
    ASSERT_TRUE(s_->DropTag("a").ok());
  }
  uint64_t Used() {
    uint64_t u = 0;
    for (auto& p : s_->Stats().paths) u += p.usage.used;
    return u;
  }
  StoreMaintenance& m() { return *s_; }

  TempDir dir_;
  StoreOptions o_;
  std::unique_ptr<ObjectStore> s_;
  uint64_t v_[4] = {0, 0, 0, 0};
};

TEST_F(MaintenanceTest, DeleteVersionsLeavesEveryReferencedVersion) {
  uint64_t unref = 0;
  for (auto& p : s_->Stats().paths) unref += p.unreferenced_bytes;
  ASSERT_GT(unref, 0u);
  const uint64_t used = Used();
  auto freed = m().DeleteVersions({{"x", v_[1]}, {"x", v_[2]}, {"x", v_[3]},
                                   {"x", 999}, {"nobody", 1}});
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_EQ(*freed, unref);
  EXPECT_EQ(Used(), used - unref);
  EXPECT_FALSE(s_->GetVersion("x", v_[1]).ok());
  auto b = s_->ReadVersion("x", v_[2]);  // tag "b"
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(Matches(**b, 2));
  auto head = s_->Checkout("x").get();
  ASSERT_TRUE(head.ok());
  EXPECT_TRUE(Matches(**head, 3));
  ExpectNoLeak(s_.get());
  // Nothing left to collect.
  auto again = Gc(m());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);
}

TEST_F(MaintenanceTest, APinnedVersionKeepsItsExtentsUntilUnpinned) {
  auto pinned = m().PinVersions("b", false);
  ASSERT_TRUE(pinned.ok());
  ASSERT_EQ(pinned->size(), 1u);
  ASSERT_TRUE(s_->DropTag("b").ok());
  ASSERT_TRUE(Gc(m()).ok());  // v1 freed now; v2's record goes, not its space
  const uint64_t used = Used();
  EXPECT_GT(used, 0u);
  EXPECT_FALSE(s_->GetVersion("x", v_[2]).ok());
  m().UnpinVersion("x", v_[2]);
  EXPECT_LT(Used(), used);
  ExpectNoLeak(s_.get());
}

TEST_F(MaintenanceTest, AReplicaOfAVersionGoneMeanwhileIsFreedNotRecorded) {
  auto rec = s_->GetVersion("x", v_[1]);
  ASSERT_TRUE(rec.ok());
  const uint64_t used = Used();
  AlignedBuffer buf(rec->blob_bytes);
  std::vector<BadExtent> bad;
  m().ReadCopy("x", *rec, buf.data(), &bad);
  ASSERT_TRUE(bad.empty());
  auto copy = m().WriteUnrecorded(1, buf.data(), rec->blob_bytes);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(Used(), used + rec->blob_bytes);
  ASSERT_TRUE(m().SyncPath(1).ok());
  ASSERT_TRUE(Gc(m()).ok());  // v1 goes before its copy is recorded
  auto n = m().RecordReplicas({{{"x", v_[1]}, *copy}});
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 0u);
  ExpectNoLeak(s_.get());
  // A live version's copy is recorded and survives a reopen.
  auto rec2 = s_->GetVersion("x", v_[2]);
  ASSERT_TRUE(rec2.ok());
  m().ReadCopy("x", *rec2, buf.data(), &bad);
  auto copy2 = m().WriteUnrecorded(0, buf.data(), rec2->blob_bytes);
  ASSERT_TRUE(copy2.ok());
  ASSERT_TRUE(m().SyncPath(0).ok());
  n = m().RecordReplicas({{{"x", v_[2]}, *copy2}});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
  s_.reset();
  auto s = ObjectStore::Open(o_);
  ASSERT_TRUE(s.ok()) << s.status();
  auto after = (*s)->GetVersion("x", v_[2]);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->replica.size(), copy2->size());
  ExpectNoLeak(s->get());
}

TEST_F(MaintenanceTest, BadPathsAndReadOnlyStoresAreRefused) {
  char buf[4096] = {0};
  EXPECT_EQ(m().WriteUnrecorded(2, buf, sizeof(buf)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m().SyncPath(7).code(), absl::StatusCode::kInvalidArgument);
  s_.reset();
  StoreOptions ro = o_;
  ro.read_only = true;
  auto r = ObjectStore::Open(ro);
  ASSERT_TRUE(r.ok()) << r.status();
  StoreMaintenance& rm = **r;
  EXPECT_EQ(rm.CheckWritable("x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rm.WriteUnrecorded(0, buf, sizeof(buf)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rm.DeleteVersions({{"x", v_[1]}}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*r)->GetVersion("x", v_[1]).ok());  // nothing went
}

// Issue 7, item 12: drop-tag then gc, in separate opens (as the CLI does), frees the
// tag's space in gc, as the README says.
TEST(GcTest, DropTagThenGcInLaterOpensFreesTheTagsSpace) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  MakeTwoObjectStore(o);
  uint64_t used_before = 0;
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok());
    for (auto& p : (*s)->Stats().paths) used_before += p.usage.used;
    ASSERT_TRUE((*s)->DropTag("t2").ok());
  }
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok());
    // Reopened: the dropped tag's versions still hold their space...
    uint64_t used = 0;
    for (auto& p : (*s)->Stats().paths) used += p.usage.used;
    EXPECT_EQ(used, used_before);
  }
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  auto freed = Gc(**s);
  ASSERT_TRUE(freed.ok());
  // ...until gc frees exactly the two tagged versions.
  EXPECT_EQ(*freed, 2 * TestLayout(30000).total_bytes());
  ExpectNoLeak(s->get());
}

// Issue 7, item 15: verify through a read-only view beside a writer that replaces
// (and reuses the space of) the versions it is reading reports them as
// superseded, not bad.
TEST(VerifyTest, VerifyBesideAWriterReportsSupersededNotBad) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {1.0});
  auto w = ObjectStore::Open(o);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Declare("a", TestLayout(30000)).ok());
  ASSERT_TRUE(CommitFilled(w->get(), "a", 1).ok());
  StoreOptions ro = o;
  ro.read_only = true;
  auto view = ObjectStore::Open(ro);
  ASSERT_TRUE(view.ok()) << view.status();
  // v2 frees v1's extents; v3 reuses them.
  ASSERT_TRUE(CommitFilled(w->get(), "a", 2).ok());
  ASSERT_TRUE(CommitFilled(w->get(), "a", 3).ok());
  auto rep = Verify(*(*view));
  ASSERT_TRUE(rep.ok());
  EXPECT_TRUE(rep->bad.empty());
  ASSERT_FALSE(rep->superseded.empty());
  EXPECT_EQ(rep->superseded[0].version, 1u);
  // Real corruption of the current head is still bad.
  auto rec = (*w)->GetVersion("a", 0);
  ASSERT_TRUE(rec.ok());
  const ExtentRef& e = rec->extents[0];
  StoragePath* p = (*w)->path(e.path);
  int fd = ::open(p->SegmentFile(e.offset).c_str(), O_RDWR);
  char c = 0x5a;
  ASSERT_EQ(::pwrite(fd, &c, 1, p->SegmentOffset(e.offset) + 10), 1);
  ::close(fd);
  auto view2 = ObjectStore::Open(ro);
  ASSERT_TRUE(view2.ok());
  rep = Verify(*(*view2));
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->bad.size(), 1u);
  EXPECT_TRUE(rep->superseded.empty());
}

}  // namespace
}  // namespace mlpo
