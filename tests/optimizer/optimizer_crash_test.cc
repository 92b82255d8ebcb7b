// SIGKILL a child in the middle of optimizer steps; reopening with the last
// tag restored and re-running the same steps gives state bit-identical to an
// uninterrupted run.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>

#include "gtest/gtest.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

constexpr uint64_t kTagStep = 2;
constexpr uint64_t kFinalStep = 6;

[[noreturn]] void ChildSteps(const OptimizerOptions& o, int ready_fd) {
  OptimizerOptions co = o;
  co.restore_tag = "t2";
  auto opt = Optimizer::Open(co);
  if (!opt.ok()) _exit(2);
  char c = 'r';
  if (write(ready_fd, &c, 1) != 1) _exit(3);
  for (uint64_t t = kTagStep + 1;; ++t) {
    if (!StageAll(opt->get(), t).ok()) _exit(4);
    if (!(*opt)->Step(1024.0).ok()) _exit(5);
  }
}

TEST(OptimizerCrashTest, RestoreLastTagAndRerunIsBitIdentical) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {60000, 25000}, 10000);
  o.pipeline.threads = 1;
  {
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok()) << opt.status();
    for (uint64_t t = 1; t <= kTagStep; ++t) {
      ASSERT_TRUE(StageAll(opt->get(), t).ok());
      ASSERT_TRUE((*opt)->Step(1024.0).ok());
    }
    ASSERT_TRUE((*opt)->Tag("t2").ok());
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
  ro.restore_tag = "t2";
  auto opt = Optimizer::Open(ro);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ((*opt)->step(), kTagStep);
  for (uint64_t t = kTagStep + 1; t <= kFinalStep; ++t) {
    ASSERT_TRUE(StageAll(opt->get(), t).ok());
    ASSERT_TRUE((*opt)->Step(1024.0).ok());
  }
  // The uninterrupted run, in a fresh store.
  TempDir dir2;
  OptimizerOptions u = TestOptimizerOptions(dir2, {60000, 25000}, 10000);
  auto clean = Optimizer::Open(u);
  ASSERT_TRUE(clean.ok());
  for (uint64_t t = 1; t <= kFinalStep; ++t) {
    ASSERT_TRUE(StageAll(clean->get(), t).ok());
    ASSERT_TRUE((*clean)->Step(1024.0).ok());
  }
  for (int g = 0; g < 2; ++g) {
    std::vector<float> p1, m1, v1, p2, m2, v2;
    ASSERT_TRUE((*opt)->ReadState(g, &p1, &m1, &v1).ok());
    ASSERT_TRUE((*clean)->ReadState(g, &p2, &m2, &v2).ok());
    EXPECT_EQ(0, std::memcmp(p1.data(), p2.data(), p1.size() * 4)) << g;
    EXPECT_EQ(0, std::memcmp(m1.data(), m2.data(), m1.size() * 4)) << g;
    EXPECT_EQ(0, std::memcmp(v1.data(), v2.data(), v1.size() * 4)) << g;
  }
  RecordProperty("mixed_state_refusals", mixed_seen);
}

}  // namespace
}  // namespace mlpo
