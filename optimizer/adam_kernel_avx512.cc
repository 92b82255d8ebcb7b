// AVX-512 implementation of the fused Adam update (16 lanes): the vector
// operations of this ISA (struct V) for the loops written once in
// adam_kernel_simd.inc, and the gradient statistics (with the copying form
// the gradient stage uses). Compiled with -ffp-contract=off. Tails use the
// scalar code.
#include <immintrin.h>

#include <algorithm>

#include "optimizer/adam_kernel.h"

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

#include "optimizer/adam_kernel_simd.inc"

namespace mlpo {
namespace {

// Adds g's 16 values to the statistics: lane j to accumulator j (lo_acc
// holds 0..7, hi_acc 8..15); non-finite values are counted, not summed
// (rare: a branch, not work on every group). Each square is exact in
// double, so the fused multiply-add rounds as a multiply then an add would
// (the other ISAs' order, bit for bit).
inline void AddStats(__m512 g, __m512d* lo_acc, __m512d* hi_acc,
                     uint64_t* nonfinite) {
  const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
  __mmask16 bad = _mm512_cmpeq_epi32_mask(
      _mm512_and_si512(_mm512_castps_si512(g), exp_mask), exp_mask);
  if (__builtin_expect(bad != 0, 0)) {
    *nonfinite += static_cast<uint64_t>(__builtin_popcount(bad));
    g = _mm512_maskz_mov_ps(static_cast<__mmask16>(~bad), g);
  }
  __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(g));
  __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(
      _mm512_extractf64x4_pd(_mm512_castps_pd(g), 1)));
  *lo_acc = _mm512_fmadd_pd(lo, lo, *lo_acc);
  *hi_acc = _mm512_fmadd_pd(hi, hi, *hi_acc);
}

// The copying form: each group of 16 is loaded once, stored to dst and
// added to the statistics from the register. (Streaming stores measured
// slower here: the loop is bound by the statistics' arithmetic.)
template <DType T>
size_t CopyStatsLoop(char* dst, const char* src, size_t n, __m512d* lo_acc,
                     __m512d* hi_acc, uint64_t* nonfinite) {
  constexpr size_t kBytes = T == DType::kF32 ? 64 : 32;  // per 16 values
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const char* s = src + i / 16 * kBytes;
    char* d = dst + i / 16 * kBytes;
    __m512 g;
    if constexpr (T == DType::kF32) {
      __m512i raw = _mm512_loadu_si512(s);
      _mm512_storeu_si512(d, raw);
      g = _mm512_castsi512_ps(raw);
    } else {
      __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), raw);
      if constexpr (T == DType::kF16) {
        g = _mm512_cvtph_ps(raw);
      } else {
        g = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
      }
    }
    AddStats(g, lo_acc, hi_acc, nonfinite);
  }
  return i;
}

}  // namespace

size_t AccumulateGradStatsAvx512(const void* grad, DType dtype, size_t n,
                                 double lanes[16], uint64_t* nonfinite_out) {
  // Lanes 0..7 and 8..15 of the 16 accumulators (element i -> i % 16).
  __m512d lo_acc = _mm512_loadu_pd(lanes), hi_acc = _mm512_loadu_pd(lanes + 8);
  uint64_t nonfinite = 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    AddStats(V::LoadGrad(grad, dtype, i), &lo_acc, &hi_acc, &nonfinite);
  _mm512_storeu_pd(lanes, lo_acc);
  _mm512_storeu_pd(lanes + 8, hi_acc);
  *nonfinite_out += nonfinite;
  return i;
}

size_t CopyAccumulateGradStatsAvx512(void* dst, const void* src, DType dtype,
                                     size_t n, double lanes[16],
                                     uint64_t* nonfinite_out) {
  __m512d lo_acc = _mm512_loadu_pd(lanes), hi_acc = _mm512_loadu_pd(lanes + 8);
  uint64_t nonfinite = 0;
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  size_t i;
  switch (dtype) {
    case DType::kF32:
      i = CopyStatsLoop<DType::kF32>(d, s, n, &lo_acc, &hi_acc, &nonfinite);
      break;
    case DType::kF16:
      i = CopyStatsLoop<DType::kF16>(d, s, n, &lo_acc, &hi_acc, &nonfinite);
      break;
    default:
      i = CopyStatsLoop<DType::kBF16>(d, s, n, &lo_acc, &hi_acc, &nonfinite);
      break;
  }
  _mm512_storeu_pd(lanes, lo_acc);
  _mm512_storeu_pd(lanes + 8, hi_acc);
  *nonfinite_out += nonfinite;
  return i;
}

void AdamUpdateAvx512(const AdamSlice& s, const AdamStepConsts& c) {
  AdamUpdateVector<V>(s, c);
}

}  // namespace mlpo
