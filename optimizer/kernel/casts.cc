#include "optimizer/kernel/casts.h"

#include <cstring>

namespace mlpo {

bool AdoptModelValues(float* p, const void* model, DType model_dtype,
                      size_t n) {
  if (model_dtype == DType::kF32) {
    if (std::memcmp(p, model, n * sizeof(float)) == 0) return false;
    std::memcpy(p, model, n * sizeof(float));
    return true;
  }
  const uint16_t* h = static_cast<const uint16_t*>(model);
  bool changed = false;
  if (model_dtype == DType::kBF16) {
    for (size_t i = 0; i < n; ++i)
      if (FloatToBF16(p[i]) != h[i]) p[i] = BF16ToFloat(h[i]), changed = true;
  } else {
    for (size_t i = 0; i < n; ++i)
      if (FloatToF16(p[i]) != h[i]) p[i] = F16ToFloat(h[i]), changed = true;
  }
  return changed;
}

void CastParams(const float* p, void* out, DType dtype, size_t n) {
  if (dtype == DType::kF32) {
    std::memcpy(out, p, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) StoreFromFloat(out, dtype, i, p[i]);
}

}  // namespace mlpo
