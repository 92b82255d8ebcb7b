// A failed index write poisons the index, not the process (issue 17,
// reproduction 5: a full disk under the index; the first failure was a
// clean RESOURCE_EXHAUSTED, the next step died on a RocksDB assertion).
// Every later write returns the first error until the store is reopened;
// the last committed state stays intact and reopens.
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "store/fs/fault_injection_fs.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

// After the first failure, every write returns it -- commits, tags,
// attributes -- with no abort, also once the fault is gone.
void ExpectPoisoned(ObjectStore* s, absl::StatusCode code) {
  for (uint64_t step = 3; step < 6; ++step) {
    absl::Status st = CommitFilled(s, "a", step);
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find("until the store is reopened"),
              std::string::npos)
        << st;
  }
  EXPECT_EQ(s->Tag("after").code(), code);
  EXPECT_EQ(s->SetAttribute("k", "v").code(), code);
}

// The store reopens with the last committed state: step 1, or step 2 when
// the failed index write had reached the disk after all (a WAL record whose
// sync failed) -- either way exactly that step's bytes, never a mix, and
// the tag reads back.
void ExpectIntact(const StoreOptions& o) {
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok()) << s.status();
  auto l = (*s)->Checkout("a").get();
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_TRUE((*l)->step() == 1 || (*l)->step() == 2) << (*l)->step();
  EXPECT_TRUE(Matches(**l, (*l)->step()));
  ASSERT_EQ((*s)->Tags().count("first"), 1u);
  auto v = (*s)->ReadVersion("a", (*s)->Tags()["first"]["a"]);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(Matches(**v, 1));
  ExpectStoreVerifies(s->get());
  // And it takes writes again.
  EXPECT_TRUE(CommitFilled(s->get(), "a", 6).ok());
}

TEST(IndexFailureTest, AnInjectedIndexFailurePoisonsTheIndexNotTheProcess) {
  for (FaultInjectionFileSystem::Op op :
       {FaultInjectionFileSystem::Op::kWriteFile,
        FaultInjectionFileSystem::Op::kSync}) {
    TempDir dir;
    FaultInjectionFileSystem fsys;
    StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
    o.fs = &fsys;
    {
      auto s = ObjectStore::Open(o);
      ASSERT_TRUE(s.ok()) << s.status();
      ASSERT_TRUE((*s)->Declare("a", TestLayout(20000)).ok());
      ASSERT_TRUE(CommitFilled(s->get(), "a", 1).ok());
      ASSERT_TRUE((*s)->Tag("first").ok());
      fsys.FailWhile(op, ENOSPC, (*s)->options().meta_dir);
      absl::Status st = CommitFilled(s->get(), "a", 2);
      ASSERT_FALSE(st.ok());
      EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
      fsys.ClearFaults();
      ExpectPoisoned(s->get(), st.code());
    }  // closes without aborting
    StoreOptions plain = o;
    plain.fs = nullptr;
    ExpectIntact(plain);
  }
}

// The real thing: the index on a small tmpfs that fills up.
TEST(IndexFailureTest, AFullFileSystemUnderTheIndexPoisonsItCleanly) {
  TempDir dir;
  std::string mnt = dir.Sub("meta-fs");
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=4m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "); the fault-injection case covers the logic";
  struct Unmount {
    std::string m;
    ~Unmount() { ::umount2(m.c_str(), MNT_DETACH); }
  } unmount{mnt};
  StoreOptions o = TestStoreOptions(dir, {0.5, 0.5});
  o.meta_dir = mnt + "/meta";
  absl::StatusCode code = absl::StatusCode::kOk;
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE((*s)->Declare("a", TestLayout(20000)).ok());
    ASSERT_TRUE(CommitFilled(s->get(), "a", 1).ok());
    ASSERT_TRUE((*s)->Tag("first").ok());
    // Fill the file system but for a little.
    {
      std::ofstream filler(mnt + "/filler", std::ios::binary);
      std::string mb(1 << 20, 'x');
      while (filler.write(mb.data(), mb.size())) {
      }
    }
    // Attributes go into the index: write until it is full.
    std::string big(256 << 10, 'v');
    absl::Status st;
    for (int i = 0; i < 64 && st.ok(); ++i)
      st = (*s)->SetAttribute("fill" + std::to_string(i), big);
    ASSERT_FALSE(st.ok()) << "the index never filled up";
    code = st.code();
    EXPECT_EQ(code, absl::StatusCode::kResourceExhausted) << st;
    std::filesystem::remove(mnt + "/filler");  // room again: still poisoned
    ExpectPoisoned(s->get(), code);
  }
  ExpectIntact(o);
}

}  // namespace
}  // namespace mlpo
