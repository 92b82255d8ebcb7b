// AVX2 + F16C implementation of the fused Adam update (8 lanes). Same fp32
// operations in the same order as AdamUpdateScalar; compiled with
// -ffp-contract=off so no FMA changes a rounding. Tails use the scalar code.
#include <immintrin.h>

#include <algorithm>

#include "optimizer/adam_kernel.h"

namespace mlpo {
namespace {

inline __m256 LoadGrad(const void* base, DType t, size_t i) {
  switch (t) {
    case DType::kF32:
      return _mm256_loadu_ps(static_cast<const float*>(base) + i);
    case DType::kF16:
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
          static_cast<const uint16_t*>(base) + i)));
    default: {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(
          static_cast<const uint16_t*>(base) + i));
      return _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
}

inline void StoreOut(void* base, DType t, size_t i, __m256 x) {
  switch (t) {
    case DType::kF32:
      _mm256_storeu_ps(static_cast<float*>(base) + i, x);
      return;
    case DType::kF16:
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(static_cast<uint16_t*>(base) + i),
          _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
      return;
    default: {
      // Round to nearest even on the top 16 bits; NaN stays a quiet NaN.
      __m256i u = _mm256_castps_si256(x);
      __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16),
                                     _mm256_set1_epi32(1));
      __m256i r = _mm256_srli_epi32(
          _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb),
          16);
      __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16),
                                    _mm256_set1_epi32(0x40));
      __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
      r = _mm256_blendv_epi8(r, nan, is_nan);
      __m256i packed = _mm256_packus_epi32(r, r);
      packed = _mm256_permute4x64_epi64(packed, 0x08);
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(static_cast<uint16_t*>(base) + i),
          _mm256_castsi256_si128(packed));
      return;
    }
  }
}

// Widened m or v (f32 or bf16 storage).
inline __m256 LoadMoment(const void* base, StateFormat f, size_t i) {
  return LoadGrad(base, f == StateFormat::kF32 ? DType::kF32 : DType::kBF16,
                  i);
}
inline void StoreMoment(void* base, StateFormat f, size_t i, __m256 x) {
  StoreOut(base, f == StateFormat::kF32 ? DType::kF32 : DType::kBF16, i, x);
}

// The int8 code map (state_format.h), 8 lanes of int32 codes.
// The code's bits placed as an fp32's exponent and mantissa give its value
// times 2^-112 exactly (exponent 0 is an fp32 subnormal: the code's
// subnormals); one exact product scales it back. Needs subnormals read as
// they are: AdamUpdate runs the kernels with the default MXCSR.
template <int M>
inline __m256 DecodeMag(__m256i q) {
  return _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(q, 23 - M)),
                       _mm256_set1_ps(0x1p112f));
}
template <int M>
inline __m256i EncodeMag(__m256 x) {
  constexpr int k = 23 - M;
  __m256 is_sub = _mm256_cmp_ps(x, _mm256_set1_ps(0x1p-14f), _CMP_LT_OQ);
  __m256 t = _mm256_add_ps(
      _mm256_mul_ps(x, _mm256_set1_ps(static_cast<float>(1u << (14 + M)))),
      _mm256_set1_ps(8388608.0f));
  __m256i qs = _mm256_sub_epi32(_mm256_castps_si256(t),
                                _mm256_set1_epi32(0x4b000000));
  __m256i u = _mm256_castps_si256(x);
  u = _mm256_add_epi32(
      _mm256_add_epi32(u, _mm256_set1_epi32((1 << (k - 1)) - 1)),
      _mm256_and_si256(_mm256_srli_epi32(u, k), _mm256_set1_epi32(1)));
  __m256i qn = _mm256_sub_epi32(_mm256_srli_epi32(u, k),
                                _mm256_set1_epi32((127 - 15) << M));
  __m256i q = _mm256_blendv_epi8(qn, qs, _mm256_castps_si256(is_sub));
  return _mm256_min_epu32(q, _mm256_set1_epi32((1 << (4 + M)) - 1));
}
inline __m256i LoadCodes(const void* base, size_t i) {
  return _mm256_cvtepu8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(
          static_cast<const uint8_t*>(base) + i)));
}
inline void StoreCodes(void* base, size_t i, __m256i q) {
  __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(q),
                               _mm256_extracti128_si256(q, 1));
  _mm_storel_epi64(
      reinterpret_cast<__m128i*>(static_cast<uint8_t*>(base) + i),
      _mm_packus_epi16(w, w));
}
inline uint32_t MaxLanes(__m256i x) {
  alignas(32) uint32_t l[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), x);
  uint32_t r = 0;
  for (uint32_t a : l) r = r > a ? r : a;
  return r;
}

