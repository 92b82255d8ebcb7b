// Write-behind (OptimizerConfig::write_behind, UpdatePipeline::Settle): a step
// returns with its last commits in flight. Results equal a run without it
// bit for bit (every read settles first); a commit that fails is reported
// by the next call, naming the step, and the store keeps its last
// completed commits; a reopen after a close finds every step written.
#include <cerrno>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "optimizer/optimizer.h"
#include "optimizer/optimizer_config.h"
#include "store/fs/fault_injection_fs.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

OptimizerOptions Options(const TempDir& dir, bool behind) {
  OptimizerOptions o = TestOptimizerOptions(dir, {9000, 3000}, 2048);
  o.write_behind = behind;
  return o;
}

absl::Status StageStep(Optimizer* opt, uint64_t t) {
  for (int g = 0; g < 2; ++g) {
    uint64_t n = opt->options().groups[g].numel;
    std::vector<uint16_t> grad(n);
    for (uint64_t i = 0; i < n; ++i) grad[i] = GradValue(t, g, i);
    absl::Status st = opt->StageGrad(g, 0, grad.data(), DType::kBF16, n);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

TEST(WriteBehindTest, EqualsARunWithoutItBitForBit) {
  TempDir a, b;
  auto on = Optimizer::Open(Options(a, true));
  auto off = Optimizer::Open(Options(b, false));
  ASSERT_TRUE(on.ok() && off.ok());
  for (uint64_t t = 1; t <= 6; ++t) {
    for (auto* o : {on->get(), off->get()}) {
      ASSERT_TRUE(StageStep(o, t).ok());
      auto r = o->Step(1024.0);
      ASSERT_TRUE(r.ok()) << r.status();
    }
    for (int g = 0; g < 2; ++g) {  // parameters as the step returned them
      uint64_t n = (*on)->options().groups[g].numel;
      EXPECT_EQ(std::memcmp((*on)->Params(g), (*off)->Params(g), n * 2), 0);
    }
    if (t % 2 == 0) {  // a read of the state waits for the writes
      std::vector<float> p1, m1, v1, p2, m2, v2;
      ASSERT_TRUE((*on)->ReadState(0, &p1, &m1, &v1).ok());
      ASSERT_TRUE((*off)->ReadState(0, &p2, &m2, &v2).ok());
      EXPECT_EQ(p1, p2);
      EXPECT_EQ(m1, m2);
      EXPECT_EQ(v1, v2);
    }
    if (t == 3) {
      ASSERT_TRUE((*on)->Tag("t3").ok());
    }
  }
  on->reset();  // closes: the last step's writes land first
  auto again = Optimizer::Open(Options(a, true));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->step(), 6u);
  std::vector<float> p1, m1, v1, p2, m2, v2;
  ASSERT_TRUE((*again)->ReadState(1, &p1, &m1, &v1).ok());
  ASSERT_TRUE((*off)->ReadState(1, &p2, &m2, &v2).ok());
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(v1, v2);
  EXPECT_EQ((*again)->param_steps(), (*off)->param_steps());
}

// Every write to the paths fails after the step returned: the next call
// says which step's writes failed; once the disk works, a reopen finds the
// store at a completed state (the step before, or refused as interrupted
// until a tag is restored) and training goes on from the tag exactly.
TEST(WriteBehindTest, AFailedCommitIsReportedByTheNextCallNamingTheStep) {
  TempDir dir;
  FaultInjectionFileSystem fsys;
  OptimizerOptions o = Options(dir, true);
  o.store.fs = &fsys;
  {
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok()) << opt.status();
    for (uint64_t t = 1; t <= 2; ++t) {
      ASSERT_TRUE(StageStep(opt->get(), t).ok());
      ASSERT_TRUE((*opt)->Step(1024.0).ok());
    }
    ASSERT_TRUE((*opt)->Tag("good").ok());
    ASSERT_TRUE(StageStep(opt->get(), 3).ok());
    fsys.FailWhile(FaultInjectionFileSystem::Op::kWrite, EIO, dir.path());
    auto r = (*opt)->Step(1024.0);
    // The step's last commits were written behind: it may report ok (the
    // failure then comes with the next call) or, when an earlier commit of
    // it failed already, its own error.
    absl::Status next = r.ok() ? (*opt)->Settle() : r.status();
    ASSERT_FALSE(next.ok());
    EXPECT_NE(next.message().find("step 3"), std::string::npos) << next;
    fsys.ClearFaults();
  }
  OptimizerOptions ro = Options(dir, true);
  ro.restore_tag = "good";
  auto opt = Optimizer::Open(ro);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ((*opt)->step(), 2u);
  TempDir ref_dir;
  auto ref = Optimizer::Open(Options(ref_dir, false));
  ASSERT_TRUE(ref.ok());
  for (uint64_t t = 1; t <= 4; ++t) {
    if (t >= 3) {
      ASSERT_TRUE(StageStep(opt->get(), t).ok());
      ASSERT_TRUE((*opt)->Step(1024.0).ok());
    }
    ASSERT_TRUE(StageStep(ref->get(), t).ok());
    ASSERT_TRUE((*ref)->Step(1024.0).ok());
  }
  std::vector<float> p1, m1, v1, p2, m2, v2;
  ASSERT_TRUE((*opt)->ReadState(0, &p1, &m1, &v1).ok());
  ASSERT_TRUE((*ref)->ReadState(0, &p2, &m2, &v2).ok());
  EXPECT_EQ(p1, p2);
  EXPECT_EQ(m1, m2);
}

// A store config turns it off; the key is checked like every other.
TEST(WriteBehindTest, TheStoreConfigKeyTurnsItOff) {
  auto o = ParseStoreOptions(
      "write_behind = false\n[[path]]\nroot = \"x\"\n", "/tmp");
  ASSERT_TRUE(o.ok()) << o.status();
  auto c = ParseOptimizerConfig(o->upper);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->write_behind);
  auto text = ParseStoreOptions(
      "write_behind = \"no\"\n[[path]]\nroot = \"x\"\n", "/tmp");
  ASSERT_TRUE(text.ok()) << text.status();  // (the store leaves it alone)
  auto bad = ParseOptimizerConfig(text->upper);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("write_behind"), std::string::npos);
}

}  // namespace
}  // namespace mlpo
