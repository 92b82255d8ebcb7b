// SIGKILL a child in the middle of optimizer steps that takes a tag every two
// steps; reopening with the newest tag restored and re-running the steps
// gives state bit-identical to an uninterrupted run. With both durabilities,
// and with the DRAM tier on (durability "tag": versions dirty in DRAM are
// lost with the process; the tag brings the state back); and once in each
// compact state format (with the tier and durability "tag"); and with the
// update run during backward (BeginStep / GradReady / FinishStep).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>
#include <string>
#include <tuple>

#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "store/admin/verify.h"
#include "store/fs/fault_injection_fs.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

constexpr uint64_t kTagStep = 2;
constexpr uint64_t kFinalStep = 12;

std::string TagFor(uint64_t t) {
  std::string n = std::to_string(t);
  return "t" + std::string(4 - n.size(), '0') + n;
}

// The newest tag of the store (tags are t<step>, zero-padded).
std::string NewestTag(const OptimizerOptions& o) {
  StoreOptions so = o.store;
  so.read_only = true;
  auto s = ObjectStore::Open(so);
  if (!s.ok()) return "";
  auto tags = (*s)->Tags();
  return tags.empty() ? "" : tags.rbegin()->first;
}

// Steps `opt` on to kFinalStep; its state must then equal, bit for bit,
// that of the same steps run without interruption in a fresh store.
void RunToTheEndLikeAnUninterruptedRun(Optimizer* opt) {
  for (uint64_t t = opt->step() + 1; t <= kFinalStep; ++t) {
    ASSERT_TRUE(StageAll(opt, t).ok());
    ASSERT_TRUE(opt->Step(1024.0).ok());
  }
  TempDir dir2;
  OptimizerOptions u = TestOptimizerOptions(dir2, {60000, 25000}, 10000);
  u.state_format = opt->state_format();
  auto clean = Optimizer::Open(u);
  ASSERT_TRUE(clean.ok());
  for (uint64_t t = 1; t <= kFinalStep; ++t) {
    ASSERT_TRUE(StageAll(clean->get(), t).ok());
    ASSERT_TRUE((*clean)->Step(1024.0).ok());
  }
  for (int g = 0; g < 2; ++g) {
    std::vector<float> p1, m1, v1, p2, m2, v2;
    ASSERT_TRUE(opt->ReadState(g, &p1, &m1, &v1).ok());
    ASSERT_TRUE((*clean)->ReadState(g, &p2, &m2, &v2).ok());
    EXPECT_EQ(0, std::memcmp(p1.data(), p2.data(), p1.size() * 4)) << g;
    EXPECT_EQ(0, std::memcmp(m1.data(), m2.data(), m1.size() * 4)) << g;
    EXPECT_EQ(0, std::memcmp(v1.data(), v2.data(), v1.size() * 4)) << g;
  }
}

// Step t, plain or as update_in_backward hands it in: the step started
// first, each parameter's gradient staged and marked ready while it runs.
bool g_in_backward = false;  // (set by the test for the forked child too)
absl::Status StepOnce(Optimizer* opt, uint64_t t) {
  if (!g_in_backward) {
    absl::Status st = StageAll(opt, t);
    return st.ok() ? opt->Step(1024.0).status() : st;
  }
  absl::Status st = opt->BeginStep(1024.0);
  if (!st.ok()) return st;
  st = StageAll(opt, t);
  for (int k = 0; st.ok() && k < static_cast<int>(opt->num_params()); ++k)
    st = opt->GradReady(k);
  absl::Status done = opt->FinishStep().status();
  return st.ok() ? done : st;
}

