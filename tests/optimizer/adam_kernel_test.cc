// Kernel parity: against a double-precision reference loop (independent of
// the kernel's code), and every ISA against the scalar path bit for bit.
#include "optimizer/kernel/adam.h"
#include "optimizer/kernel/grad_stats.h"
#include "optimizer/kernel/isa.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mlpo {
namespace {

struct RefState {
  std::vector<double> p, m, v;
};

// Plain double-precision Adam/AdamW (PyTorch's formulas), one step.
void RefStep(RefState* s, const std::vector<double>& g_raw, const RuleHyper& h,
             uint64_t t, double grad_scale) {
  double bc1 = 1 - std::pow(h.beta1, t), bc2 = 1 - std::pow(h.beta2, t);
  for (size_t i = 0; i < s->p.size(); ++i) {
    double g = g_raw[i] * grad_scale;
    double p = s->p[i];
    if (h.mode == AdamMode::kAdamW) p *= 1 - h.lr * h.weight_decay;
    else g += h.weight_decay * p;
    s->m[i] = h.beta1 * s->m[i] + (1 - h.beta1) * g;
    s->v[i] = h.beta2 * s->v[i] + (1 - h.beta2) * g * g;
    double denom = std::sqrt(s->v[i]) / std::sqrt(bc2) + h.eps;
    s->p[i] = p - h.lr / bc1 * s->m[i] / denom;
  }
}

std::vector<uint16_t> Encode(const std::vector<float>& x, DType t) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = t == DType::kF16 ? FloatToF16(x[i]) : FloatToBF16(x[i]);
  return out;
}

struct Case {
  DType grad, out;
  RuleHyper h;
  size_t n;
  double grad_scale;
};

void RunAgainstReference(const Case& c, KernelIsa isa) {
  std::mt19937 rng(static_cast<unsigned>(c.n * 7 + static_cast<int>(c.grad)));
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> p(c.n), m(c.n, 0), v(c.n, 0);
  for (auto& x : p) x = nd(rng);
  RefState ref{std::vector<double>(p.begin(), p.end()),
               std::vector<double>(c.n, 0), std::vector<double>(c.n, 0)};
  std::vector<uint8_t> out(c.n * DTypeSize(c.out));
  for (uint64_t t = 1; t <= 5; ++t) {
    std::vector<float> g32(c.n);
    for (auto& x : g32) x = nd(rng) * 0.1f;
    std::vector<uint16_t> g16;
    const void* gp = g32.data();
    if (c.grad != DType::kF32) {
      g16 = Encode(g32, c.grad);
      gp = g16.data();
    }
    std::vector<double> gd(c.n);
    for (size_t i = 0; i < c.n; ++i) gd[i] = LoadAsFloat(gp, c.grad, i);
    AdamSlice s{p.data(), m.data(), v.data(), gp, c.grad, out.data(), c.out, c.n};
    AdamUpdate(s, MakeStepConsts(c.h, t, c.grad_scale), isa);
    RefStep(&ref, gd, c.h, t, c.grad_scale);
    for (size_t i = 0; i < c.n; ++i) {
      double tol_p = 2e-6 * std::abs(ref.p[i]) + 1e-7 * c.h.lr * t;
      ASSERT_NEAR(p[i], ref.p[i], tol_p) << "p[" << i << "] step " << t;
      ASSERT_NEAR(m[i], ref.m[i], 2e-6 * std::abs(ref.m[i]) + 1e-8)
          << "m[" << i << "] step " << t;
      ASSERT_NEAR(v[i], ref.v[i], 2e-6 * std::abs(ref.v[i]) + 1e-12)
          << "v[" << i << "] step " << t;
      // The output is the kernel's p rounded to the model dtype.
      float o = LoadAsFloat(out.data(), c.out, i);
      float want = LoadAsFloat(&p[i], DType::kF32, 0);
      if (c.out == DType::kF16) want = F16ToFloat(FloatToF16(want));
      if (c.out == DType::kBF16) want = BF16ToFloat(FloatToBF16(want));
      ASSERT_EQ(o, want) << "out[" << i << "]";
    }
  }
}

class KernelParityTest : public ::testing::TestWithParam<KernelIsa> {
 protected:
  void SetUp() override {
    if (!KernelIsaSupported(GetParam()))
      GTEST_SKIP() << KernelIsaName(GetParam()) << " not supported here";
  }
};

TEST_P(KernelParityTest, EveryDtypeCombinationMatchesDoubleReference) {
  for (DType g : {DType::kF32, DType::kF16, DType::kBF16})
    for (DType o : {DType::kF32, DType::kF16, DType::kBF16})
      for (size_t n : {1u, 7u, 15u, 16u, 17u, 33u, 1000u}) {
        RuleHyper h;
        h.lr = 1e-3;
        h.weight_decay = 0.01;
        RunAgainstReference({g, o, h, n, 1.0 / 128}, GetParam());
      }
}

