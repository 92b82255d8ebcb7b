// Power loss under the fault-injecting file system: a store commits (and
// tags, drops tags, collects garbage) while the power is cut at a random
// instant; the files then become what a reboot would find (every byte
// written since its file's last fdatasync forgotten, every entry created or
// renamed since its directory's last sync gone), and the store reopens on
// what survived (every other cut tears: part of the unsynced blocks of
// segment files persist). With durability "step" every acknowledged commit reads back
// bit-identical; with "tag" the last tag does; verify is clean and the
// allocator leaks nothing.
//
// A few cuts per durability in the default run; MLPO_CRASH_ITERATIONS=200
// (the slow label) for the long loop.
#include <random>
#include <tuple>
#include <thread>

#include "gtest/gtest.h"
#include "store/admin/gc.h"
#include "store/fs/fault_injection_fs.h"
#include "tests/store/store_test_util.h"

namespace mlpo {
namespace {

constexpr int kObjects = 4;

std::string Obj(int i) { return "obj-" + std::to_string(i); }

// (durability, DRAM tier on): with the tier and durability "tag", commits
// stay dirty in DRAM until a tag writes them back.
class PowerLossTest
    : public ::testing::TestWithParam<std::tuple<Durability, bool>> {};

TEST_P(PowerLossTest, AcknowledgedStateSurvivesEveryCut) {
  const bool step = std::get<0>(GetParam()) == Durability::kStep;
  const bool cached = std::get<1>(GetParam());
  TempDir dir;
  StoreOptions base = TestStoreOptions(dir, {0.6, 0.4});
  base.durability = std::get<0>(GetParam());
  if (cached) base.cache_percent = 50;
  {
    auto s = ObjectStore::Open(base);
    ASSERT_TRUE(s.ok()) << s.status();
    for (int i = 0; i < kObjects; ++i)
      ASSERT_TRUE((*s)->Declare(Obj(i), TestLayout(20000 + 9000 * i)).ok());
  }
  std::mt19937 rng(7 + static_cast<int>(step));
  std::map<std::string, uint64_t> acked;  // what must survive
  std::string acked_tag;                  // durability "tag": the last tag
  uint64_t next = 1;
  const int iterations = CrashIterations(4);
  int cuts_mid_commit = 0;
  uint64_t torn_blocks = 0;  // unsynced blocks that persisted
  uint64_t dirty_seen = 0;  // dirty versions in DRAM after commits
  for (int iter = 0; iter < iterations; ++iter) {
    FaultInjectionFileSystem fsys;
    // Every other cut tears what was in flight: part of the unsynced
    // blocks of segment files persist (torn extents).
    if (iter % 2 == 1) fsys.SetTornWrites(1000 + iter);
    StoreOptions o = base;
    o.fs = &fsys;
    {
      auto s = ObjectStore::Open(o);
      ASSERT_TRUE(s.ok()) << "iteration " << iter << ": " << s.status();
      // Cut the power from another thread at a random instant.
      std::thread cutter([&fsys, us = rng() % 40000] {
        std::this_thread::sleep_for(std::chrono::microseconds(us));
        fsys.CutPower();
      });
      std::map<std::string, uint64_t> committed = acked;
      for (uint64_t v = next; !fsys.power_cut(); ++v) {
        next = v + 1;
        for (int i = 0; i < kObjects && !fsys.power_cut(); ++i) {
          auto l = (*s)->Checkout(Obj(i)).get();
          if (!l.ok()) break;
          FillFor(l->get(), v);
          Lease lease = std::move(*l);  // handed over: it may stay in DRAM
          absl::Status st = (*s)->Commit(std::move(lease), v).get();
          if (!st.ok()) {
            ++cuts_mid_commit;
            break;
          }
          committed[Obj(i)] = v;
          dirty_seen += (*s)->cache_stats().dirty_entries;
          if (step) acked[Obj(i)] = v;  // acknowledged = durable
        }
        if (v % 5 == 0 && !fsys.power_cut()) {
          std::string t = "t" + std::to_string(v);
          if ((*s)->Tag(t).ok() && !step) {
            acked = committed;
            acked_tag = t;
          }
        }
        if (v % 9 == 0 && !fsys.power_cut()) {
          auto tags = (*s)->Tags();
          if (!tags.empty() && tags.begin()->first != acked_tag)
            (void)(*s)->DropTag(tags.begin()->first);
          (void)Gc(**s);
        }
      }
      cutter.join();
    }  // the store closes on a dead "disk"
    ASSERT_TRUE(fsys.RestoreToLastSync().ok());
    torn_blocks += fsys.torn_blocks();

    // Reboot: reopen on what survived, on the real file system.
    auto s = ObjectStore::Open(base);
    ASSERT_TRUE(s.ok()) << "iteration " << iter << ": " << s.status();
    if (!step && !acked_tag.empty()) {
      auto tags = (*s)->Tags();
      std::string have;
      for (auto& [t, objs] : tags) have += t + " ";
      ASSERT_TRUE(tags.count(acked_tag))
          << "iteration " << iter << ": lost tag " << acked_tag
          << "; the store has: " << have;
      ASSERT_TRUE((*s)->Restore(acked_tag).ok());
    }
    for (int i = 0; i < kObjects; ++i) {
      auto l = (*s)->Checkout(Obj(i)).get();
      ASSERT_TRUE(l.ok()) << "iteration " << iter << ": " << l.status();
      uint64_t want = acked.count(Obj(i)) ? acked[Obj(i)] : 0;
      if ((*l)->is_new()) {
        EXPECT_EQ(want, 0u) << Obj(i) << " lost its acknowledged version";
        continue;
      }
      if (step) {
        EXPECT_GE((*l)->step(), want) << Obj(i) << " went back";
      } else {
        EXPECT_EQ((*l)->step(), want) << Obj(i);
      }
      EXPECT_TRUE(Matches(**l, (*l)->step()))
          << Obj(i) << " version " << (*l)->step();
      acked[Obj(i)] = (*l)->step();
    }
    ExpectStoreVerifies(s->get());
    if (!step) {
      // Start the next round from a tag of what survived.
      acked_tag = "base" + std::to_string(iter);
      ASSERT_TRUE((*s)->Tag(acked_tag).ok());
    }
    if (::testing::Test::HasFailure()) break;
  }
  RecordProperty("cuts_mid_commit", cuts_mid_commit);
  RecordProperty("torn_blocks", static_cast<int>(torn_blocks));
  std::printf("power loss: %d cuts, %d mid-commit, %llu torn blocks kept\n",
              iterations, cuts_mid_commit,
              static_cast<unsigned long long>(torn_blocks));
  if (cached && !step) {
    EXPECT_GT(dirty_seen, 0u) << "write-back never held a dirty version";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Durability, PowerLossTest,
    ::testing::Combine(::testing::Values(Durability::kStep, Durability::kTag),
                       ::testing::Bool()),
    DurabilityAndTierName);

// Faults by kind through the same file system: each fails the operation
// with a clear error, and the last committed state stays readable.
TEST(FaultInjectionTest, EachInjectedFaultFailsCleanlyAndLosesNothing) {
  using Op = FaultInjectionFileSystem::Op;
  TempDir dir;
  StoreOptions base = TestStoreOptions(dir, {0.5, 0.5});
  {
    auto s = ObjectStore::Open(base);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Declare("a", TestLayout(300000)).ok());  // 3.6 MB
    auto l = (*s)->Checkout("a").get();
    FillFor(l->get(), 1);
    ASSERT_TRUE((*s)->Commit(*l, 1).get().ok());
  }
  struct Case {
    Op op;
    int err;
    absl::StatusCode code;
  };
  uint64_t v = 2;
  // kSync EIO on one path is degraded mode: the commit is written again on
  // the other path and succeeds.
  for (Case c : {Case{Op::kSync, EIO, absl::StatusCode::kOk},
                 Case{Op::kSync, ENOSPC, absl::StatusCode::kResourceExhausted},
                 Case{Op::kWriteFile, EIO, absl::StatusCode::kInternal},
                 Case{Op::kOpen, EACCES, absl::StatusCode::kPermissionDenied},
                 Case{Op::kPreallocate, ENOSPC, absl::StatusCode::kOk}}) {
    FaultInjectionFileSystem fsys;
    StoreOptions o = base;
    o.fs = &fsys;
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    auto l = (*s)->Checkout("a").get();
    ASSERT_TRUE(l.ok());
    uint64_t before = (*l)->step();
    FillFor(l->get(), v);
    fsys.FailNth(c.op, 1, c.err);
    absl::Status st = (*s)->Commit(*l, v).get();
    if (c.op == Op::kOpen || c.op == Op::kPreallocate) {
      // Only a commit that needs a new segment opens or preallocates:
      // force one with a larger object.
      ASSERT_TRUE(st.ok()) << st;
      ++v;
      ASSERT_TRUE((*s)->Declare("big" + std::to_string(v), TestLayout(900000)).ok());
      auto b = (*s)->Checkout("big" + std::to_string(v)).get();
      fsys.FailNth(c.op, 1, c.err);
      st = (*s)->Commit(*b, v).get();
      // ENOSPC on one path's new segment spills its share to the other
      // path: the commit succeeds. EACCES is an error.
      EXPECT_EQ(st.code(), c.code) << st;
    } else if (c.op == Op::kWriteFile) {
      // The index's WAL append fails: the head does not move.
      EXPECT_FALSE(st.ok());
    } else if (c.code == absl::StatusCode::kOk) {
      EXPECT_TRUE(st.ok()) << st;
    } else {
      EXPECT_EQ(st.code(), c.code) << st;
      EXPECT_NE(st.message().find("commit of a version"), std::string::npos)
          << st;
    }
    EXPECT_GE(fsys.injected(), 1);
    s->reset();
    auto r = ObjectStore::Open(base);
    ASSERT_TRUE(r.ok()) << r.status();
    auto back = (*r)->Checkout("a").get();
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_GE((*back)->step(), before);
    EXPECT_TRUE(Matches(**back, (*back)->step()));
    ExpectNoLeak(r->get());
    ++v;
  }
}

}  // namespace
}  // namespace mlpo
