#include "optimizer/adam_kernel.h"

#include <cpuid.h>
#include <xmmintrin.h>

#include <algorithm>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace mlpo {

AdamStepConsts MakeStepConsts(const RuleHyper& h, uint64_t t,
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
  c.grad_scale = static_cast<float>(h.maximize ? -grad_scale : grad_scale);
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
  // IEEE defaults (round to nearest, no flush-to-zero, no denormals-are-
  // zero) whatever the calling thread set (torch.set_flush_denormal sets
  // FTZ/DAZ on its threads): every ISA and the reference then round alike.
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(0x1f80);
  switch (isa) {
    case KernelIsa::kAvx512: AdamUpdateAvx512(s, c); break;
    case KernelIsa::kAvx2: AdamUpdateAvx2(s, c); break;
    default: AdamUpdateScalar(s, c); break;
  }
  _mm_setcsr(csr);
}

namespace {
// The update of one element, m and v in fp32; returns sqrt of the new v.
inline float AdamElement(float g, float* p_io, float* m_io, float* v_io,
                         const AdamStepConsts& c) {
  g = g * c.grad_scale;
  float p = *p_io * c.decay;
  g = g + c.l2 * p;
  float m = *m_io;
  m = m + c.one_minus_b1 * (g - m);
  float v = *v_io * c.b2;
  v = v + (c.one_minus_b2 * g) * g;
  float root = std::sqrt(v);
  float denom = root / c.bc2_sqrt + c.eps;
  *p_io = p + c.neg_step * (m / denom);
  *m_io = m;
  *v_io = v;
  return root;
}
}  // namespace

void Int8PassScalar(const AdamSlice& s, const AdamStepConsts& c, size_t b,
                    size_t b0, size_t from, size_t to, float* mt, float* rt,
                    uint32_t* am, uint32_t* ar) {
  const uint8_t* mc = static_cast<const uint8_t*>(s.m);
  const uint8_t* vc = static_cast<const uint8_t*>(s.v);
  for (size_t i = from; i < to; ++i) {
    float m = DecodeM8(mc[i], s.ms[b]);
    float r = DecodeV8(vc[i], s.vs[b]);
    float v = r * r;
    float root =
        AdamElement(LoadAsFloat(s.grad, s.grad_dtype, i), s.p + i, &m, &v, c);
    if (s.out) StoreFromFloat(s.out, s.out_dtype, i, s.p[i]);
    mt[i - b0] = m;
    rt[i - b0] = root;
    *am = std::max(*am, FloatBits(m) & 0x7fffffffu);
    *ar = std::max(*ar, FloatBits(root) & 0x7fffffffu);
  }
}

void EncodeBlockScalar(const AdamSlice& s, size_t b, size_t b0, size_t from,
                       size_t to, const float* mt, const float* rt) {
  uint8_t* mc = static_cast<uint8_t*>(s.m);
  uint8_t* vc = static_cast<uint8_t*>(s.v);
  for (size_t i = from; i < to; ++i) {
    mc[i] = EncodeM8(mt[i - b0], s.ms[b]);
    vc[i] = EncodeV8(rt[i - b0], s.vs[b]);
  }
}

void AdamUpdateScalar(const AdamSlice& s, const AdamStepConsts& c) {
  switch (s.format) {
    case StateFormat::kF32: {
      float* m = static_cast<float*>(s.m);
      float* v = static_cast<float*>(s.v);
      for (size_t i = 0; i < s.n; ++i) {
        AdamElement(LoadAsFloat(s.grad, s.grad_dtype, i), s.p + i, m + i,
                    v + i, c);
        if (s.out) StoreFromFloat(s.out, s.out_dtype, i, s.p[i]);
      }
      return;
    }
    case StateFormat::kBF16Moments: {
      uint16_t* mh = static_cast<uint16_t*>(s.m);
      uint16_t* vh = static_cast<uint16_t*>(s.v);
      for (size_t i = 0; i < s.n; ++i) {
        float m = BF16ToFloat(mh[i]), v = BF16ToFloat(vh[i]);
        AdamElement(LoadAsFloat(s.grad, s.grad_dtype, i), s.p + i, &m, &v, c);
        mh[i] = FloatToBF16(m);
        vh[i] = FloatToBF16(v);
        if (s.out) StoreFromFloat(s.out, s.out_dtype, i, s.p[i]);
      }
      return;
    }
    case StateFormat::kInt8Moments: {
      float mt[kQuantBlock], rt[kQuantBlock];
      for (size_t b0 = 0, b = 0; b0 < s.n; b0 += kQuantBlock, ++b) {
        size_t end = std::min<size_t>(b0 + kQuantBlock, s.n);
        uint32_t am = 0, ar = 0;
        Int8PassScalar(s, c, b, b0, b0, end, mt, rt, &am, &ar);
        s.ms[b] = BlockScale(am, kM8Max);
        s.vs[b] = BlockScale(ar, kV8Max);
        EncodeBlockScalar(s, b, b0, b0, end, mt, rt);
      }
      return;
    }
  }
}

