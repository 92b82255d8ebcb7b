#include "optimizer/kernel/grad_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace mlpo {

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

}  // namespace mlpo