[[noreturn]] void ChildSteps(const OptimizerOptions& o, int ready_fd) {
  OptimizerOptions co = o;
  co.restore_tag = NewestTag(o);
  auto opt = Optimizer::Open(co);
  if (!opt.ok()) _exit(2);
  char c = 'r';
  if (write(ready_fd, &c, 1) != 1) _exit(3);
  for (uint64_t t = (*opt)->step() + 1;; ++t) {
    if (!StepOnce(opt->get(), t).ok()) _exit(5);
    if (t % 2 == 0 && t < kFinalStep && !(*opt)->Tag(TagFor(t)).ok()) _exit(6);
    if (t >= kFinalStep) {
      // Done before the kill came: stay alive to be killed.
      for (;;) pause();
    }
  }
}

// (durability, DRAM tier on, state format, update in backward)
using CrashParam = std::tuple<Durability, bool, StateFormat, bool>;
class OptimizerCrashTest : public ::testing::TestWithParam<CrashParam> {
 protected:
  void SetUp() override { g_in_backward = std::get<3>(GetParam()); }
  void TearDown() override { g_in_backward = false; }
  OptimizerOptions Options(const TempDir& dir) const {
    OptimizerOptions o = TestOptimizerOptions(dir, {60000, 25000}, 10000);
    o.pipeline.threads = 1;
    o.store.durability = std::get<0>(GetParam());
    if (std::get<1>(GetParam())) o.store.cache_percent = 40;
    o.state_format = std::get<2>(GetParam());
    return o;
  }
};

TEST_P(OptimizerCrashTest, RestoreNewestTagAndRerunIsBitIdentical) {
  TempDir dir;
  OptimizerOptions o = Options(dir);
  {
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok()) << opt.status();
    for (uint64_t t = 1; t <= kTagStep; ++t) {
      ASSERT_TRUE(StageAll(opt->get(), t).ok());
      ASSERT_TRUE((*opt)->Step(1024.0).ok());
    }
    ASSERT_TRUE((*opt)->Tag(TagFor(kTagStep)).ok());
  }
  std::mt19937 rng(3);
  int mixed_seen = 0;
  for (int iter = 0; iter < CrashIterations(8); ++iter) {
    ASSERT_TRUE(RunAndKill([&](int ready) { ChildSteps(o, ready); },
                           1000 * (2 + rng() % 40)))
        << "the child failed or exited before it was killed";
    // Without restoring, a store cut mid-step is refused with advice.
    auto plain = Optimizer::Open(o);
    if (!plain.ok()) {
      EXPECT_EQ(plain.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(plain.status().message().find("restore a tag"),
                std::string::npos);
      ++mixed_seen;
    }
  }
  OptimizerOptions ro = o;
  ro.restore_tag = NewestTag(o);
  ASSERT_FALSE(ro.restore_tag.empty());
  auto opt = Optimizer::Open(ro);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_GE((*opt)->step(), kTagStep);
  RecordProperty("newest_tag", ro.restore_tag);
  {
    // Every checksum holds and no space leaked, after all the kills.
    auto v = Verify(*(*opt)->store());
    ASSERT_TRUE(v.ok());
    EXPECT_TRUE(v->bad.empty());
    EXPECT_TRUE(CheckExtentMap(*(*opt)->store()).empty());
    for (auto& ps : (*opt)->store()->Stats().paths)
      EXPECT_EQ(ps.usage.used, ps.referenced_bytes + ps.unreferenced_bytes);
  }
  RunToTheEndLikeAnUninterruptedRun(opt->get());
  RecordProperty("mixed_state_refusals", mixed_seen);
}

