#include "optimizer/kernel/rule_kernels.h"

#include <algorithm>

namespace mlpo {

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

// Slot k's scale of the block at element a (int8; the slice starts a
// block), else nullptr.
float* ScaleOf(const RuleSlice& s, int k, size_t a) {
  return s.scale[k] ? s.scale[k] + a / kQuantBlock : nullptr;
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
        DecodeBlock(s.format, s.nonneg[k],
                    static_cast<const char*>(s.slot[k]) + a * MomentBytes(s.format),
                    ScaleOf(s, k, a), n, tmp[k]);
        slot[k] = tmp[k];
      }
    }
    Loop(isa, n, s.p + a, slot[0], slot[1], slot[2], gp, c);
    if (!f32)
      for (int k = 0; k < s.slots; ++k)
        EncodeBlock(s.format, s.nonneg[k], tmp[k], n,
                    static_cast<char*>(s.slot[k]) + a * MomentBytes(s.format),
                    ScaleOf(s, k, a));
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
  IeeeDefaults ieee;  // as AdamUpdate
  GenericUpdate(s, c, isa);
}

}  // namespace mlpo