TEST_P(KernelParityTest, EdgeHyperparameters) {
  std::vector<RuleHyper> hs(6);
  hs[0].lr = 0;                       // no movement
  hs[1].eps = 1e-30;                  // tiny eps
  hs[2].weight_decay = 0;
  hs[3].weight_decay = 10;            // large decay: 1 - lr*wd = 0.99
  hs[3].lr = 1e-3;
  hs[4].mode = AdamMode::kAdam;       // L2 into the gradient
  hs[4].weight_decay = 0.1;
  hs[5].beta1 = 0;                    // no momentum
  hs[5].beta2 = 0.5;
  for (auto& h : hs)
    RunAgainstReference({DType::kBF16, DType::kBF16, h, 1001, 0.5}, GetParam());
  // lr 0 with AdamW leaves parameters bit-identical.
  std::vector<float> p(40, 1.25f), m(40, 0), v(40, 0), g(40, 3.0f);
  RuleHyper z;
  z.lr = 0;
  z.weight_decay = 0.5;
  AdamSlice s{p.data(), m.data(), v.data(), g.data(), DType::kF32, nullptr,
              DType::kF32, 40};
  AdamUpdate(s, MakeStepConsts(z, 1, 1.0), GetParam());
  for (float x : p) EXPECT_EQ(x, 1.25f);
}

TEST_P(KernelParityTest, ClippingScaleMatchesReferenceOnScaledGradients) {
  RuleHyper h;
  RunAgainstReference({DType::kF16, DType::kF32, h, 513, 0.37 / 1024},
                      GetParam());
}

TEST_P(KernelParityTest, MaximizeIsTheStepOfTheNegatedGradient) {
  // torch's maximize: grad = -grad before anything else. Bit for bit the
  // step of the negated gradient, with a clipping scale and weight decay,
  // in every ISA and state of the moments.
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 1);
  const size_t n = 1000;
  std::vector<float> p(n), m(n), v(n), g(n), neg(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = nd(rng);
    m[i] = nd(rng) * 0.01f;
    v[i] = std::abs(nd(rng)) * 1e-4f;
    g[i] = nd(rng);
    neg[i] = -g[i];
  }
  auto p2 = p, m2 = m, v2 = v;
  RuleHyper h;
  h.weight_decay = 0.1;
  RuleHyper hm = h;
  hm.maximize = true;
  AdamUpdate({p.data(), m.data(), v.data(), g.data(), DType::kF32, nullptr,
              DType::kF32, n},
             MakeStepConsts(hm, 4, 0.37), GetParam());
  AdamUpdate({p2.data(), m2.data(), v2.data(), neg.data(), DType::kF32,
              nullptr, DType::kF32, n},
             MakeStepConsts(h, 4, 0.37), GetParam());
  ASSERT_EQ(0, std::memcmp(p.data(), p2.data(), n * 4));
  ASSERT_EQ(0, std::memcmp(m.data(), m2.data(), n * 4));
  ASSERT_EQ(0, std::memcmp(v.data(), v2.data(), n * 4));
}

TEST_P(KernelParityTest, BitIdenticalToScalarWithMisalignedTails) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  for (DType g : {DType::kF32, DType::kF16, DType::kBF16})
    for (DType o : {DType::kF32, DType::kF16, DType::kBF16})
      for (size_t n : {1u, 9u, 31u, 64u, 100003u}) {
        // +1 element: every pointer off the vector alignment.
        std::vector<float> p(n + 1), m(n + 1), v(n + 1), g32(n + 1);
        for (size_t i = 0; i <= n; ++i) {
          p[i] = nd(rng);
          m[i] = nd(rng) * 0.01f;
          v[i] = std::abs(nd(rng)) * 1e-4f;
          g32[i] = nd(rng);
        }
        std::vector<uint16_t> g16 = g == DType::kF32 ? std::vector<uint16_t>()
                                                     : Encode(g32, g);
        const void* gp = g == DType::kF32 ? static_cast<const void*>(g32.data() + 1)
                                          : static_cast<const void*>(g16.data() + 1);
        auto p2 = p, m2 = m, v2 = v;
        std::vector<uint8_t> o1((n + 1) * 4), o2((n + 1) * 4);
        RuleHyper h;
        h.weight_decay = 0.1;
        auto c = MakeStepConsts(h, 3, 0.5);
        size_t es = DTypeSize(o);
        AdamUpdate({p.data() + 1, m.data() + 1, v.data() + 1, gp, g,
                    o1.data() + es, o, n},
                   c, KernelIsa::kScalar);
        AdamUpdate({p2.data() + 1, m2.data() + 1, v2.data() + 1, gp, g,
                    o2.data() + es, o, n},
                   c, GetParam());
        ASSERT_EQ(0, std::memcmp(p.data(), p2.data(), (n + 1) * 4)) << n;
        ASSERT_EQ(0, std::memcmp(m.data(), m2.data(), (n + 1) * 4)) << n;
        ASSERT_EQ(0, std::memcmp(v.data(), v2.data(), (n + 1) * 4)) << n;
        ASSERT_EQ(0, std::memcmp(o1.data(), o2.data(), (n + 1) * es)) << n;
      }
}

