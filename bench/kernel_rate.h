// Kernel throughput measured in the same run as a benchmark (R_adam of the
// performance model) and its memory-bandwidth reference.
#ifndef MLPO_BENCH_KERNEL_RATE_H_
#define MLPO_BENCH_KERNEL_RATE_H_

#include <cstddef>

#include "base/state_format.h"

namespace mlpo {

struct KernelRates {
  double adam = 0;    // params/s of the fused AdamW (fp16 grad, bf16 out)
  double stream = 0;  // elements/s of a loop moving the same bytes
};
// In `format`: m and v as the store holds them (the stream reference moves
// that format's bytes too).
KernelRates MeasureKernelRates(size_t n, int threads, int reps,
                               StateFormat format = StateFormat::kF32);
// Bytes one update moves per element in `format` (fp16 gradient in, bf16
// parameter out): 28 for fp32.
double KernelBytesPerElement(StateFormat format);

}  // namespace mlpo

#endif  // MLPO_BENCH_KERNEL_RATE_H_
