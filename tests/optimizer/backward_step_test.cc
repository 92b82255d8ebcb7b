// Update during backward (Optimizer::BeginStep / GradReady / FinishStep):
// gradients handed in parameter by parameter, in a random order, while the
// step runs on its own thread, give the plain Step's parameters and state
// bit for bit; a parameter never marked ready is skipped as Step skips one
// without a gradient; what cannot be exact is refused; a non-finite
// gradient stops the step with an error naming the parameter.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "optimizer/optimizer.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

// Two groups of several parameters each, cut into subgroups of 1500 (some
// parameters span two subgroups, some subgroups hold several).
OptimizerOptions Options(const TempDir& dir) {
  OptimizerOptions o = TestOptimizerOptions(dir, {9000, 3000}, 1500);
  o.groups[0].params = {1000, 2500, 500, 4000, 1000};
  o.groups[1].params = {1200, 1800};
  return o;
}

struct ParamRef {
  int group;
  uint64_t offset, n;
};
std::vector<ParamRef> ParamsOf(const OptimizerOptions& o) {
  std::vector<ParamRef> out;
  for (int g = 0; g < static_cast<int>(o.groups.size()); ++g) {
    uint64_t at = 0;
    for (uint64_t n : o.groups[g].params) {
      out.push_back({g, at, n});
      at += n;
    }
  }
  return out;
}

std::vector<uint16_t> Grad(uint64_t t, const ParamRef& p, float poison) {
  std::vector<uint16_t> g(p.n);
  for (uint64_t i = 0; i < p.n; ++i) g[i] = GradValue(t, p.group, p.offset + i);
  if (poison != 0) g[p.n / 2] = FloatToBF16(poison);
  return g;
}

TEST(BackwardStepTest, EqualsThePlainStepWhateverOrderGradientsCome) {
  TempDir a, b;
  auto ours = Optimizer::Open(Options(a));
  auto plain = Optimizer::Open(Options(b));
  ASSERT_TRUE(ours.ok() && plain.ok());
  const std::vector<ParamRef> params = ParamsOf((*ours)->options());
  std::mt19937 rng(7);
  for (uint64_t t = 1; t <= 6; ++t) {
    // Step 3 leaves parameter 2 without a gradient; step 5 parameter 6.
    int skip = t == 3 ? 2 : t == 5 ? 6 : -1;
    std::vector<int> order(params.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int>(k);
    std::shuffle(order.begin(), order.end(), rng);
    ASSERT_TRUE((*ours)->BeginStep(1024.0).ok());
    std::vector<std::vector<uint16_t>> kept;
    for (int k : order) {
      if (k == skip) continue;
      kept.push_back(Grad(t, params[k], 0));
      ASSERT_TRUE((*ours)
                      ->BorrowGrad(params[k].group, params[k].offset,
                                   kept.back().data(), DType::kBF16,
                                   params[k].n)
                      .ok());
      ASSERT_TRUE((*ours)->GradReady(k).ok());
    }
    EXPECT_TRUE((*ours)->stepping_in_backward());
    auto r = (*ours)->FinishStep();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->step, t);
    for (size_t k = 0; k < params.size(); ++k) {
      if (static_cast<int>(k) == skip) continue;
      std::vector<uint16_t> g = Grad(t, params[k], 0);
      ASSERT_TRUE((*plain)
                      ->StageGrad(params[k].group, params[k].offset, g.data(),
                                  DType::kBF16, params[k].n)
                      .ok());
    }
    auto q = (*plain)->Step(1024.0);
    ASSERT_TRUE(q.ok()) << q.status();
    for (int g = 0; g < 2; ++g)
      EXPECT_EQ(std::memcmp((*ours)->Params(g), (*plain)->Params(g),
                            (*ours)->options().groups[g].numel * 2),
                0);
  }
  ExpectSameState(ours->get(), plain->get());
}

TEST(BackwardStepTest, RefusesWhatCannotBeExact) {
  TempDir a;
  OptimizerOptions o = Options(a);
  o.max_grad_norm = 1.0;
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok());
  absl::Status st = (*opt)->BeginStep(1.0);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("global norm"), std::string::npos) << st;
  TempDir b;
  auto plain = Optimizer::Open(Options(b));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->GradReady(0).ok());  // no step running
  EXPECT_FALSE((*plain)->FinishStep().ok());
  ASSERT_TRUE((*plain)->BeginStep(1.0).ok());
  EXPECT_EQ((*plain)->BeginStep(1.0).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*plain)->GradReady(99).code(), absl::StatusCode::kInvalidArgument);
  // Ready without its gradient staged; then twice.
  EXPECT_EQ((*plain)->GradReady(0).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<ParamRef> ps = ParamsOf((*plain)->options());
  std::vector<uint16_t> g = Grad(1, ps[0], 0);
  ASSERT_TRUE((*plain)->StageGrad(0, 0, g.data(), DType::kBF16, ps[0].n).ok());
  ASSERT_TRUE((*plain)->GradReady(0).ok());
  absl::Status twice = (*plain)->GradReady(0);
  EXPECT_NE(twice.message().find("twice"), std::string::npos) << twice;
  auto r = (*plain)->FinishStep();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*plain)->param_steps()[0], 1u);
  EXPECT_EQ((*plain)->param_steps()[1], 0u);
}

TEST(BackwardStepTest, ANonFiniteGradientStopsTheStepNamingTheParameter) {
  TempDir a;
  auto opt = Optimizer::Open(Options(a));
  ASSERT_TRUE(opt.ok());
  std::vector<ParamRef> ps = ParamsOf((*opt)->options());
  ASSERT_TRUE((*opt)->Tag("before").ok());
  ASSERT_TRUE((*opt)->BeginStep(1.0).ok());
  std::vector<std::vector<uint16_t>> kept;
  for (size_t k = 0; k < ps.size(); ++k) {
    kept.push_back(Grad(1, ps[k], k == 3 ? INFINITY : 0));
    ASSERT_TRUE((*opt)->BorrowGrad(ps[k].group, ps[k].offset,
                                   kept.back().data(), DType::kBF16, ps[k].n)
                    .ok());
    ASSERT_TRUE((*opt)->GradReady(static_cast<int>(k)).ok());
  }
  auto r = (*opt)->FinishStep();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("parameter 3"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("non-finite"), std::string::npos);
  EXPECT_EQ((*opt)->step(), 0u);
  ASSERT_TRUE((*opt)->Restore("before").ok());  // and on it goes
  ASSERT_TRUE((*opt)->BeginStep(1.0).ok());
  auto again = (*opt)->FinishStep();  // no gradient at all
  ASSERT_TRUE(again.ok()) << again.status();
}

}  // namespace
}  // namespace mlpo
