// Read-ahead (OptimizerConfig::read_ahead, UpdatePipeline::ReadAhead): as a step
// returns, the next step's first subgroups the DRAM tier does not hold are
// checked out. Results equal a run without it bit for bit; a read-ahead
// that read a version since replaced (a restore, a reset, an import) is
// not used; one whose read failed is read again by the step, so a fault
// between steps loses nothing.
#include <cerrno>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

#include "optimizer/optimizer.h"
#include "optimizer/optimizer_config.h"
#include "store/fs/fault_injection_fs.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

// 12000 parameters in two groups, subgroups of 2048: seven subgroups.
OptimizerOptions Options(const TempDir& dir, bool ahead, double cache_pct) {
  OptimizerOptions o = TestOptimizerOptions(dir, {9000, 3000}, 2048);
  o.write_behind = ahead;
  o.read_ahead = ahead ? -1 : 0;
  o.store.cache_percent = cache_pct;
  return o;
}

// (tier %, read_ahead option, subgroups it serves in the six steps after
// the first: at least, at most): seven subgroups, the last two of a step
// still being written as it returns.
class ReadAheadTest
    : public ::testing::TestWithParam<std::tuple<double, int, int, int>> {};

TEST_P(ReadAheadTest, EqualsARunWithoutItAndIsUsed) {
  auto [tier, count, lo, hi] = GetParam();
  TempDir a, b;
  OptimizerOptions o = Options(a, true, tier);
  o.read_ahead = count;
  auto on = Optimizer::Open(o);
  auto off = Optimizer::Open(Options(b, false, 0));
  ASSERT_TRUE(on.ok() && off.ok());
  int used = 0;
  for (uint64_t t = 1; t <= 7; ++t) {
    for (auto* o : {on->get(), off->get()}) {
      ASSERT_TRUE(StageAll(o, t).ok());
      auto r = o->Step(1024.0);
      ASSERT_TRUE(r.ok()) << r.status();
      if (o == on->get() && t > 1) used += r->read_ahead_used;
      if (o == off->get()) {
        EXPECT_EQ(r->read_ahead_used, 0);
      }
    }
    for (int g = 0; g < 2; ++g) {
      uint64_t n = (*on)->options().groups[g].numel;
      EXPECT_EQ(std::memcmp((*on)->Params(g), (*off)->Params(g), n * 2), 0);
    }
  }
  EXPECT_GE(used, lo);
  EXPECT_LE(used, hi);
  ExpectSameState(on->get(), off->get());
}

// The default (-1) reads 4 ahead of the five not being written; a count
// of 2 reads two. With a tier of about two subgroups, what it holds needs
// no read: fewer than four a step.
INSTANTIATE_TEST_SUITE_P(
    Tier, ReadAheadTest,
    ::testing::Values(std::make_tuple(0.0, -1, 24, 24),
                      std::make_tuple(0.0, 2, 12, 12),
                      std::make_tuple(34.0, -1, 12, 23)));

// A restore and a reset between steps replace what was read ahead: the
// next step reads the versions now current and equals a reference that
// never read ahead.
TEST(ReadAheadCases, ARestoreOrResetBetweenStepsIsNeverMissed) {
  TempDir a, b;
  auto on = Optimizer::Open(Options(a, true, 0));
  auto off = Optimizer::Open(Options(b, false, 0));
  ASSERT_TRUE(on.ok() && off.ok());
  for (uint64_t t = 1; t <= 2; ++t)
    for (auto* o : {on->get(), off->get()}) {
      ASSERT_TRUE(StageAll(o, t).ok());
      ASSERT_TRUE(o->Step(1024.0).ok());
      if (t == 1) {
        ASSERT_TRUE(o->Tag("one").ok());
      }
    }
  for (auto* o : {on->get(), off->get()}) {
    ASSERT_TRUE(o->Restore("one").ok());
    ASSERT_TRUE(StageAll(o, 9).ok());
    auto r = o->Step(1024.0);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->read_ahead_used, 0);  // given back by the restore
    EXPECT_EQ(r->step, 2u);
  }
  ExpectSameState(on->get(), off->get());
  for (auto* o : {on->get(), off->get()}) {
    ASSERT_TRUE(o->Reset().ok());  // a fresh run in the same store
    ASSERT_TRUE(StageAll(o, 5).ok());
    auto r = o->Step(1024.0);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->step, 1u);
  }
  ExpectSameState(on->get(), off->get());
}

