// Kernel throughput measured in the same run as a benchmark (R_adam of the
// performance model) and its memory-bandwidth reference.
#ifndef MLPO_BENCH_KERNEL_RATE_H_
#define MLPO_BENCH_KERNEL_RATE_H_

#include <cstddef>

namespace mlpo {

struct KernelRates {
  double adam = 0;    // params/s of the fused AdamW (fp16 grad, bf16 out)
  double stream = 0;  // elements/s of a loop moving the same bytes
};
KernelRates MeasureKernelRates(size_t n, int threads, int reps);

}  // namespace mlpo

#endif  // MLPO_BENCH_KERNEL_RATE_H_
