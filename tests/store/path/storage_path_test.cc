#include "store/path/storage_path.h"

#include <cerrno>
#include <cstring>

#include "gtest/gtest.h"
#include "store/fs/fault_injection_fs.h"
#include "tests/test_util.h"

namespace mlpo {
namespace {

absl::Status WriteRange(StoragePath* p, Range r, const void* buf) {
  IoLatch l;
  l.Add();
  p->Write(r, buf, l.Callback());
  return l.Wait();
}
absl::Status ReadRange(StoragePath* p, Range r, void* buf) {
  IoLatch l;
  l.Add();
  p->Read(r, buf, l.Callback());
  return l.Wait();
}

TEST(StoragePathTest, AllocateWriteReadReopen) {
  TempDir dir;
  PathOptions o;
  o.root = dir.path();
  o.segment_bytes = 1 << 20;
  std::vector<Range> ext;
  AlignedBuffer src(3 << 20);
  FillRandom(src.data(), src.size(), 5);
  std::string uuid;
  {
    auto p = StoragePath::Open(o, "s/rank-0", true);
    ASSERT_TRUE(p.ok()) << p.status();
    uuid = (*p)->uuid();
    auto r = (*p)->Allocate(src.size());
    ASSERT_TRUE(r.ok());
    ext = *r;
    uint64_t at = 0;
    for (auto& e : ext) {
      ASSERT_TRUE(WriteRange(p->get(), e, src.data() + at).ok());
      at += e.length;
    }
    ASSERT_TRUE((*p)->Sync().ok());
    EXPECT_EQ((*p)->Usage().used, src.size());
    EXPECT_EQ((*p)->Counters().bytes_written, src.size());
  }
  auto p = StoragePath::Open(o, "s/rank-0", false);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->uuid(), uuid);
  EXPECT_EQ((*p)->Usage().used, 0u);  // free space is derived by the store
  AlignedBuffer dst(src.size());
  uint64_t at = 0;
  for (auto& e : ext) {
    ASSERT_TRUE((*p)->MarkUsed(e).ok());
    ASSERT_TRUE(ReadRange(p->get(), e, dst.data() + at).ok());
    at += e.length;
  }
  EXPECT_EQ(0, std::memcmp(src.data(), dst.data(), src.size()));
}

TEST(StoragePathTest, CapacityExhaustionIsResourceExhaustedNamingPath) {
  TempDir dir;
  PathOptions o;
  o.root = dir.path();
  o.segment_bytes = 1 << 20;
  o.capacity = 2 << 20;
  auto p = StoragePath::Open(o, "s/rank-0", true);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE((*p)->Allocate(2 << 20).ok());
  auto r = (*p)->Allocate(4096);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find(dir.path()), std::string::npos);
}

TEST(StoragePathTest, MissingRootAndBadOptionsAreClearErrors) {
  PathOptions o;
  o.root = "/nonexistent/mlpo/path";
  auto p = StoragePath::Open(o, "s/rank-0", true);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find(o.root), std::string::npos);
  TempDir dir;
  o.root = dir.path();
  o.segment_bytes = 1000;
  EXPECT_EQ(StoragePath::Open(o, "x", true).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.segment_bytes = 1 << 20;
  EXPECT_EQ(StoragePath::Open(o, "never-made", false).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(StoragePathTest, InjectedEnospcOnWriteReportsPathAndErrno) {
  TempDir dir;
  PathOptions o;
  o.root = dir.path();
  o.segment_bytes = 1 << 20;
  FaultInjectionFileSystem fsys;
  fsys.FailWhile(FaultInjectionFileSystem::Op::kWrite, ENOSPC, dir.path());
  o.fs = &fsys;
  auto p = StoragePath::Open(o, "s/rank-0", true);
  ASSERT_TRUE(p.ok());
  auto r = (*p)->Allocate(4096);
  AlignedBuffer b(4096);
  auto s = WriteRange(p->get(), (*r)[0], b.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("seg-000000"), std::string::npos) << s;
}

// A short transfer (as the kernel may return) is carried on by the engine:
// the bytes read back are the bytes written.
TEST(StoragePathTest, ShortTransfersAreResumedAtTheAdvancedOffset) {
  TempDir dir;
  PathOptions o;
  o.root = dir.path();
  o.segment_bytes = 1 << 20;
  FaultInjectionFileSystem fsys;
  o.fs = &fsys;
  auto p = StoragePath::Open(o, "s/rank-0", true);
  ASSERT_TRUE(p.ok());
  auto r = (*p)->Allocate(256 << 10);
  ASSERT_TRUE(r.ok());
  AlignedBuffer w(256 << 10), back(256 << 10);
  FillRandom(w.data(), w.size(), 5);
  fsys.ShortenNext(FaultInjectionFileSystem::Op::kWrite, 12288);
  ASSERT_TRUE(WriteRange(p->get(), (*r)[0], w.data()).ok());
  fsys.ShortenNext(FaultInjectionFileSystem::Op::kRead, 4096);
  IoLatch latch;
  latch.Add(1);
  (*p)->Read((*r)[0], back.data(), [&](const absl::Status& s) { latch.Done(s); });
  ASSERT_TRUE(latch.Wait().ok());
  EXPECT_EQ(fsys.injected(), 2);
  EXPECT_EQ(std::memcmp(w.data(), back.data(), w.size()), 0);
}

}  // namespace
}  // namespace mlpo