INSTANTIATE_TEST_SUITE_P(Isa, KernelParityTest,
                         ::testing::Values(KernelIsa::kScalar, KernelIsa::kAvx2,
                                           KernelIsa::kAvx512),
                         [](const auto& i) {
                           return std::string(KernelIsaName(i.param));
                         });

TEST(GradStatsTest, NormAndNonFinite) {
  std::vector<float> g = {3, 4, INFINITY, NAN, 0};
  GradStats s = ComputeGradStats(g.data(), DType::kF32, g.size());
  EXPECT_DOUBLE_EQ(s.sum_sq, 25.0);
  EXPECT_EQ(s.nonfinite, 2u);
  std::vector<uint16_t> h = {FloatToF16(1.5f), 0x7c00 /* inf */};
  s = ComputeGradStats(h.data(), DType::kF16, 2);
  EXPECT_DOUBLE_EQ(s.sum_sq, 2.25);
  EXPECT_EQ(s.nonfinite, 1u);
}

// Every ISA gives the scalar statistics bit for bit (the same 16
// accumulators in the same order), and they match a long-double sum. The
// copying form (the gradient stage's host copies, which work in pieces of
// 16 Ki elements) copies every byte and gives the same statistics.
TEST(GradStatsTest, EveryIsaAgreesBitForBitAndWithALongDoubleSum) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (size_t n : {0u, 1u, 15u, 16u, 17u, 1000u, 16384u, 16399u, 50001u,
                     100003u}) {
      std::vector<float> g(n);
      for (size_t i = 0; i < n; ++i)
        g[i] = i % 777 == 5 ? INFINITY : i % 1001 == 7 ? NAN : nd(rng) * 3;
      std::vector<uint16_t> h(n);
      const void* p = g.data();
      if (dt != DType::kF32) {
        for (size_t i = 0; i < n; ++i) StoreFromFloat(h.data(), dt, i, g[i]);
        p = h.data();
      }
      long double want = 0;
      uint64_t bad = 0;
      for (size_t i = 0; i < n; ++i) {
        float x = LoadAsFloat(p, dt, i);
        if (!std::isfinite(x)) ++bad;
        else want += static_cast<long double>(x) * x;
      }
      GradStats s = ComputeGradStats(p, dt, n, KernelIsa::kScalar);
      EXPECT_EQ(s.nonfinite, bad);
      EXPECT_NEAR(s.sum_sq, static_cast<double>(want),
                  1e-12 * static_cast<double>(want) + 1e-300);
      const size_t bytes = n * DTypeSize(dt);
      for (KernelIsa isa :
           {KernelIsa::kScalar, KernelIsa::kAvx2, KernelIsa::kAvx512}) {
        if (!KernelIsaSupported(isa)) continue;
        GradStats v = ComputeGradStats(p, dt, n, isa);
        EXPECT_EQ(v.nonfinite, s.nonfinite) << KernelIsaName(isa) << " " << n;
        EXPECT_EQ(std::memcmp(&v.sum_sq, &s.sum_sq, sizeof(double)), 0)
            << KernelIsaName(isa) << " n=" << n << " " << v.sum_sq << " vs "
            << s.sum_sq;
        std::vector<char> copy(bytes + 1, 'x');
        GradStats c = CopyGradStats(copy.data(), p, dt, n, isa);
        if (bytes > 0) {  // (p is null for n = 0)
          EXPECT_EQ(std::memcmp(copy.data(), p, bytes), 0)
              << "copy " << KernelIsaName(isa) << " n=" << n;
        }
        EXPECT_EQ(copy[bytes], 'x') << "wrote past the end, n=" << n;
        EXPECT_EQ(c.nonfinite, s.nonfinite) << KernelIsaName(isa) << " " << n;
        EXPECT_EQ(std::memcmp(&c.sum_sq, &s.sum_sq, sizeof(double)), 0)
            << "copy " << KernelIsaName(isa) << " n=" << n << " " << c.sum_sq
            << " vs " << s.sum_sq;
      }
    }
}

TEST(DTypeTest, ConversionsRoundToNearestEven) {
  EXPECT_EQ(FloatToBF16(1.0f), 0x3f80);
  EXPECT_EQ(BF16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between two bf16 values: ties to even (down).
  EXPECT_EQ(FloatToBF16(1.00390625f), 0x3f80);
  EXPECT_EQ(FloatToBF16(1.01171875f), 0x3f82);  // 1 + 3*2^-8: up to even
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(F16ToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -26)), 0x0000);  // rounds to zero
  EXPECT_EQ(FloatToF16(65520.0f), 0x7c00);               // overflow to inf
  for (uint32_t h = 0; h < 0x7c00; ++h)  // every finite half round-trips
    ASSERT_EQ(FloatToF16(F16ToFloat(static_cast<uint16_t>(h))), h);
}

}  // namespace
}  // namespace mlpo
