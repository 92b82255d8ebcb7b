// Element types of store sections and gradients, and scalar conversions.
// The conversions are exact IEEE round-to-nearest-even, shared by kernels,
// tests and tools so all agree bit for bit.
#ifndef MLPO_BASE_DTYPE_H_
#define MLPO_BASE_DTYPE_H_

#include <cstdint>
#include <cstring>
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/isa_inline.h"

namespace mlpo {

// kU8: raw bytes (int8-moments' codes), a store section type only: never a
// gradient or parameter dtype (ParseDType does not accept it).
enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kU8 = 3 };

inline size_t DTypeSize(DType t) {
  return t == DType::kF32 ? 4 : t == DType::kU8 ? 1 : 2;
}
inline const char* DTypeName(DType t) {
  return t == DType::kF32   ? "f32"
         : t == DType::kF16 ? "f16"
         : t == DType::kU8  ? "u8"
                            : "bf16";
}
inline absl::StatusOr<DType> ParseDType(absl::string_view s) {
  if (s == "f32" || s == "float32" || s == "fp32") return DType::kF32;
  if (s == "f16" || s == "float16" || s == "fp16") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  return absl::InvalidArgumentError(
      std::string("unknown dtype '") + std::string(s) + "' (f32, f16, bf16)");
}

MLPO_ISA_INLINE float BF16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
MLPO_ISA_INLINE uint16_t FloatToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40;  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
MLPO_ISA_INLINE float F16ToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while ((man & 0x400u) == 0) {
        man <<= 1;
        --exp;
      }
      man &= 0x3ffu;
      u = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
MLPO_ISA_INLINE uint16_t FloatToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (absu < 0x38800000u) {  // subnormal or zero in f16
    float a;
    std::memcpy(&a, &absu, 4);
    // Scale so the f16 subnormal unit (2^-24) becomes 1, round to even.
    float scaled = a * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(scaled);
    float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t exp = ((absu >> 23) - 127 + 15);
  uint32_t man = absu & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

MLPO_ISA_INLINE float LoadAsFloat(const void* base, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF16: return F16ToFloat(static_cast<const uint16_t*>(base)[i]);
    case DType::kU8: return static_cast<const uint8_t*>(base)[i];
    default: return BF16ToFloat(static_cast<const uint16_t*>(base)[i]);
  }
}
MLPO_ISA_INLINE void StoreFromFloat(void* base, DType t, size_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(base)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(base)[i] = FloatToF16(v); break;
    case DType::kU8: static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(v); break;
    default: static_cast<uint16_t*>(base)[i] = FloatToBF16(v); break;
  }
}

}  // namespace mlpo

#endif  // MLPO_BASE_DTYPE_H_
