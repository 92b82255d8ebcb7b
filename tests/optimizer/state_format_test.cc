// Compact moments (kernel/state_codec.h): the code map's properties, every ISA
// bit for bit against the scalar kernel on data with extremes, and each
// format's step against a double-precision Adam step on the same decoded
// state, within the format's rounding.
#include "optimizer/kernel/state_codec.h"
#include "optimizer/state_layout.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "optimizer/kernel/adam.h"
#include "optimizer/kernel/isa.h"
#include "store/meta/layout.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

TEST(CodeMapTest, EveryCodeRoundTripsAndValuesAscend) {
  float prev = -1;
  for (uint32_t q = 0; q < 128; ++q) {
    float x = DecodeMag<kM8Mantissa>(q);
    EXPECT_GT(x, prev) << q;
    EXPECT_EQ(EncodeMag<kM8Mantissa>(x), q) << q;
    prev = x;
  }
  EXPECT_EQ(prev, kM8Max);
  prev = -1;
  for (uint32_t q = 0; q < 256; ++q) {
    float x = DecodeMag<kV8Mantissa>(q);
    EXPECT_GT(x, prev) << q;
    EXPECT_EQ(EncodeMag<kV8Mantissa>(x), q) << q;
    prev = x;
  }
  EXPECT_EQ(prev, kV8Max);
  // Smallest nonzero codes: 2^-17 and 2^-18.
  EXPECT_EQ(DecodeMag<kM8Mantissa>(1), std::ldexp(1.0f, -17));
  EXPECT_EQ(DecodeMag<kV8Mantissa>(1), std::ldexp(1.0f, -18));
}

TEST(CodeMapTest, NearestWithTiesToEvenAndSaturation) {
  for (uint32_t q = 0; q + 1 < 128; ++q) {
    float a = DecodeMag<kM8Mantissa>(q), b = DecodeMag<kM8Mantissa>(q + 1);
    float mid = (a + b) / 2;  // exact: a and b are close binary values
    uint32_t even = (q % 2 == 0) ? q : q + 1;
    EXPECT_EQ(EncodeMag<kM8Mantissa>(mid), even) << q;
    EXPECT_EQ(EncodeMag<kM8Mantissa>(std::nextafter(mid, 0.0f)), q) << q;
    EXPECT_EQ(EncodeMag<kM8Mantissa>(std::nextafter(mid, 9.0f)), q + 1) << q;
  }
  EXPECT_EQ(EncodeMag<kM8Mantissa>(100.0f), 127u);
  EXPECT_EQ(EncodeMag<kM8Mantissa>(std::numeric_limits<float>::infinity()),
            127u);
  EXPECT_EQ(EncodeMag<kM8Mantissa>(std::nanf("")), 127u);
  EXPECT_EQ(EncodeMag<kM8Mantissa>(1e-30f), 0u);
  // Signs, and a zero scale (an all-zero block).
  EXPECT_EQ(EncodeM8(-0.0f, 1.0f), 0x80);
  EXPECT_EQ(EncodeM8(5.0f, 0.0f), 0);
  EXPECT_EQ(DecodeM8(EncodeM8(-1.5f, 1.0f), 1.0f), -1.5f);
}

TEST(QuantGridTest, BlocksRestartAtEveryParameter) {
  QuantGrid g({0, 300, 301, 900}, 1000);
  // [0,300): 2 blocks, [300,301): 1, [301,900): 3, [900,1000): 1.
  EXPECT_EQ(g.blocks(), 7u);
  EXPECT_EQ(g.Block(0), 0u);
  EXPECT_EQ(g.Block(255), 0u);
  EXPECT_EQ(g.Block(256), 1u);
  EXPECT_EQ(g.BlockEnd(256), 300u);
  EXPECT_EQ(g.Block(300), 2u);
  EXPECT_EQ(g.BlockEnd(300), 301u);
  EXPECT_EQ(g.Block(301), 3u);
  EXPECT_EQ(g.BlockStart(600), 557u);
  EXPECT_EQ(g.Block(899), 5u);
  EXPECT_EQ(g.Block(999), 6u);
  EXPECT_EQ(QuantGrid({}, 512).blocks(), 2u);
  EXPECT_EQ(QuantGrid({0}, 513).blocks(), 3u);
}

// A slice's state in one format, with the storage its pointers use.
// Adam's m and v through the slots' codec.
void EncodeMoments(const StateRef& r, uint64_t n, const float* m,
                   const float* v) {
  EncodeSlot(r, 0, n, m);
  EncodeSlot(r, 1, n, v);
}
void DecodeMoments(const StateRef& r, uint64_t from, uint64_t n, float* m,
                   float* v) {
  DecodeSlot(r, 0, from, n, m);
  DecodeSlot(r, 1, from, n, v);
}

