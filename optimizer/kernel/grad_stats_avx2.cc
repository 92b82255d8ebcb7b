// The gradient statistics' vector part on AVX2 (grad_stats.h).
#include <immintrin.h>

#include "optimizer/kernel/grad_stats.h"
#include "optimizer/kernel/vec_avx2.h"

namespace mlpo {

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
      __m256 g = V::LoadGrad(grad, dtype, i + 8 * h);
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

}  // namespace mlpo