void AdamUpdateScalarFrom(const AdamSlice& s, const AdamStepConsts& c,
                          size_t from) {
  if (from >= s.n) return;
  AdamSlice tail = s;
  tail.p += from;
  const size_t msize = MomentBytes(s.format);  // not int8: whole blocks
  tail.m = static_cast<char*>(s.m) + from * msize;
  tail.v = static_cast<char*>(s.v) + from * msize;
  tail.grad = static_cast<const char*>(s.grad) + from * DTypeSize(s.grad_dtype);
  if (s.out)
    tail.out = static_cast<char*>(s.out) + from * DTypeSize(s.out_dtype);
  tail.n = s.n - from;
  AdamUpdateScalar(tail, c);
}

GradStats FinishGradStats(const void* grad, DType dtype, size_t from,
                          size_t n, double acc[16], uint64_t nonfinite) {
  GradStats st;
  st.nonfinite = nonfinite;
  for (size_t i = from; i < n; ++i) {
    float g = LoadAsFloat(grad, dtype, i);
    if (!std::isfinite(g)) {
      ++st.nonfinite;
      continue;
    }
    acc[i & 15] += static_cast<double>(g) * static_cast<double>(g);
  }
  for (int w = 1; w < 16; w *= 2)
    for (int k = 0; k < 16; k += 2 * w) acc[k] = acc[k] + acc[k + w];
  st.sum_sq = acc[0];
  return st;
}

namespace {
// The vector part of the statistics of grad[0, n) on `isa`, added to acc
// and *nonfinite; returns the elements taken (none for the scalar path).
size_t AccumulateGradStats(const void* grad, DType dtype, size_t n,
                           KernelIsa isa, double acc[16],
                           uint64_t* nonfinite) {
  switch (isa) {
    case KernelIsa::kAvx512:
      return AccumulateGradStatsAvx512(grad, dtype, n, acc, nonfinite);
    case KernelIsa::kAvx2:
      return AccumulateGradStatsAvx2(grad, dtype, n, acc, nonfinite);
    default:
      return 0;
  }
}
}  // namespace

GradStats ComputeGradStats(const void* grad, DType dtype, size_t n,
                           KernelIsa isa) {
  double acc[16] = {};
  uint64_t nonfinite = 0;
  size_t i = AccumulateGradStats(grad, dtype, n, isa, acc, &nonfinite);
  return FinishGradStats(grad, dtype, i, n, acc, nonfinite);
}

GradStats CopyGradStats(void* dst, const void* src, DType dtype, size_t n,
                        KernelIsa isa) {
  const size_t es = DTypeSize(dtype);
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  double acc[16] = {};
  uint64_t nonfinite = 0;
  if (isa == KernelIsa::kAvx512) {  // one loop: load, store, add
    size_t i = CopyAccumulateGradStatsAvx512(dst, src, dtype, n, acc,
                                             &nonfinite);
    if (i < n) std::memcpy(d + i * es, s + i * es, (n - i) * es);
    return FinishGradStats(dst, dtype, i, n, acc, nonfinite);
  }
  // Pieces of 16 Ki elements (32 KiB of fp16: the statistics read them from
  // L1/L2), a multiple of 16 so the accumulators carry over exactly. The
  // scalar path accumulates only in FinishGradStats: one piece then.
  const size_t piece = isa == KernelIsa::kScalar ? n : size_t{16} << 10;
  size_t i = 0;  // elements accumulated: all but the last piece's tail
  for (size_t at = 0; at < n; at += piece) {
    size_t k = std::min(piece, n - at);
    std::memcpy(d + at * es, s + at * es, k * es);
    i = at + AccumulateGradStats(d + at * es, dtype, k, isa, acc, &nonfinite);
  }
  return FinishGradStats(dst, dtype, i, n, acc, nonfinite);
}

bool AdoptModelValues(float* p, const void* model, DType model_dtype,
                      size_t n) {
  if (model_dtype == DType::kF32) {
    if (std::memcmp(p, model, n * sizeof(float)) == 0) return false;
    std::memcpy(p, model, n * sizeof(float));
    return true;
  }
  const uint16_t* h = static_cast<const uint16_t*>(model);
  bool changed = false;
  if (model_dtype == DType::kBF16) {
    for (size_t i = 0; i < n; ++i)
      if (FloatToBF16(p[i]) != h[i]) p[i] = BF16ToFloat(h[i]), changed = true;
  } else {
    for (size_t i = 0; i < n; ++i)
      if (FloatToF16(p[i]) != h[i]) p[i] = F16ToFloat(h[i]), changed = true;
  }
  return changed;
}

void CastParams(const float* p, void* out, DType dtype, size_t n) {
  if (dtype == DType::kF32) {
    std::memcpy(out, p, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) StoreFromFloat(out, dtype, i, p[i]);
}

}  // namespace mlpo