struct State {
  StateFormat f;
  size_t n;
  std::vector<float> p, m32, v32, ms, vs;
  std::vector<uint16_t> m16, v16;
  std::vector<uint8_t> m8, v8;
  QuantGrid grid;

  State(StateFormat fmt, size_t count) : f(fmt), n(count), grid({}, count) {
    p.resize(n);
    m32.resize(n);
    v32.resize(n);
    m16.resize(n);
    v16.resize(n);
    m8.resize(n);
    v8.resize(n);
    ms.resize(grid.blocks());
    vs.resize(grid.blocks());
  }
  // Adam's moments as the store's slots 0 (m) and 1 (v).
  StateRef Ref() {
    StateRef r;
    r.format = f;
    r.slots = 2;
    r.slot[0] = f == StateFormat::kF32 ? static_cast<void*>(m32.data())
                : f == StateFormat::kBF16Moments ? static_cast<void*>(m16.data())
                                                 : static_cast<void*>(m8.data());
    r.slot[1] = f == StateFormat::kF32 ? static_cast<void*>(v32.data())
                : f == StateFormat::kBF16Moments ? static_cast<void*>(v16.data())
                                                 : static_cast<void*>(v8.data());
    r.scale[0] = ms.data();
    r.scale[1] = vs.data();
    r.nonneg[1] = true;
    r.grid = &grid;
    return r;
  }
  AdamSlice Slice(const float* g, void* out) {
    StateRef r = Ref();
    AdamSlice s{p.data(), r.slot[0], r.slot[1], g, DType::kF32, out,
                DType::kBF16, n};
    s.format = f;
    s.ms = ms.data();
    s.vs = vs.data();
    return s;
  }
  bool operator==(const State& o) const {
    return p == o.p && m32 == o.m32 && v32 == o.v32 && m16 == o.m16 &&
           v16 == o.v16 && m8 == o.m8 && v8 == o.v8 && ms == o.ms &&
           vs == o.vs;
  }
};

// Random state with extremes: zeros, subnormals, huge values, a block of
// one sign, a block of zeros.
void Fill(State* s, std::mt19937* rng) {
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> m(s->n), v(s->n);
  for (size_t i = 0; i < s->n; ++i) {
    s->p[i] = nd(*rng);
    m[i] = nd(*rng) * 1e-3f;
    v[i] = m[i] * m[i] * 4;
    switch (i % 97) {
      case 3: m[i] = 0; v[i] = 0; break;
      case 5: m[i] = 1e-40f; v[i] = 1e-42f; break;  // subnormal
      case 7: m[i] = -3e30f; v[i] = 1e36f; break;   // huge
      case 11: m[i] = -0.0f; break;
      default: break;
    }
    if (i >= 256 && i < 512) m[i] = std::abs(m[i]);  // one sign
    if (i >= 512 && i < 768) m[i] = v[i] = 0;        // all zero
  }
  EncodeMoments(s->Ref(), s->n, m.data(), v.data());
}

class CompactKernelTest : public ::testing::TestWithParam<StateFormat> {};

TEST_P(CompactKernelTest, EveryIsaIsBitIdenticalToScalar) {
  for (size_t n : {1u, 15u, 17u, 255u, 256u, 257u, 1000u, 4099u}) {
    std::mt19937 rng(static_cast<unsigned>(n));
    State base(GetParam(), n);
    Fill(&base, &rng);
    std::normal_distribution<float> nd(0, 1);
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i)
      g[i] = i % 89 == 4 ? 1e18f : i % 89 == 6 ? 0.0f : nd(rng) * 1e-2f;
    RuleHyper h;
    h.weight_decay = 0.1;
    AdamStepConsts c = MakeStepConsts(h, 3, 0.5);
    State want = base;
    std::vector<uint16_t> out_want(n), out(n);
    AdamUpdate(want.Slice(g.data(), out_want.data()), c, KernelIsa::kScalar);
    for (KernelIsa isa : {KernelIsa::kAvx2, KernelIsa::kAvx512}) {
      if (!KernelIsaSupported(isa)) continue;
      State got = base;
      AdamUpdate(got.Slice(g.data(), out.data()), c, isa);
      EXPECT_TRUE(got == want) << KernelIsaName(isa) << " n=" << n;
      EXPECT_EQ(out, out_want) << KernelIsaName(isa) << " n=" << n;
    }
  }
}

