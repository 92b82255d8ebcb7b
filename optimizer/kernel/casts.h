// Master weights against the model's tensors: the model's values adopted
// into the fp32 master, and the master cast to the model's dtype.
//
// Thread-safety: pure over their arguments.
#ifndef MLPO_OPTIMIZER_KERNEL_CASTS_H_
#define MLPO_OPTIMIZER_KERNEL_CASTS_H_

#include <cstddef>

#include "base/dtype.h"

namespace mlpo {

// The model's values become the master where they differ from the master
// cast to the model's dtype: the model's tensors are authoritative, so an
// edit made outside the step (loading pretrained weights, clamping, a
// re-initialisation) wins, while elements the model still holds as the
// step left them keep the master's extra precision. For f32 the model's
// values are the master. Compares bit patterns (-0, NaN as written).
// Returns whether any element of p changed.
bool AdoptModelValues(float* p, const void* model, DType model_dtype,
                      size_t n);
// p cast to `dtype` into `out` (the parameters of a step's skipped
// elements, unchanged).
void CastParams(const float* p, void* out, DType dtype, size_t n);

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_KERNEL_CASTS_H_
