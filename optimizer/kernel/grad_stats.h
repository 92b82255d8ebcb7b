// Gradient statistics for the global norm and the overflow check: the sum
// of squares (in double) and the count of non-finite values of a gradient
// slice. Every square is exact in double; element i is added to accumulator
// i % 16 in order, and the 16 are summed pairwise ((0+1)+(2+3))+... at the
// end, in every ISA, so all agree bit for bit.
//
// Thread-safety: pure over their arguments.
#ifndef MLPO_OPTIMIZER_KERNEL_GRAD_STATS_H_
#define MLPO_OPTIMIZER_KERNEL_GRAD_STATS_H_

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "optimizer/kernel/isa.h"

namespace mlpo {

struct GradStats {
  double sum_sq = 0;
  uint64_t nonfinite = 0;
};
GradStats ComputeGradStats(const void* grad, DType dtype, size_t n,
                           KernelIsa isa);
inline GradStats ComputeGradStats(const void* grad, DType dtype, size_t n) {
  return ComputeGradStats(grad, dtype, n, BestKernelIsa());
}
// Copies n gradient values of `dtype` from src to dst and returns their
// statistics, equal bit for bit to ComputeGradStats(dst, dtype, n), in one
// pass over memory: the statistics read each piece just copied while it is
// still in cache (the gradient stage's host copies).
GradStats CopyGradStats(void* dst, const void* src, DType dtype, size_t n,
                        KernelIsa isa);
inline GradStats CopyGradStats(void* dst, const void* src, DType dtype,
                               size_t n) {
  return CopyGradStats(dst, src, dtype, n, BestKernelIsa());
}
// The scalar part from element `from` on, then the pairwise sum of the 16
// accumulators (the vector paths' tails).
GradStats FinishGradStats(const void* grad, DType dtype, size_t from,
                          size_t n, double acc[16], uint64_t nonfinite);
// The vector part (grad_stats_<isa>.cc): whole groups of 16 elements of
// grad[0, n) added to acc (element i to acc[i % 16], in order) and
// *nonfinite; returns how many elements it took (n rounded down to a
// multiple of 16). Called on pieces that start at a multiple of 16, the
// sums equal one call over the whole.
size_t AccumulateGradStatsAvx2(const void* grad, DType dtype, size_t n,
                               double acc[16], uint64_t* nonfinite);
size_t AccumulateGradStatsAvx512(const void* grad, DType dtype, size_t n,
                                 double acc[16], uint64_t* nonfinite);
// The same while copying grad[0, n) from src to dst (the elements it took).
size_t CopyAccumulateGradStatsAvx512(void* dst, const void* src, DType dtype,
                                     size_t n, double acc[16],
                                     uint64_t* nonfinite);

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_KERNEL_GRAD_STATS_H_