struct Consts {
  explicit Consts(const AdamStepConsts& c)
      : decay(_mm256_set1_ps(c.decay)),
        l2(_mm256_set1_ps(c.l2)),
        omb1(_mm256_set1_ps(c.one_minus_b1)),
        b2(_mm256_set1_ps(c.b2)),
        omb2(_mm256_set1_ps(c.one_minus_b2)),
        bc2(_mm256_set1_ps(c.bc2_sqrt)),
        eps(_mm256_set1_ps(c.eps)),
        neg_step(_mm256_set1_ps(c.neg_step)),
        gscale(_mm256_set1_ps(c.grad_scale)) {}
  __m256 decay, l2, omb1, b2, omb2, bc2, eps, neg_step, gscale;
};

// AdamElement on 8 lanes: updates p, m, v; returns sqrt of the new v.
inline __m256 Adam8(const Consts& k, __m256 g, __m256* p, __m256* m,
                    __m256* v) {
  g = _mm256_mul_ps(g, k.gscale);
  *p = _mm256_mul_ps(*p, k.decay);
  g = _mm256_add_ps(g, _mm256_mul_ps(k.l2, *p));
  *m = _mm256_add_ps(*m, _mm256_mul_ps(k.omb1, _mm256_sub_ps(g, *m)));
  *v = _mm256_mul_ps(*v, k.b2);
  *v = _mm256_add_ps(*v, _mm256_mul_ps(_mm256_mul_ps(k.omb2, g), g));
  __m256 root = _mm256_sqrt_ps(*v);
  __m256 denom = _mm256_add_ps(_mm256_div_ps(root, k.bc2), k.eps);
  *p = _mm256_add_ps(*p, _mm256_mul_ps(k.neg_step, _mm256_div_ps(*m, denom)));
  return root;
}

void Int8Blocks(const AdamSlice& s, const AdamStepConsts& c) {
  const Consts k(c);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  alignas(32) float mt[kQuantBlock], rt[kQuantBlock];
  for (size_t b0 = 0, b = 0; b0 < s.n; b0 += kQuantBlock, ++b) {
    const size_t end = s.n - b0 < kQuantBlock ? s.n : b0 + kQuantBlock;
    const __m256 sm = _mm256_set1_ps(s.ms[b]), sv = _mm256_set1_ps(s.vs[b]);
    __m256i amv = _mm256_setzero_si256(), arv = _mm256_setzero_si256();
    size_t i = b0;
    for (; i + 8 <= end; i += 8) {
      __m256i mq = LoadCodes(s.m, i);
      __m256 m = _mm256_mul_ps(
          DecodeMag<kM8Mantissa>(_mm256_and_si256(mq, _mm256_set1_epi32(0x7f))),
          sm);
      m = _mm256_castsi256_ps(_mm256_or_si256(
          _mm256_castps_si256(m),
          _mm256_slli_epi32(_mm256_srli_epi32(mq, 7), 31)));
      __m256 r = _mm256_mul_ps(DecodeMag<kV8Mantissa>(LoadCodes(s.v, i)), sv);
      __m256 v = _mm256_mul_ps(r, r);
      __m256 p = _mm256_loadu_ps(s.p + i);
      __m256 root = Adam8(k, LoadGrad(s.grad, s.grad_dtype, i), &p, &m, &v);
      _mm256_storeu_ps(s.p + i, p);
      if (s.out) StoreOut(s.out, s.out_dtype, i, p);
      _mm256_store_ps(mt + (i - b0), m);
      _mm256_store_ps(rt + (i - b0), root);
      amv = _mm256_max_epu32(amv,
                             _mm256_and_si256(_mm256_castps_si256(m), abs_mask));
      arv = _mm256_max_epu32(
          arv, _mm256_and_si256(_mm256_castps_si256(root), abs_mask));
    }
    uint32_t am = MaxLanes(amv), ar = MaxLanes(arv);
    Int8PassScalar(s, c, b, b0, i, end, mt, rt, &am, &ar);
    s.ms[b] = BlockScale(am, kM8Max);
    s.vs[b] = BlockScale(ar, kV8Max);
    const __m256 nm = _mm256_set1_ps(InverseScale(s.ms[b])),
                 nv = _mm256_set1_ps(InverseScale(s.vs[b]));
    const bool mzero = s.ms[b] == 0.0f, vzero = s.vs[b] == 0.0f;
    for (i = b0; i + 8 <= end; i += 8) {
      __m256 m = _mm256_load_ps(mt + (i - b0));
      __m256i mi = _mm256_castps_si256(m);
      __m256i mq =
          mzero ? _mm256_setzero_si256()
                : EncodeMag<kM8Mantissa>(_mm256_mul_ps(
                      _mm256_castsi256_ps(_mm256_and_si256(mi, abs_mask)), nm));
      mq = _mm256_or_si256(mq, _mm256_slli_epi32(_mm256_srli_epi32(mi, 31), 7));
      __m256i vq = vzero ? _mm256_setzero_si256()
                         : EncodeMag<kV8Mantissa>(
                               _mm256_mul_ps(_mm256_load_ps(rt + (i - b0)), nv));
      StoreCodes(s.m, i, mq);
      StoreCodes(s.v, i, vq);
    }
    EncodeBlockScalar(s, b, b0, i, end, mt, rt);
  }
}

}  // namespace