// One step from a state's decoded values in double precision: the kernel's
// p within fp32 rounding, its m and v within the format's rounding.
TEST_P(CompactKernelTest, StepMatchesDoubleReferenceWithinTheFormat) {
  const size_t n = 3000;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 1);
  State s(GetParam(), n);
  {
    std::vector<float> m(n), v(n);
    for (size_t i = 0; i < n; ++i) {
      s.p[i] = nd(rng);
      m[i] = nd(rng) * 1e-2f;
      v[i] = std::abs(nd(rng)) * 1e-4f;
    }
    EncodeMoments(s.Ref(), n, m.data(), v.data());
  }
  RuleHyper h;
  h.lr = 1e-2;
  h.weight_decay = 0.1;
  for (uint64_t t = 1; t <= 4; ++t) {
    std::vector<float> m0(n), v0(n), g(n);
    DecodeMoments(s.Ref(), 0, n, m0.data(), v0.data());
    std::vector<double> p_ref(s.p.begin(), s.p.end()), m_ref(n), v_ref(n);
    for (size_t i = 0; i < n; ++i) g[i] = nd(rng) * 1e-2f;
    double bc1 = 1 - std::pow(h.beta1, t), bc2 = 1 - std::pow(h.beta2, t);
    for (size_t i = 0; i < n; ++i) {
      double p = p_ref[i] * (1 - h.lr * h.weight_decay);
      m_ref[i] = h.beta1 * m0[i] + (1 - h.beta1) * g[i];
      v_ref[i] = h.beta2 * v0[i] + (1 - h.beta2) * double(g[i]) * g[i];
      p_ref[i] = p - h.lr / bc1 * m_ref[i] / (std::sqrt(v_ref[i] / bc2) + h.eps);
    }
    AdamUpdate(s.Slice(g.data(), nullptr), MakeStepConsts(h, t, 1.0));
    std::vector<float> m1(n), v1(n);
    DecodeMoments(s.Ref(), 0, n, m1.data(), v1.data());
    double mt = 2e-6, vt = 2e-6;  // relative
    if (GetParam() == StateFormat::kBF16Moments) mt = vt = 1.0 / 256;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(s.p[i], p_ref[i], 1e-6 * std::abs(p_ref[i]) + 1e-7)
          << "p[" << i << "] step " << t;
      if (GetParam() == StateFormat::kInt8Moments) {
        // Half a code step of the block's scale: |x|/16 for m (3 mantissa
        // bits), |r|/32 for r = sqrt(v), and the subnormal unit.
        size_t b = s.grid.Block(i);
        double m_tol = std::abs(m_ref[i]) / 16 + s.ms[b] * 0x1p-17 + 1e-12;
        ASSERT_NEAR(m1[i], m_ref[i], m_tol) << "m[" << i << "] step " << t;
        double r = std::sqrt(v_ref[i]);
        double r_tol = r / 32 + s.vs[b] * 0x1p-18 + 1e-12;
        ASSERT_NEAR(std::sqrt(v1[i]), r, r_tol) << "v[" << i << "] step " << t;
      } else {
        // fp32's lerp cancels: its error is relative to the inputs.
        double in = 1e-6 * (std::abs(m0[i]) + std::abs(g[i]));
        ASSERT_NEAR(m1[i], m_ref[i], mt * std::abs(m_ref[i]) + in)
            << "m[" << i << "] step " << t;
        ASSERT_NEAR(v1[i], v_ref[i], vt * std::abs(v_ref[i]) + 1e-15)
            << "v[" << i << "] step " << t;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, CompactKernelTest,
    ::testing::Values(StateFormat::kF32, StateFormat::kBF16Moments,
                      StateFormat::kInt8Moments),
    StateFormatTestName);

TEST(StateLayoutTest, BytesPerParameterAndBadNames) {
  auto f32 = StateLayout(StateFormat::kF32, 1024, 4);
  auto b16 = StateLayout(StateFormat::kBF16Moments, 1024, 4);
  auto i8 = StateLayout(StateFormat::kInt8Moments, 1024, 4);
  ASSERT_TRUE(f32.ok() && b16.ok() && i8.ok());
  // Sections start aligned, so compare the data each holds.
  auto data = [](const ObjectLayout& l) {
    uint64_t b = 0;
    for (auto& s : l.sections()) b += s.spec.count * DTypeSize(s.spec.dtype);
    return b;
  };
  EXPECT_EQ(data(*f32), 12u * 1024);
  EXPECT_EQ(data(*b16), 8u * 1024);
  EXPECT_EQ(data(*i8), 6u * 1024 + 2 * 4 * 4);
  EXPECT_FALSE(ParseStateFormat("int8").ok());
  EXPECT_EQ(*ParseStateFormat("int8-moments"), StateFormat::kInt8Moments);
  EXPECT_NE(ParseStateFormat("bf16").status().message().find("bf16-moments"),
            std::string::npos);
}

}  // namespace
}  // namespace mlpo
