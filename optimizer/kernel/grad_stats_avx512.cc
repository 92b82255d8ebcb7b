// The gradient statistics' vector part on AVX-512 (grad_stats.h), with the
// copying form the gradient stage uses.
#include <immintrin.h>

#include "optimizer/kernel/grad_stats.h"
#include "optimizer/kernel/vec_avx512.h"

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

}  // namespace mlpo