size_t AccumulateGradStatsAvx2(const void* grad, DType dtype, size_t n,
                               double lanes[16], uint64_t* nonfinite_out) {
  // Accumulator k holds lanes 4k..4k+3 of the 16 (element i -> i % 16).
  __m256d acc[4];
  for (int k = 0; k < 4; ++k) acc[k] = _mm256_loadu_pd(lanes + 4 * k);
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  uint64_t nonfinite = 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int h = 0; h < 2; ++h) {
      __m256 g = LoadGrad(grad, dtype, i + 8 * h);
      __m256i e = _mm256_and_si256(_mm256_castps_si256(g), exp_mask);
      __m256i bad = _mm256_cmpeq_epi32(e, exp_mask);
      nonfinite += static_cast<uint64_t>(__builtin_popcount(
          _mm256_movemask_ps(_mm256_castsi256_ps(bad))));
      g = _mm256_andnot_ps(_mm256_castsi256_ps(bad), g);
      __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(g));
      __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(g, 1));
      acc[2 * h] = _mm256_add_pd(acc[2 * h], _mm256_mul_pd(lo, lo));
      acc[2 * h + 1] = _mm256_add_pd(acc[2 * h + 1], _mm256_mul_pd(hi, hi));
    }
  }
  for (int k = 0; k < 4; ++k) _mm256_storeu_pd(lanes + 4 * k, acc[k]);
  *nonfinite_out += nonfinite;
  return i;
}

void AdamUpdateAvx2(const AdamSlice& s, const AdamStepConsts& c) {
  if (s.format == StateFormat::kInt8Moments) return Int8Blocks(s, c);
  const Consts k(c);
  size_t i = 0;
  for (; i + 8 <= s.n; i += 8) {
    __m256 p = _mm256_loadu_ps(s.p + i);
    __m256 m = LoadMoment(s.m, s.format, i);
    __m256 v = LoadMoment(s.v, s.format, i);
    Adam8(k, LoadGrad(s.grad, s.grad_dtype, i), &p, &m, &v);
    _mm256_storeu_ps(s.p + i, p);
    StoreMoment(s.m, s.format, i, m);
    StoreMoment(s.v, s.format, i, v);
    if (s.out) StoreOut(s.out, s.out_dtype, i, p);
  }
  AdamUpdateScalarFrom(s, c, i);
}

}  // namespace mlpo
