// The AVX2 vector operations (8 fp32 lanes) the kernels' loops are
// written with (struct V; adam_simd.inc lists what it provides), for the
// avx2 units only (*_avx2.cc, compiled with -mavx2 -mf16c): V lives in an
// unnamed namespace, so every function and instantiation on it has
// internal linkage and no other unit can be given this ISA's copy
// (scripts/check_isa_symbols.py).
#ifndef MLPO_OPTIMIZER_KERNEL_VEC_AVX2_H_
#define MLPO_OPTIMIZER_KERNEL_VEC_AVX2_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace mlpo {
namespace {

struct V {
  using F = __m256;
  using I = __m256i;
  static constexpr size_t kLanes = 8;
  static F Load(const float* p) { return _mm256_loadu_ps(p); }
  static F LoadA(const float* p) { return _mm256_load_ps(p); }
  static void Store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static void StoreA(float* p, F x) { _mm256_store_ps(p, x); }
  static F Set(float x) { return _mm256_set1_ps(x); }
  static I SetI(int32_t x) { return _mm256_set1_epi32(x); }
  static I ZeroI() { return _mm256_setzero_si256(); }
  static F Add(F a, F b) { return _mm256_add_ps(a, b); }
  static F Sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Div(F a, F b) { return _mm256_div_ps(a, b); }
  static F Sqrt(F a) { return _mm256_sqrt_ps(a); }
  static I AndI(I a, I b) { return _mm256_and_si256(a, b); }
  static I OrI(I a, I b) { return _mm256_or_si256(a, b); }
  static I AddI(I a, I b) { return _mm256_add_epi32(a, b); }
  static I SubI(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I MaxU(I a, I b) { return _mm256_max_epu32(a, b); }
  static I MinU(I a, I b) { return _mm256_min_epu32(a, b); }
  template <int k>
  static I Shl(I a) { return _mm256_slli_epi32(a, k); }
  template <int k>
  static I Shr(I a) { return _mm256_srli_epi32(a, k); }
  static I Bits(F a) { return _mm256_castps_si256(a); }
  static F Float(I a) { return _mm256_castsi256_ps(a); }
  static I SelectLess(F x, F bound, I a, I b) {
    return _mm256_blendv_epi8(
        b, a, _mm256_castps_si256(_mm256_cmp_ps(x, bound, _CMP_LT_OQ)));
  }

  static F LoadGrad(const void* base, DType t, size_t i) {
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

  static void StoreOut(void* base, DType t, size_t i, F x) {
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
            _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                             lsb),
            16);
        __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16),
                                      _mm256_set1_epi32(0x40));
        __m256i is_nan =
            _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
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

  static I LoadCodes(const void* base, size_t i) {
    return _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(
            static_cast<const uint8_t*>(base) + i)));
  }
  static void StoreCodes(void* base, size_t i, I q) {
    __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(q),
                                 _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64(
        reinterpret_cast<__m128i*>(static_cast<uint8_t*>(base) + i),
        _mm_packus_epi16(w, w));
  }
  static uint32_t MaxLane(I x) {
    alignas(32) uint32_t l[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(l), x);
    uint32_t r = 0;
    for (uint32_t a : l) r = r > a ? r : a;
    return r;
  }
};

}  // namespace
}  // namespace mlpo


#endif  // MLPO_OPTIMIZER_KERNEL_VEC_AVX2_H_
