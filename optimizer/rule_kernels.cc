#include "optimizer/rule_kernels.h"

#include <xmmintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "optimizer/rules.h"

namespace mlpo {

RuleConsts MakeRuleConsts(RuleKind kind, const RuleHyper& h, uint64_t t,
                          double grad_scale) {
  RuleConsts c;
  c.kind = kind;
  c.grad_scale = static_cast<float>(h.maximize ? -grad_scale : grad_scale);
  rules::WithRule(kind, [&]<typename Rule>() {
    Rule::Consts(h, t, grad_scale, &c);
  });
  return c;
}

namespace {

void Loop(KernelIsa isa, size_t n, float* p, float* s0, float* s1, float* s2,
          const float* g, const RuleConsts& c) {
  switch (isa) {
    case KernelIsa::kAvx512: RuleLoopAvx512(n, p, s0, s1, s2, g, c); break;
    case KernelIsa::kAvx2: RuleLoopAvx2(n, p, s0, s1, s2, g, c); break;
    default: RuleLoopScalar(n, p, s0, s1, s2, g, c); break;
  }
}

void Widen(KernelIsa isa, size_t n, const void* src, DType dt, float* dst) {
  switch (isa) {
    case KernelIsa::kAvx512: RuleWidenAvx512(n, src, dt, dst); break;
    case KernelIsa::kAvx2: RuleWidenAvx2(n, src, dt, dst); break;
    default: RuleWidenScalar(n, src, dt, dst); break;
  }
}

void Cast(KernelIsa isa, size_t n, const float* p, void* out, DType dt) {
  switch (isa) {
    case KernelIsa::kAvx512: RuleCastAvx512(n, p, out, dt); break;
    case KernelIsa::kAvx2: RuleCastAvx2(n, p, out, dt); break;
    default: RuleCastScalar(n, p, out, dt); break;
  }
}

// Slot k of `s` for elements [a, a + n) (one block) into fp32 `dst`.
void DecodeSlot(const RuleSlice& s, int k, size_t a, size_t n, float* dst) {
  if (s.format == StateFormat::kBF16Moments) {
    const uint16_t* h = static_cast<const uint16_t*>(s.slot[k]) + a;
    for (size_t i = 0; i < n; ++i) dst[i] = BF16ToFloat(h[i]);
    return;
  }
  const uint8_t* q = static_cast<const uint8_t*>(s.slot[k]) + a;
  const float sc = s.scale[k][a / kQuantBlock];
  if (s.nonneg[k]) {
    for (size_t i = 0; i < n; ++i) {
      float r = DecodeV8(q[i], sc);
      dst[i] = r * r;
    }
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = DecodeM8(q[i], sc);
  }
}

// fp32 `src` back into slot k (int8: the block's new scale first).
void EncodeSlot(const RuleSlice& s, int k, size_t a, size_t n,
                const float* src) {
  if (s.format == StateFormat::kBF16Moments) {
    uint16_t* h = static_cast<uint16_t*>(s.slot[k]) + a;
    for (size_t i = 0; i < n; ++i) h[i] = FloatToBF16(src[i]);
    return;
  }
  uint8_t* q = static_cast<uint8_t*>(s.slot[k]) + a;
  float* sc = &s.scale[k][a / kQuantBlock];
  uint32_t amax = 0;
  if (s.nonneg[k]) {
    float root[kQuantBlock];
    for (size_t i = 0; i < n; ++i) {
      root[i] = std::sqrt(src[i]);
      amax = std::max(amax, FloatBits(root[i]) & 0x7fffffffu);
    }
    *sc = BlockScale(amax, kV8Max);
    for (size_t i = 0; i < n; ++i) q[i] = EncodeV8(root[i], *sc);
  } else {
    for (size_t i = 0; i < n; ++i)
      amax = std::max(amax, FloatBits(src[i]) & 0x7fffffffu);
    *sc = BlockScale(amax, kM8Max);
    for (size_t i = 0; i < n; ++i) q[i] = EncodeM8(src[i], *sc);
  }
}

void GenericUpdate(const RuleSlice& s, const RuleConsts& c, KernelIsa isa) {
  const bool f32 = s.format == StateFormat::kF32;
  const size_t gsize = DTypeSize(s.grad_dtype);
  float g[kQuantBlock];
  float tmp[kMaxRuleSlots][kQuantBlock];
  for (size_t a = 0; a < s.n; a += kQuantBlock) {
    const size_t n = std::min<size_t>(kQuantBlock, s.n - a);
    const float* gp;
    if (s.grad_dtype == DType::kF32) {
      gp = static_cast<const float*>(s.grad) + a;
    } else {
      Widen(isa, n, static_cast<const char*>(s.grad) + a * gsize,
            s.grad_dtype, g);
      gp = g;
    }
    float* slot[kMaxRuleSlots] = {nullptr, nullptr, nullptr};
    for (int k = 0; k < s.slots; ++k) {
      if (f32) {
        slot[k] = static_cast<float*>(s.slot[k]) + a;
      } else {
        DecodeSlot(s, k, a, n, tmp[k]);
        slot[k] = tmp[k];
      }
    }
    Loop(isa, n, s.p + a, slot[0], slot[1], slot[2], gp, c);
    if (!f32)
      for (int k = 0; k < s.slots; ++k) EncodeSlot(s, k, a, n, tmp[k]);
    if (s.out)
      Cast(isa, n, s.p + a,
           static_cast<char*>(s.out) + a * DTypeSize(s.out_dtype),
           s.out_dtype);
  }
}

}  // namespace

void RuleUpdate(const RuleSlice& s, const RuleConsts& c, KernelIsa isa) {
  if (c.kind == RuleKind::kAdam && !c.amsgrad && s.slots >= 2) {
    AdamSlice a;
    a.p = s.p;
    a.m = s.slot[0];
    a.v = s.slot[1];
    a.grad = s.grad;
    a.grad_dtype = s.grad_dtype;
    a.out = s.out;
    a.out_dtype = s.out_dtype;
    a.n = s.n;
    a.format = s.format;
    a.ms = s.scale[0];
    a.vs = s.scale[1];
    AdamUpdate(a, c.adam, isa);
    return;
  }
  // IEEE defaults whatever the calling thread set (as AdamUpdate).
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(0x1f80);
  GenericUpdate(s, c, isa);
  _mm_setcsr(csr);
}

}  // namespace mlpo
