// The AVX-512 vector operations (16 fp32 lanes) the kernels' loops are
// written with (struct V; adam_simd.inc lists what it provides), for the
// avx512 units only (*_avx512.cc, compiled with -mavx512f -mavx512bw -mavx512vl): V lives in an
// unnamed namespace, so every function and instantiation on it has
// internal linkage and no other unit can be given this ISA's copy
// (scripts/check_isa_symbols.py).
#ifndef MLPO_OPTIMIZER_KERNEL_VEC_AVX512_H_
#define MLPO_OPTIMIZER_KERNEL_VEC_AVX512_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace mlpo {
namespace {

struct V {
  using F = __m512;
  using I = __m512i;
  static constexpr size_t kLanes = 16;
  static F Load(const float* p) { return _mm512_loadu_ps(p); }
  static F LoadA(const float* p) { return _mm512_load_ps(p); }
  static void Store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static void StoreA(float* p, F x) { _mm512_store_ps(p, x); }
  static F Set(float x) { return _mm512_set1_ps(x); }
  static I SetI(int32_t x) { return _mm512_set1_epi32(x); }
  static I ZeroI() { return _mm512_setzero_si512(); }
  static F Add(F a, F b) { return _mm512_add_ps(a, b); }
  static F Sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm512_div_ps(a, b); }
  static F Sqrt(F a) { return _mm512_sqrt_ps(a); }
  static I AndI(I a, I b) { return _mm512_and_si512(a, b); }
  static I OrI(I a, I b) { return _mm512_or_si512(a, b); }
  static I AddI(I a, I b) { return _mm512_add_epi32(a, b); }
  static I SubI(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I MaxU(I a, I b) { return _mm512_max_epu32(a, b); }
  static I MinU(I a, I b) { return _mm512_min_epu32(a, b); }
  template <int k>
  static I Shl(I a) { return _mm512_slli_epi32(a, k); }
  template <int k>
  static I Shr(I a) { return _mm512_srli_epi32(a, k); }
  static I Bits(F a) { return _mm512_castps_si512(a); }
  static F Float(I a) { return _mm512_castsi512_ps(a); }
  static I SelectLess(F x, F bound, I a, I b) {
    return _mm512_mask_mov_epi32(b, _mm512_cmp_ps_mask(x, bound, _CMP_LT_OQ),
                                 a);
  }

  static F LoadGrad(const void* base, DType t, size_t i) {
    switch (t) {
      case DType::kF32:
        return _mm512_loadu_ps(static_cast<const float*>(base) + i);
      case DType::kF16:
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
            static_cast<const uint16_t*>(base) + i)));
      default: {
        __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
            static_cast<const uint16_t*>(base) + i));
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      }
    }
  }

  static void StoreOut(void* base, DType t, size_t i, F x) {
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
        // Round to nearest even on the top 16 bits; NaN stays a quiet NaN.
        __m512i u = _mm512_castps_si512(x);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                       _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                             lsb),
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

  static I LoadCodes(const void* base, size_t i) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(base) + i)));
  }
  static void StoreCodes(void* base, size_t i, I q) {
    _mm_storeu_si128(
        reinterpret_cast<__m128i*>(static_cast<uint8_t*>(base) + i),
        _mm512_cvtepi32_epi8(q));
  }
  static uint32_t MaxLane(I x) { return _mm512_reduce_max_epu32(x); }
};

}  // namespace
}  // namespace mlpo


#endif  // MLPO_OPTIMIZER_KERNEL_VEC_AVX512_H_
