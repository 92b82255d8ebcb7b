#include "optimizer/adam_kernel.h"

#include <cpuid.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace mlpo {

AdamStepConsts MakeStepConsts(const AdamHyper& h, uint64_t t,
                              double grad_scale) {
  AdamStepConsts c;
  bool adamw = h.mode == AdamMode::kAdamW;
  c.decay = static_cast<float>(adamw ? 1.0 - h.lr * h.weight_decay : 1.0);
  c.l2 = static_cast<float>(adamw ? 0.0 : h.weight_decay);
  c.one_minus_b1 = static_cast<float>(1.0 - h.beta1);
  c.b2 = static_cast<float>(h.beta2);
  c.one_minus_b2 = static_cast<float>(1.0 - h.beta2);
  double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(t));
  double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(t));
  c.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  c.eps = static_cast<float>(h.eps);
  c.neg_step = static_cast<float>(-(h.lr / bc1));
  c.grad_scale = static_cast<float>(grad_scale);
  return c;
}

const char* KernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512: return "avx512";
    case KernelIsa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

namespace {
// CPUID.1:ECX bit 29 (clang 14's __builtin_cpu_supports does not know f16c).
bool HasF16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
}  // namespace

bool KernelIsaSupported(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
    case KernelIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && HasF16c();
    default:
      return true;
  }
}

KernelIsa BestKernelIsa() {
  static const KernelIsa best = [] {
    KernelIsa cap = KernelIsa::kAvx512;
    if (const char* e = std::getenv("MLPO_KERNEL_ISA")) {
      if (std::strcmp(e, "scalar") == 0) cap = KernelIsa::kScalar;
      else if (std::strcmp(e, "avx2") == 0) cap = KernelIsa::kAvx2;
    }
    for (KernelIsa k : {KernelIsa::kAvx512, KernelIsa::kAvx2})
      if (static_cast<int>(k) <= static_cast<int>(cap) && KernelIsaSupported(k))
        return k;
    return KernelIsa::kScalar;
  }();
  return best;
}

void AdamUpdate(const AdamSlice& s, const AdamStepConsts& c, KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512: return AdamUpdateAvx512(s, c);
    case KernelIsa::kAvx2: return AdamUpdateAvx2(s, c);
    default: return AdamUpdateScalar(s, c);
  }
}

void AdamUpdateScalar(const AdamSlice& s, const AdamStepConsts& c) {
  for (size_t i = 0; i < s.n; ++i) {
    float g = LoadAsFloat(s.grad, s.grad_dtype, i) * c.grad_scale;
    float p = s.p[i];
    p = p * c.decay;
    g = g + c.l2 * p;
    float m = s.m[i];
    m = m + c.one_minus_b1 * (g - m);
    float v = s.v[i] * c.b2;
    v = v + (c.one_minus_b2 * g) * g;
    float denom = std::sqrt(v) / c.bc2_sqrt + c.eps;
    p = p + c.neg_step * (m / denom);
    s.p[i] = p;
    s.m[i] = m;
    s.v[i] = v;
    if (s.out) StoreFromFloat(s.out, s.out_dtype, i, p);
  }
}

void AdamUpdateScalarFrom(const AdamSlice& s, const AdamStepConsts& c,
                          size_t from) {
  if (from >= s.n) return;
  AdamSlice tail = s;
  tail.p += from;
  tail.m += from;
  tail.v += from;
  tail.grad = static_cast<const char*>(s.grad) + from * DTypeSize(s.grad_dtype);
  if (s.out)
    tail.out = static_cast<char*>(s.out) + from * DTypeSize(s.out_dtype);
  tail.n = s.n - from;
  AdamUpdateScalar(tail, c);
}

GradStats ComputeGradStats(const void* grad, DType dtype, size_t n) {
  GradStats st;
  double acc[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < n; ++i) {
    float g = LoadAsFloat(grad, dtype, i);
    if (!std::isfinite(g)) {
      ++st.nonfinite;
      continue;
    }
    acc[i & 3] += static_cast<double>(g) * g;
  }
  st.sum_sq = acc[0] + acc[1] + acc[2] + acc[3];
  return st;
}

void AdoptModelValues(float* p, const void* model, DType model_dtype,
                      size_t n) {
  if (model_dtype == DType::kF32) {
    std::memcpy(p, model, n * sizeof(float));
    return;
  }
  const uint16_t* h = static_cast<const uint16_t*>(model);
  if (model_dtype == DType::kBF16) {
    for (size_t i = 0; i < n; ++i)
      if (FloatToBF16(p[i]) != h[i]) p[i] = BF16ToFloat(h[i]);
  } else {
    for (size_t i = 0; i < n; ++i)
      if (FloatToF16(p[i]) != h[i]) p[i] = F16ToFloat(h[i]);
  }
}

void CastParams(const float* p, void* out, DType dtype, size_t n) {
  if (dtype == DType::kF32) {
    std::memcpy(out, p, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) StoreFromFloat(out, dtype, i, p[i]);
}

}  // namespace mlpo
