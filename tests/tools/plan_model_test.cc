// The capacity planner's model against figures worked out by hand from the
// performance model (double precision), and its bad inputs.
#include "tools/plan/plan_model.h"

#include <cmath>

#include "gtest/gtest.h"

namespace mlpo {
namespace {

PlanInput TwoPaths(double u1, double u2) {
  PlanInput in;
  in.params = 1e9;
  in.ranks = 1;
  in.dram = uint64_t{64} << 30;  // plenty: the whole state is cached
  in.kernel_params_per_s = 1e12;  // never the bound here
  in.paths = {{"nvme", u1, u1, u1, 0}, {"pfs", u2, u2, u2, 0}};
  return in;
}

TEST(PlanModelTest, StepTimesFollowThePerformanceModel) {
  PlanInput in = TwoPaths(2e9, 0.8e9);
  in.dram = 0;  // no cache: every byte moves
  auto r = Plan(in);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->dram_fits);  // 0 bytes cannot hold the gradient stage
  EXPECT_EQ(r->state_bytes_per_rank, 12'000'000'000u);
  ASSERT_EQ(r->modes.size(), 3u);
  // baseline: 28 B/param over the first path.
  EXPECT_NEAR(r->modes[0].step_s, 28e9 / 2e9, 1e-9);
  // paper: the best integer is 4 (1/4 on the second path):
  // max(0.75 B / 2e9, 0.25 B / 0.8e9) with B = 24e9.
  EXPECT_EQ(r->paper_ratio, 4);
  EXPECT_NEAR(r->modes[1].step_s, std::max(0.75 * 24e9 / 2e9,
                                           0.25 * 24e9 / 0.8e9), 1e-9);
  // mlpo: f_k proportional to U_k, so B / (U1 + U2).
  EXPECT_NEAR(r->modes[2].step_s, 24e9 / 2.8e9, 1e-9);
  EXPECT_NEAR(r->modes[2].fractions[0], 2 / 2.8, 1e-12);
}

TEST(PlanModelTest, CacheAndTagDurabilitySaveReadsThenWrites) {
  PlanInput in = TwoPaths(2e9, 1e9);
  // DRAM for the stage (2 B/param), buffers and overhead, plus a quarter of
  // the state.
  const double params = in.params;
  const uint64_t stage = 2 * params, buffers = 4 * 8'000'000 * 12,
                 overhead = uint64_t{1} << 30;
  in.dram = stage + buffers + overhead + 3'000'000'000u;
  auto r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->dram_fits);
  EXPECT_NEAR(r->cache_fraction, 0.25, 1e-9);
  EXPECT_NEAR(r->modes[2].bytes_per_step, (24 - 12 * 0.25) * params, 1);
  in.durability_tag = true;
  r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->modes[2].bytes_per_step, (24 - 24 * 0.25) * params, 1);
  EXPECT_NEAR(r->modes[2].step_s, 18e9 / 3e9, 1e-9);
}

TEST(PlanModelTest, CapacityCutsAShareAndIsReported) {
  PlanInput in = TwoPaths(3e9, 1e9);
  // The fast path holds 6 GB: a head and a tag of 40% of the 12 GB state
  // would need 9.6 GB, so its share drops to what fits (3 GB of state).
  in.paths[0].capacity = 6'000'000'000u;
  auto r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->modes[2].fractions[0], 0.25, 1e-9);
  EXPECT_NEAR(r->modes[2].fractions[1], 0.75, 1e-9);
  EXPECT_TRUE(r->disk_fits[0]);
  EXPECT_NE(r->saturates_first.find("capacity of nvme"), std::string::npos)
      << r->saturates_first;
}

TEST(PlanModelTest, KernelBoundAndBadInputs) {
  PlanInput in = TwoPaths(100e9, 100e9);
  in.kernel_params_per_s = 1e8;
  auto r = Plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->modes[2].step_s, 10.0, 1e-9);
  EXPECT_NE(r->modes[2].limit.find("kernel"), std::string::npos);
  in.params = 0;
  EXPECT_FALSE(Plan(in).ok());
  in = TwoPaths(1, 1);
  in.paths.clear();
  EXPECT_FALSE(Plan(in).ok());
  EXPECT_TRUE(ParsePlanPath("nvme:3GB/2GB/4GB:2TB").ok());
  EXPECT_EQ(ParsePlanPath("nvme:3GB/2GB/4GB:2TB")->capacity,
            2'000'000'000'000u);
  for (const char* bad : {"nvme", "nvme:3GB/2GB", "nvme:3GB/2GB/0",
                          ":1G/1G/1G", "nvme:1G/1G/1G:lots", "a:b:c:d"}) {
    auto p = ParsePlanPath(bad);
    EXPECT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.status().message().find("--path"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace mlpo
