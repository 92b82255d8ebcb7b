// The codecs of the state formats (docs/design.md "State formats"): how a
// rule's slots (Adam's moments m and v, update_rule.h) are coded. Master
// weights p are fp32 in every format; a store's format is fixed when it is
// created (store attribute "state_format"; the names are base/state_format.h,
// the store layout optimizer/state_layout.h).
//
//   fp32          m, v fp32                          12 bytes/param each way
//   bf16-moments  m, v bf16, round to nearest even    8 bytes/param
//   int8-moments  m, v one byte each + an fp32 scale   ~6.03 bytes/param
//                 per block of 256 elements of each
//
// int8-moments, the code map. Block-wise absmax scaling (Dettmers et al.,
// "8-bit Optimizers via Block-wise Quantization", ICLR 2022: blocks are
// quantized independently so one outlier costs only its block; block size
// 256 is bitsandbytes' and torchao's AdamW8bit default for 8-bit states).
// Within a block the codes are small floats rather than the paper's dynamic
// tree map, because a float code is computed by integer and IEEE operations
// alone, so the scalar, AVX2 and AVX-512 kernels (and the Python reference
// in python/mlpo/codecs.py) agree bit for bit without a table search:
//   m: sign + the FP8 E4M3 magnitude layout (Micikevicius et al., "FP8
//      Formats for Deep Learning", 2022), every code finite: 4 exponent bits
//      (bias 15, 0 = subnormal), 3 mantissa bits; value <= 1.875, relative
//      step 1/8 (error <= 1/16), range 2^17.9 below the block's largest.
//   v: stored as r = sqrt(v) >= 0, so no sign: 4 exponent + 4 mantissa bits
//      (value <= 1.9375, error <= 1/32). The square root halves the dynamic
//      range v needs (2^18.9 in r is 2^37.8 in v) and the update takes
//      sqrt(v) anyway.
// Scale of a block: s = (largest magnitude in it) / (largest code value),
// code = RNE(|x| * (1 / s)) in the code's float layout (fp32 operations: a
// reciprocal, then products, cheaper than a division per element), value =
// code_value * s.
// A block never spans two parameters (blocks restart at each parameter's
// first element in a subgroup, Subgroup::pieces), so a parameter skipped in
// a step keeps its codes and scales exactly.
//
// Thread-safety: pure functions.
#ifndef MLPO_OPTIMIZER_KERNEL_STATE_CODEC_H_
#define MLPO_OPTIMIZER_KERNEL_STATE_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/isa_inline.h"
#include "base/state_format.h"

namespace mlpo {

// Bytes of state per parameter (p, m, v and int8's scales) read and written
// each step (Adam; update_rule.h's RuleBytesPerParam for any rule).
double StateBytesPerParam(StateFormat f);
// Bytes of one element of a slot as `f` stores it (int8: the code).
inline size_t MomentBytes(StateFormat f) {
  return f == StateFormat::kF32 ? 4 : f == StateFormat::kBF16Moments ? 2 : 1;
}

inline constexpr uint64_t kQuantBlock = 256;

// The quantization blocks of a subgroup of `numel` elements whose
// parameters start at `pieces` (subgroup-relative, sorted, first 0; empty =
// one piece): each piece is cut into blocks of kQuantBlock from its start.
class QuantGrid {
 public:
  QuantGrid() = default;
  QuantGrid(const std::vector<uint64_t>& pieces, uint64_t numel);
  uint64_t blocks() const { return blocks_; }
  // The block of element i, and that block's [start, end).
  uint64_t Block(uint64_t i) const;
  uint64_t BlockStart(uint64_t i) const;
  uint64_t BlockEnd(uint64_t i) const;

