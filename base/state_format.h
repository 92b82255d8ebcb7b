// The names of the formats a store may hold the Adam moments in (the
// codecs and layouts are optimizer/state_format.h): here so a store's
// options (TOML key state_format) can name one.
#ifndef MLPO_BASE_STATE_FORMAT_H_
#define MLPO_BASE_STATE_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mlpo {

// The store attribute recording a store's format (absent: fp32, a store
// from before formats).
inline constexpr char kStateFormatAttribute[] = "state_format";

enum class StateFormat : uint8_t { kF32 = 0, kBF16Moments = 1, kInt8Moments = 2 };

inline const char* StateFormatName(StateFormat f) {
  switch (f) {
    case StateFormat::kBF16Moments: return "bf16-moments";
    case StateFormat::kInt8Moments: return "int8-moments";
    default: return "fp32";
  }
}
// "fp32" (also "f32"), "bf16-moments", "int8-moments".
inline absl::StatusOr<StateFormat> ParseStateFormat(absl::string_view s) {
  if (s == "fp32" || s == "f32") return StateFormat::kF32;
  if (s == "bf16-moments") return StateFormat::kBF16Moments;
  if (s == "int8-moments") return StateFormat::kInt8Moments;
  return absl::InvalidArgumentError(
      std::string("unknown state format '") + std::string(s) +
      "' (fp32, bf16-moments, int8-moments)");
}

}  // namespace mlpo

#endif  // MLPO_BASE_STATE_FORMAT_H_
