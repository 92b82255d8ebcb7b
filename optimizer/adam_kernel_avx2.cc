// AVX2 + F16C implementation of the fused Adam update (8 lanes). Same fp32
// operations in the same order as AdamUpdateScalar; compiled with
// -ffp-contract=off so no FMA changes a rounding. Tails use the scalar code.
#include <immintrin.h>

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

}  // namespace

void AdamUpdateAvx2(const AdamSlice& s, const AdamStepConsts& c) {
  const __m256 decay = _mm256_set1_ps(c.decay), l2 = _mm256_set1_ps(c.l2),
               omb1 = _mm256_set1_ps(c.one_minus_b1),
               b2 = _mm256_set1_ps(c.b2), omb2 = _mm256_set1_ps(c.one_minus_b2),
               bc2 = _mm256_set1_ps(c.bc2_sqrt), eps = _mm256_set1_ps(c.eps),
               neg_step = _mm256_set1_ps(c.neg_step),
               gscale = _mm256_set1_ps(c.grad_scale);
  size_t i = 0;
  for (; i + 8 <= s.n; i += 8) {
    __m256 g = _mm256_mul_ps(LoadGrad(s.grad, s.grad_dtype, i), gscale);
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(s.p + i), decay);
    g = _mm256_add_ps(g, _mm256_mul_ps(l2, p));
    __m256 m = _mm256_loadu_ps(s.m + i);
    m = _mm256_add_ps(m, _mm256_mul_ps(omb1, _mm256_sub_ps(g, m)));
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s.v + i), b2);
    v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), bc2), eps);
    p = _mm256_add_ps(p, _mm256_mul_ps(neg_step, _mm256_div_ps(m, denom)));
    _mm256_storeu_ps(s.p + i, p);
    _mm256_storeu_ps(s.m + i, m);
    _mm256_storeu_ps(s.v + i, v);
    if (s.out) StoreOut(s.out, s.out_dtype, i, p);
  }
  AdamUpdateScalarFrom(s, c, i);
}

}  // namespace mlpo
