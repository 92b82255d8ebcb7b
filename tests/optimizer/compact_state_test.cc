// The Optimizer over a store in each state format: steps against a
// double-precision AdamW loop (within what the format rounds), skipped
// parameters bit-identical, tags and reopens exact, the format fixed at
// creation, imports rounded on the way in and bad ones refused.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "optimizer/optimizer.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

constexpr double kLr = 1e-2, kB1 = 0.9, kB2 = 0.95, kEps = 1e-8, kWd = 0.1;
// Parameters cut by subgroups of 1500 and by int8's blocks of 256.
const std::vector<uint64_t> kSizes = {700, 300, 1, 1999};

OptimizerOptions Options(const TempDir& dir, StateFormat f) {
  uint64_t n = 0;
  for (uint64_t s : kSizes) n += s;
  OptimizerOptions o = TestOptimizerOptions(dir, {n}, 1500);
  o.groups[0].params = kSizes;
  o.groups[0].hyper = RuleHyper{kLr, kB1, kB2, kEps, kWd, AdamMode::kAdamW};
  o.grad_dtype = DType::kF32;
  o.state_format = f;
  return o;
}

// torch.optim.AdamW in double with this file's hyperparameters.
struct Ref : DoubleAdamW {
  Ref() : DoubleAdamW(kSizes, kLr, kB1, kB2, kEps, kWd) {}
};

struct State {
  std::vector<float> p, m, v;
  bool operator==(const State& o) const {
    return p == o.p && m == o.m && v == o.v;
  }
};
State Read(Optimizer* opt) {
  State s;
  EXPECT_TRUE(opt->ReadState(0, &s.p, &s.m, &s.v).ok());
  return s;
}

class CompactStateTest : public ::testing::TestWithParam<StateFormat> {};

TEST_P(CompactStateTest, StepsFollowAdamWithinTheFormatAndSkipExactly) {
  TempDir dir;
  auto opt = Optimizer::Open(Options(dir, GetParam()));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ((*opt)->state_format(), GetParam());
  Ref ref;
  // The parameter a step updates with its own count; the rest are frozen.
  std::vector<std::vector<bool>> plan = {{1, 1, 1, 1}, {1, 0, 1, 1},
                                         {0, 1, 1, 0}, {1, 1, 0, 1},
                                         {1, 0, 1, 1}, {1, 1, 1, 1}};
  // How far p may drift from fp64 per step, in units of lr: the update's
  // m / sqrt(v) carries the format's rounding.
  double per_step = GetParam() == StateFormat::kF32           ? 1e-4
                    : GetParam() == StateFormat::kBF16Moments ? 0.02
                                                              : 0.15;
  for (uint64_t t = 1; t <= plan.size(); ++t) {
    std::vector<float> g = UnscaledGrads(t, ref.p.size());
    State before = Read(opt->get());
    for (size_t k = 0; k < kSizes.size(); ++k) {
      if (!plan[t - 1][k]) continue;
      ASSERT_TRUE((*opt)->BorrowGrad(0, ref.bounds[k], g.data() + ref.bounds[k],
                                     DType::kF32, kSizes[k]).ok());
    }
    auto r = (*opt)->Step();
    ASSERT_TRUE(r.ok()) << r.status();
    ref.Step(g, plan[t - 1]);
    State after = Read(opt->get());
    for (size_t k = 0; k < kSizes.size(); ++k) {
      for (uint64_t i = ref.bounds[k]; i < ref.bounds[k + 1]; ++i) {
        if (!plan[t - 1][k]) {
          ASSERT_TRUE(after.p[i] == before.p[i] && after.m[i] == before.m[i] &&
                      after.v[i] == before.v[i])
              << "frozen parameter " << k << " moved at step " << t;
          continue;
        }
        ASSERT_NEAR(after.p[i], ref.p[i], per_step * kLr * ref.steps[k] + 1e-6)
            << "p[" << i << "] step " << t;
      }
    }
  }
  // Tag, step on, restore: the tagged state exactly; and after a reopen.
  State tagged = Read(opt->get());
  ASSERT_TRUE((*opt)->Tag("t6").ok());
  std::vector<float> g = UnscaledGrads(7, ref.p.size());
  ASSERT_TRUE((*opt)->BorrowGrad(0, 0, g.data(), DType::kF32, g.size()).ok());
  ASSERT_TRUE((*opt)->Step().ok());
  EXPECT_FALSE(Read(opt->get()) == tagged);
  ASSERT_TRUE((*opt)->Restore("t6").ok());
  EXPECT_TRUE(Read(opt->get()) == tagged);
  opt->reset();
  auto again = Optimizer::Open(Options(dir, GetParam()));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(Read(again->get()) == tagged);
  EXPECT_EQ((*again)->step(), 6u);
}