// A loop that reads the state, takes a tag or adopts an edit between
// steps keeps its read-ahead (a read changes nothing; an edit's new
// version fails the version check and is read again): still bit for bit.
TEST(ReadAheadCases, ReadsTagsAndEditsBetweenStepsKeepIt) {
  TempDir a, b;
  auto on = Optimizer::Open(Options(a, true, 0));
  auto off = Optimizer::Open(Options(b, false, 0));
  ASSERT_TRUE(on.ok() && off.ok());
  int used = 0;
  for (uint64_t t = 1; t <= 5; ++t) {
    for (auto* o : {on->get(), off->get()}) {
      ASSERT_TRUE(StageAll(o, t).ok());
      auto r = o->Step(1024.0);
      ASSERT_TRUE(r.ok()) << r.status();
      if (o == on->get() && t > 1) used += r->read_ahead_used;
      std::vector<float> p(16), m(16), v(16);
      float* slots[] = {m.data(), v.data()};
      ASSERT_TRUE(o->ReadRange(0, 0, 16, p.data(), slots).ok());
      if (t == 3) {
        ASSERT_TRUE(o->Tag("three").ok());
      }
      if (t == 4) {
        ASSERT_TRUE(o->AdoptEdits({}).ok());
      }
    }
  }
  EXPECT_GT(used, 0);
  ExpectSameState(on->get(), off->get());
}

// Every read that completes from the moment a step returns until just
// before the next fails: whichever of its read-ahead reads the fault
// caught (a timing matter), the next step reads those subgroups itself
// and loses nothing.
TEST(ReadAheadCases, AFailedReadAheadIsReadAgainByTheStep) {
  TempDir a, b;
  FaultInjectionFileSystem fsys;
  OptimizerOptions o = Options(a, true, 0);
  o.store.fs = &fsys;
  auto on = Optimizer::Open(o);
  auto off = Optimizer::Open(Options(b, false, 0));
  ASSERT_TRUE(on.ok() && off.ok());
  for (uint64_t t = 1; t <= 5; ++t) {
    for (auto* opt : {on->get(), off->get()}) {
      ASSERT_TRUE(StageAll(opt, t).ok());
      auto r = opt->Step(1024.0);
      ASSERT_TRUE(r.ok()) << "step " << t << ": " << r.status();
      if (opt == on->get() && t % 2 == 1)
        fsys.FailWhile(FaultInjectionFileSystem::Op::kRead, EIO, a.path());
    }
    absl::SleepFor(absl::Milliseconds(50));
    fsys.ClearFaults();
  }
  ExpectSameState(on->get(), off->get());
}

// The config key (optimizer_config.h), read from a store config file.
absl::StatusOr<OptimizerConfig> ParseConfig(const std::string& line) {
  auto o = ParseStoreOptions(line + "\n[[path]]\nroot = \"x\"\n", "/tmp");
  if (!o.ok()) return o.status();
  return ParseOptimizerConfig(o->upper);
}

TEST(ReadAheadCases, TheStoreConfigKeyTakesABooleanOrACount) {
  auto off = ParseConfig("read_ahead = false");
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->read_ahead, 0);
  auto four = ParseConfig("read_ahead = 4");
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_EQ(four->read_ahead, 4);
  for (const char* bad : {"read_ahead = \"yes\"", "read_ahead = 65",
                          "read_ahead = -1"}) {
    auto r = ParseConfig(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("read_ahead"), std::string::npos);
  }
}

}  // namespace
}  // namespace mlpo
