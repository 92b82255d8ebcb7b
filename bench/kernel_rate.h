// Kernel throughput measured in the same run as a benchmark (R_adam of the
// performance model) and its memory-bandwidth reference.
#ifndef MLPO_BENCH_KERNEL_RATE_H_
#define MLPO_BENCH_KERNEL_RATE_H_

#include <cstddef>

#include "base/state_format.h"
#include "optimizer/kernel/update_rule.h"

namespace mlpo {

struct KernelRates {
  double adam = 0;    // params/s of the fused update (fp16 grad, bf16 out):
                      // AdamW, or the rule asked for
  double stream = 0;  // elements/s of a loop moving the same bytes (Adam's
                      // only; 0 for another rule)
};
// In `format`: the slots as the store holds them (the stream reference
// moves that format's bytes too).
KernelRates MeasureKernelRates(size_t n, int threads, int reps,
                               StateFormat format = StateFormat::kF32,
                               RuleKind rule = RuleKind::kAdam);
// Bytes one update moves per element in `format` (fp16 gradient in, bf16
// parameter out): 28 for fp32.
double KernelBytesPerElement(StateFormat format);

}  // namespace mlpo

#endif  // MLPO_BENCH_KERNEL_RATE_H_
