// Helpers for optimizer tests: deterministic parameters and gradients, an
// in-memory reference that runs the same kernel on whole arrays, and an
// independent one: AdamW in double precision.
#ifndef MLPO_TESTS_OPTIMIZER_OPTIMIZER_TEST_UTIL_H_
#define MLPO_TESTS_OPTIMIZER_OPTIMIZER_TEST_UTIL_H_

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "optimizer/optimizer.h"
#include "tests/store/store_test_util.h"

namespace mlpo {

// Test names for StateFormat parameters: fp32, bf16_moments, int8_moments.
inline std::string StateFormatTestName(
    const ::testing::TestParamInfo<StateFormat>& info) {
  std::string n = StateFormatName(info.param);
  for (char& ch : n)
    if (ch == '-') ch = '_';
  return n;
}

inline float InitValue(int group, uint64_t i) {
  uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ (group + 7) * 0xBF58476D1CE4E5B9ull;
  return static_cast<float>(static_cast<int64_t>(h >> 40) - (1 << 23)) /
         (1 << 23);
}

// bf16 gradient of element i of `group` at step t (times a loss scale 1024).
inline uint16_t GradValue(uint64_t t, int group, uint64_t i) {
  uint64_t h = (i + 3) * 0xD6E8FEB86659FD93ull ^ (t * 31 + group) * 0x9E3779B97F4A7C15ull;
  float g = static_cast<float>(static_cast<int64_t>(h >> 40) - (1 << 23)) /
            (1 << 23) * 1024.0f * 0.01f;
  return FloatToBF16(g);
}

inline OptimizerOptions TestOptimizerOptions(const TempDir& dir,
                                             std::vector<uint64_t> numel,
                                             uint64_t subgroup) {
  OptimizerOptions o;
  o.store = TestStoreOptions(dir, {0.6, 0.4});
  for (size_t g = 0; g < numel.size(); ++g) {
    ParamGroup pg;
    pg.numel = numel[g];
    pg.hyper.lr = 1e-2 / (g + 1);
    pg.hyper.weight_decay = g == 0 ? 0.01 : 0.0;
    pg.hyper.mode = g == 2 ? AdamMode::kAdam : AdamMode::kAdamW;
    o.groups.push_back(pg);
  }
  o.subgroup_numel = subgroup;
  o.grad_dtype = DType::kBF16;
  o.param_dtype = DType::kBF16;
  o.pipeline.threads = 2;
  o.pipeline.tile_elems = 4096;
  o.init_params = [](int g, uint64_t off, float* dst, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) dst[i] = InitValue(g, off + i);
  };
  return o;
}

inline absl::Status StageAll(Optimizer* opt, uint64_t t) {
  for (size_t g = 0; g < opt->options().groups.size(); ++g) {
    uint64_t n = opt->options().groups[g].numel;
    std::vector<uint16_t> grad(n);
    for (uint64_t i = 0; i < n; ++i) grad[i] = GradValue(t, g, i);
    // Hand it over in two uneven slices, second one first.
    uint64_t cut = n / 3;
    auto s = opt->StageGrad(g, cut, grad.data() + cut, DType::kBF16, n - cut);
    if (!s.ok()) return s;
    s = opt->StageGrad(g, 0, grad.data(), DType::kBF16, cut);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Every group's p, m, v and every parameter's step count are the same in
// both (bit for bit).
inline void ExpectSameState(Optimizer* a, Optimizer* b) {
  for (int g = 0; g < static_cast<int>(a->options().groups.size()); ++g) {
    std::vector<float> p1, m1, v1, p2, m2, v2;
    ASSERT_TRUE(a->ReadState(g, &p1, &m1, &v1).ok());
    ASSERT_TRUE(b->ReadState(g, &p2, &m2, &v2).ok());
    EXPECT_EQ(p1, p2) << "group " << g;
    EXPECT_EQ(m1, m2) << "group " << g;
    EXPECT_EQ(v1, v2) << "group " << g;
  }
  EXPECT_EQ(a->param_steps(), b->param_steps());
}

// Whole-array reference: the same kernel, no store, no pipeline.
struct InMemoryRef {
  std::vector<std::vector<float>> p, m, v;
  std::vector<std::vector<uint16_t>> out;
  explicit InMemoryRef(const OptimizerOptions& o) {
    for (size_t g = 0; g < o.groups.size(); ++g) {
      uint64_t n = o.groups[g].numel;
      p.emplace_back(n);
      for (uint64_t i = 0; i < n; ++i) p[g][i] = InitValue(g, i);
      m.emplace_back(n, 0.0f);
      v.emplace_back(n, 0.0f);
      out.emplace_back(n, 0);
    }
  }
  void Step(const OptimizerOptions& o, uint64_t t, double grad_scale) {
    for (size_t g = 0; g < o.groups.size(); ++g) {
      uint64_t n = o.groups[g].numel;
      std::vector<uint16_t> grad(n);
      for (uint64_t i = 0; i < n; ++i) grad[i] = GradValue(t, g, i);
      AdamSlice s{p[g].data(), m[g].data(), v[g].data(), grad.data(),
                  DType::kBF16, out[g].data(), DType::kBF16, n};
      AdamUpdate(s, MakeStepConsts(o.groups[g].hyper, t, grad_scale),
                 KernelIsa::kScalar);
    }
  }
};

// torch.optim.AdamW in double precision, one group of parameters of
// `sizes` elements (InitValue(0, i) at first), each with its own step count:
// the independent reference the optimizer's steps are held to.
struct DoubleAdamW {
  double lr, b1, b2, eps, wd;
  std::vector<double> p, m, v;
  std::vector<uint64_t> bounds{0};  // parameter k: [bounds[k], bounds[k+1])
  std::vector<uint64_t> steps;      // per parameter
  DoubleAdamW(const std::vector<uint64_t>& sizes, double lr, double b1,
              double b2, double eps, double wd)
      : lr(lr), b1(b1), b2(b2), eps(eps), wd(wd) {
    for (uint64_t n : sizes) bounds.push_back(bounds.back() + n);
    for (uint64_t i = 0; i < bounds.back(); ++i) p.push_back(InitValue(0, i));
    m.assign(p.size(), 0);
    v.assign(p.size(), 0);
    steps.assign(sizes.size(), 0);
  }
  // One step of the parameters marked active (the others keep their state
  // and step count, as torch skips a parameter whose grad is None).
  void Step(const std::vector<float>& g, const std::vector<bool>& active) {
    for (size_t k = 0; k + 1 < bounds.size(); ++k) {
      if (!active[k]) continue;
      uint64_t t = ++steps[k];
      double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      for (uint64_t i = bounds[k]; i < bounds[k + 1]; ++i) {
        p[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
      }
    }
  }
};

// Group 0's gradients at step t as fp32 values: GradValue's bf16 without
// its loss scale of 1024.
inline std::vector<float> UnscaledGrads(uint64_t t, uint64_t n) {
  std::vector<float> g(n);
  for (uint64_t i = 0; i < n; ++i) g[i] = BF16ToFloat(GradValue(t, 0, i)) / 1024;
  return g;
}

}  // namespace mlpo

#endif  // MLPO_TESTS_OPTIMIZER_OPTIMIZER_TEST_UTIL_H_