TEST_P(CompactStateTest, AnotherFormatIsRefusedAndLosesNothing) {
  TempDir dir;
  State kept;
  {
    auto opt = Optimizer::Open(Options(dir, GetParam()));
    ASSERT_TRUE(opt.ok()) << opt.status();
    std::vector<float> g = UnscaledGrads(1, 3000);
    ASSERT_TRUE((*opt)->BorrowGrad(0, 0, g.data(), DType::kF32, 3000).ok());
    ASSERT_TRUE((*opt)->Step().ok());
    kept = Read(opt->get());
  }
  for (StateFormat other : {StateFormat::kF32, StateFormat::kBF16Moments,
                            StateFormat::kInt8Moments}) {
    if (other == GetParam()) continue;
    auto bad = Optimizer::Open(Options(dir, other));
    ASSERT_FALSE(bad.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(bad.status())) << bad.status();
    EXPECT_NE(bad.status().message().find(StateFormatName(GetParam())),
              std::string::npos)
        << bad.status();
    // The config naming the other format, the option unset: the same.
    OptimizerOptions o = Options(dir, GetParam());
    o.state_format.reset();
    ConfigValue named;
    named.kind = ConfigValue::Kind::kString;
    named.string = std::string(StateFormatName(other));
    o.store.upper["state_format"] = named;
    EXPECT_TRUE(absl::IsFailedPrecondition(Optimizer::Open(o).status()));
    // Both named and different: a contradiction.
    o.state_format = GetParam();
    EXPECT_TRUE(absl::IsInvalidArgument(Optimizer::Open(o).status()));
  }
  // Unset everywhere: the fp32 default, refused unless the store is fp32.
  OptimizerOptions o = Options(dir, GetParam());
  o.state_format.reset();
  EXPECT_EQ(Optimizer::Open(o).ok(), GetParam() == StateFormat::kF32);
  auto opt = Optimizer::Open(Options(dir, GetParam()));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_TRUE(Read(opt->get()) == kept);
}

TEST_P(CompactStateTest, ImportRoundsIntoTheFormatAndRefusesBadMoments) {
  TempDir dir;
  auto opt = Optimizer::Open(Options(dir, GetParam()));
  ASSERT_TRUE(opt.ok()) << opt.status();
  auto fill = [](const Subgroup& s, float* p, float* const* slots) {
    float *m = slots[0], *v = slots[1];
    for (uint64_t i = 0; i < s.numel; ++i) {
      uint64_t e = s.group_offset + i;
      p[i] = InitValue(0, e);
      m[i] = InitValue(1, e) * 1e-3f;
      v[i] = m[i] * m[i] * 2 + 1e-9f;
    }
    return absl::OkStatus();
  };
  ASSERT_TRUE((*opt)->ImportState(5, fill).ok());
  State s = Read(opt->get());
  for (uint64_t i = 0; i < s.p.size(); ++i) {
    float m = InitValue(1, i) * 1e-3f, v = m * m * 2 + 1e-9f;
    ASSERT_EQ(s.p[i], InitValue(0, i));
    double mt = GetParam() == StateFormat::kF32 ? 0
                : GetParam() == StateFormat::kBF16Moments ? 1.0 / 256 : 1.0 / 16;
    // int8: relative to the value, plus the block's smallest code.
    double floor = GetParam() == StateFormat::kInt8Moments ? 1e-3 * 0x1p-16 : 0;
    ASSERT_NEAR(s.m[i], m, mt * std::abs(m) + floor) << i;
    ASSERT_NEAR(std::sqrt(s.v[i]), std::sqrt(v), mt * std::sqrt(v) + floor) << i;
  }
  // A negative exp_avg_sq: refused in every format, with the element.
  auto bad = [](const Subgroup& s, float* p, float* const* slots) {
    float *m = slots[0], *v = slots[1];
    for (uint64_t i = 0; i < s.numel; ++i) p[i] = m[i] = v[i] = 0;
    v[s.numel / 2] = -1;
    return absl::OkStatus();
  };
  absl::Status st = (*opt)->ImportState(6, bad);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("exp_avg_sq"), std::string::npos) << st;
  EXPECT_TRUE(Read(opt->get()) == s);  // the first subgroup: nothing written
}

TEST(CompactStateOptionsTest, Int8NeedsTilesOfWholeBlocks) {
  TempDir dir;
  OptimizerOptions o = Options(dir, StateFormat::kInt8Moments);
  o.pipeline.tile_elems = 1000;
  auto opt = Optimizer::Open(o);
  ASSERT_FALSE(opt.ok());
  EXPECT_NE(opt.status().message().find("tile_elems"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Formats, CompactStateTest,
    ::testing::Values(StateFormat::kF32, StateFormat::kBF16Moments,
                      StateFormat::kInt8Moments),
    StateFormatTestName);

}  // namespace
}  // namespace mlpo