 private:
  size_t Piece(uint64_t i) const;
  uint64_t numel_ = 0, blocks_ = 0;
  std::vector<uint64_t> start_, first_block_;  // per piece
};

// The one codec: n values of a slot in fp32 from (Decode) and to (Encode)
// their codes in format `f` (bf16 or u8 codes), where for int8 the n
// elements are one quantization block whose scale is *scale (Encode picks
// it from the block's largest magnitude). `nonneg`: the slot is >= 0 and
// int8 codes its square root (Adam's v). For fp32 both copy.
void DecodeBlock(StateFormat f, bool nonneg, const void* codes,
                 const float* scale, size_t n, float* out);
void EncodeBlock(StateFormat f, bool nonneg, const float* in, size_t n,
                 void* codes, float* scale);

// A subgroup's slots as the store holds them (pointers into its state
// object: optimizer/state_layout.h's StateIn), in RuleSpec::Slots() order.
struct StateRef {
  StateFormat format = StateFormat::kF32;
  const QuantGrid* grid = nullptr;
  int slots = 0;
  void* slot[3] = {};
  float* scale[3] = {};  // int8: per block
  bool nonneg[3] = {};
};
// fp32 values of slot k's elements [from, from + n).
void DecodeSlot(const StateRef& r, int k, uint64_t from, uint64_t n,
                float* out);
// Writes every element of slot k (numel of the grid or of the subgroup)
// from fp32 values: int8 picks each block's scale.
void EncodeSlot(const StateRef& r, int k, uint64_t numel, const float* in);

// ---- The int8 code map (scalar; the kernels' vector code does the same).
inline constexpr int kM8Mantissa = 3;  // m: sign + E4M3
inline constexpr int kV8Mantissa = 4;  // r = sqrt(v): E4M4
inline constexpr float kM8Max = 1.875f;
inline constexpr float kV8Max = 1.9375f;

MLPO_ISA_INLINE uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
MLPO_ISA_INLINE float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Code (0 .. 2^(4+M) - 1) of x >= 0 (NaN saturates to the largest code).
template <int M>
MLPO_ISA_INLINE uint32_t EncodeMag(float x) {
  constexpr int k = 23 - M;
  constexpr uint32_t max_code = (1u << (4 + M)) - 1;
  uint32_t q;
  if (x < 0x1p-14f) {  // the code's subnormals: integer multiples of 2^-14-M
    float t = x * static_cast<float>(1u << (14 + M)) + 8388608.0f;
    q = FloatBits(t) - FloatBits(8388608.0f);
  } else {
    uint32_t u = FloatBits(x);
    u = u + ((1u << (k - 1)) - 1) + ((u >> k) & 1u);
    q = (u >> k) - ((127u - 15u) << M);
  }
  return q < max_code ? q : max_code;
}
template <int M>
MLPO_ISA_INLINE float DecodeMag(uint32_t q) {
  constexpr int k = 23 - M;
  if ((q >> M) == 0)
    return static_cast<float>(q) * (1.0f / static_cast<float>(1u << (14 + M)));
  return BitsFloat((q << k) + ((127u - 15u) << 23));
}
// A block's scale from its largest magnitude (bits of |x|, so NaN and inf
// order as integers: every ISA agrees).
MLPO_ISA_INLINE float BlockScale(uint32_t amax_bits, float max_code_value) {
  return BitsFloat(amax_bits) / max_code_value;
}
// The codes of a block with scale s are taken with inv = 1 / s.
MLPO_ISA_INLINE float InverseScale(float scale) { return 1.0f / scale; }
MLPO_ISA_INLINE uint8_t EncodeM8(float m, float scale) {
  uint32_t sign = FloatBits(m) >> 31;
  float a = BitsFloat(FloatBits(m) & 0x7fffffffu);
  uint32_t q =
      scale == 0.0f ? 0 : EncodeMag<kM8Mantissa>(a * InverseScale(scale));
  return static_cast<uint8_t>((sign << 7) | q);
}
MLPO_ISA_INLINE float DecodeM8(uint8_t c, float scale) {
  float a = DecodeMag<kM8Mantissa>(c & 0x7fu) * scale;
  return BitsFloat(FloatBits(a) | (static_cast<uint32_t>(c >> 7) << 31));
}
MLPO_ISA_INLINE uint8_t EncodeV8(float r, float scale) {
  return static_cast<uint8_t>(
      scale == 0.0f ? 0 : EncodeMag<kV8Mantissa>(r * InverseScale(scale)));
}
MLPO_ISA_INLINE float DecodeV8(uint8_t c, float scale) {
  return DecodeMag<kV8Mantissa>(c) * scale;
}

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_KERNEL_STATE_CODEC_H_
