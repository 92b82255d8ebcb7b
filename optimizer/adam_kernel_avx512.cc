// AVX-512 implementation of the fused Adam update (16 lanes). Same fp32
// operations in the same order as AdamUpdateScalar; compiled with
// -ffp-contract=off. Tails use the scalar code.
#include <immintrin.h>

#include "optimizer/adam_kernel.h"

namespace mlpo {
namespace {

inline __m512 LoadGrad(const void* base, DType t, size_t i) {
  switch (t) {
    case DType::kF32:
      return _mm512_loadu_ps(static_cast<const float*>(base) + i);
    case DType::kF16:
      return _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
    default: {
      __m256i h = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i));
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
}

inline void StoreOut(void* base, DType t, size_t i, __m512 x) {
  switch (t) {
    case DType::kF32:
      _mm512_storeu_ps(static_cast<float*>(base) + i, x);
      return;
    case DType::kF16:
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(static_cast<uint16_t*>(base) + i),
          _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      return;
    default: {
      __m512i u = _mm512_castps_si512(x);
      __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                     _mm512_set1_epi32(1));
      __m512i r = _mm512_srli_epi32(
          _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb),
          16);
      __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16),
                                    _mm512_set1_epi32(0x40));
      __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
      r = _mm512_mask_mov_epi32(r, is_nan, nan);
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(static_cast<uint16_t*>(base) + i),
          _mm512_cvtepi32_epi16(r));
      return;
    }
  }
}

}  // namespace

void AdamUpdateAvx512(const AdamSlice& s, const AdamStepConsts& c) {
  const __m512 decay = _mm512_set1_ps(c.decay), l2 = _mm512_set1_ps(c.l2),
               omb1 = _mm512_set1_ps(c.one_minus_b1),
               b2 = _mm512_set1_ps(c.b2), omb2 = _mm512_set1_ps(c.one_minus_b2),
               bc2 = _mm512_set1_ps(c.bc2_sqrt), eps = _mm512_set1_ps(c.eps),
               neg_step = _mm512_set1_ps(c.neg_step),
               gscale = _mm512_set1_ps(c.grad_scale);
  size_t i = 0;
  for (; i + 16 <= s.n; i += 16) {
    __m512 g = _mm512_mul_ps(LoadGrad(s.grad, s.grad_dtype, i), gscale);
    __m512 p = _mm512_mul_ps(_mm512_loadu_ps(s.p + i), decay);
    g = _mm512_add_ps(g, _mm512_mul_ps(l2, p));
    __m512 m = _mm512_loadu_ps(s.m + i);
    m = _mm512_add_ps(m, _mm512_mul_ps(omb1, _mm512_sub_ps(g, m)));
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(s.v + i), b2);
    v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), bc2), eps);
    p = _mm512_add_ps(p, _mm512_mul_ps(neg_step, _mm512_div_ps(m, denom)));
    _mm512_storeu_ps(s.p + i, p);
    _mm512_storeu_ps(s.m + i, m);
    _mm512_storeu_ps(s.v + i, v);
    if (s.out) StoreOut(s.out, s.out_dtype, i, p);
  }
  AdamUpdateScalarFrom(s, c, i);
}

}  // namespace mlpo