// The same with the power cut instead of a SIGKILL: steps (and a tag every
// two steps) run on the fault-injecting file system, the power goes at a
// random instant, the files become what a reboot finds, and the optimizer
// restores the newest tag and reruns to the same final state as a run
// without cuts.
TEST_P(OptimizerCrashTest, PowerLossDuringStepsRestoresTheNewestTag) {
  TempDir dir;
  OptimizerOptions o = Options(dir);
  {
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok()) << opt.status();
    for (uint64_t t = 1; t <= kTagStep; ++t) {
      ASSERT_TRUE(StageAll(opt->get(), t).ok());
      ASSERT_TRUE((*opt)->Step(1024.0).ok());
    }
    ASSERT_TRUE((*opt)->Tag(TagFor(kTagStep)).ok());
  }
  std::mt19937 rng(11);
  int cuts = 0;
  uint64_t torn = 0;
  for (int iter = 0; iter < CrashIterations(3); ++iter) {
    FaultInjectionFileSystem fsys;
    if (iter % 2 == 1) fsys.SetTornWrites(77 + iter);  // torn extents too
    OptimizerOptions co = o;
    co.store.fs = &fsys;
    co.restore_tag = NewestTag(o);
    {
      auto opt = Optimizer::Open(co);
      ASSERT_TRUE(opt.ok()) << "iteration " << iter << ": " << opt.status();
      std::thread cutter([&fsys, us = 1000 + rng() % 30000] {
        std::this_thread::sleep_for(std::chrono::microseconds(us));
        fsys.CutPower();
      });
      bool cut_mid_run = false;
      for (uint64_t t = (*opt)->step() + 1; t < kFinalStep; ++t) {
        if (!StepOnce(opt->get(), t).ok() ||
            (t % 2 == 0 && !(*opt)->Tag(TagFor(t)).ok())) {
          cut_mid_run = true;
          break;
        }
      }
      cutter.join();
      cuts += cut_mid_run;
    }  // closes on a dead disk
    ASSERT_TRUE(fsys.RestoreToLastSync().ok());
    torn += fsys.torn_blocks();
  }
  OptimizerOptions ro = o;
  ro.restore_tag = NewestTag(o);
  ASSERT_FALSE(ro.restore_tag.empty());
  auto opt = Optimizer::Open(ro);
  ASSERT_TRUE(opt.ok()) << opt.status();
  auto v = Verify(*(*opt)->store());
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->bad.empty());
  EXPECT_TRUE(CheckExtentMap(*(*opt)->store()).empty());
  RunToTheEndLikeAnUninterruptedRun(opt->get());
  RecordProperty("power_cuts_mid_run", cuts);
  RecordProperty("torn_blocks", static_cast<int>(torn));
  if (CrashIterations(3) >= 20) {
    EXPECT_GT(cuts, 0) << "the power never went while steps ran";
  }
}

std::string CrashName(const ::testing::TestParamInfo<CrashParam>& info) {
  std::string n = DurabilityAndTierName(
      ::testing::TestParamInfo<std::tuple<Durability, bool>>(
          {std::get<0>(info.param), std::get<1>(info.param)}, info.index));
  StateFormat f = std::get<2>(info.param);
  if (f != StateFormat::kF32)
    n += "_" + StateFormatTestName(
                   ::testing::TestParamInfo<StateFormat>(f, info.index));
  if (std::get<3>(info.param)) n += "_InBackward";
  return n;
}

INSTANTIATE_TEST_SUITE_P(
    Kills, OptimizerCrashTest,
    ::testing::Combine(::testing::Values(Durability::kStep, Durability::kTag),
                       ::testing::Bool(), ::testing::Values(StateFormat::kF32),
                       ::testing::Values(false)),
    CrashName);
INSTANTIATE_TEST_SUITE_P(
    InBackwardKills, OptimizerCrashTest,
    ::testing::Values(
        std::make_tuple(Durability::kStep, false, StateFormat::kF32, true),
        std::make_tuple(Durability::kTag, true, StateFormat::kInt8Moments,
                        true)),
    CrashName);
INSTANTIATE_TEST_SUITE_P(
    CompactKills, OptimizerCrashTest,
    ::testing::Combine(::testing::Values(Durability::kTag),
                       ::testing::Values(true),
                       ::testing::Values(StateFormat::kBF16Moments,
                                         StateFormat::kInt8Moments),
                       ::testing::Values(false)),
    CrashName);

}  // namespace
}  // namespace mlpo
