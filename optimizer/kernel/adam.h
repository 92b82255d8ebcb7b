// Fused Adam / AdamW over one contiguous slice, one pass per element:
//   widen the gradient (f32, f16 or bf16) -> scale (1/loss_scale times the
//   global-norm clip coefficient) -> update m, v, p -> write p in the model
//   dtype to an output buffer.
//
// The arithmetic follows torch.optim.AdamW / Adam (non-amsgrad, single-tensor
// path) operation by operation in fp32, with bias corrections computed in
// double as PyTorch's Python scalars are:
//   AdamW: p *= (1 - lr*wd)          Adam: g += wd * p
//   m = m + (1-b1) * (g - m)         (torch.lerp_, weight < 0.5)
//   v = v*b2 + ((1-b2)*g)*g          (mul_ then addcmul_)
//   denom = sqrt(v) / sqrt(1-b2^t) + eps
//   p = p + (-lr/(1-b1^t)) * (m / denom)
// Every implementation (scalar, AVX2+F16C, AVX-512) uses these operations in
// this order without FMA contraction, so all agree bit for bit.
//
// Compact moments (state_codec.h) are widened to fp32 before and rounded
// after the same operations: bf16 by round-to-nearest-even; int8 block by
// block (two passes over a block: update, keeping the new m and r = sqrt(v)
// in fp32, then encode them with the block's new scales).
//
// Thread-safety: the functions are pure over their arguments.
#ifndef MLPO_OPTIMIZER_KERNEL_ADAM_H_
#define MLPO_OPTIMIZER_KERNEL_ADAM_H_

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "optimizer/kernel/isa.h"
#include "optimizer/kernel/state_codec.h"
#include "optimizer/kernel/update_rule.h"

namespace mlpo {

// Per-step constants derived once from RuleHyper, the step number t >= 1
// and the gradient scale (clip_coef / loss_scale).
struct AdamStepConsts {
  float decay;        // 1 - lr*wd (AdamW), else 1
  float l2;           // wd (Adam), else 0
  float one_minus_b1;
  float b2;
  float one_minus_b2;
  float bc2_sqrt;     // sqrt(1 - b2^t)
  float eps;
  float neg_step;     // -lr / (1 - b1^t)
  float grad_scale;
};
AdamStepConsts MakeStepConsts(const RuleHyper& h, uint64_t t,
                              double grad_scale);

struct AdamSlice {
  float* p = nullptr;
  void* m = nullptr;  // in `format`: f32, bf16 or u8 codes
  void* v = nullptr;
  const void* grad = nullptr;
  DType grad_dtype = DType::kF32;
  void* out = nullptr;  // new params in out_dtype; nullptr = none
  DType out_dtype = DType::kBF16;
  size_t n = 0;
  StateFormat format = StateFormat::kF32;
  // int8-moments: the slice starts a block, its blocks are kQuantBlock
  // elements from there (the last may be shorter), and ms[b], vs[b] are
  // block b's scales (read, then replaced).
  float* ms = nullptr;
  float* vs = nullptr;
};

// Runs the update on `s` with the given ISA (must be supported).
void AdamUpdate(const AdamSlice& s, const AdamStepConsts& c, KernelIsa isa);
inline void AdamUpdate(const AdamSlice& s, const AdamStepConsts& c) {
  AdamUpdate(s, c, BestKernelIsa());
}

// Implementations (one translation unit each, compiled for their ISA).
void AdamUpdateScalar(const AdamSlice& s, const AdamStepConsts& c);
// The scalar update of elements [from, s.n): the vector paths' tails.
void AdamUpdateScalarFrom(const AdamSlice& s, const AdamStepConsts& c,
                          size_t from);
void AdamUpdateAvx2(const AdamSlice& s, const AdamStepConsts& c);
// int8-moments: the scalar pass over elements [from, to) of a block that
// starts at element `b0` of the slice (block index `b`): updates p (and
// out), leaves the new m and r = sqrt(v) in mt[i - b0], rt[i - b0] and their
// largest magnitudes' bits in *am, *ar. Then EncodeBlockScalar writes codes
// of [from, to) with the scales ms[b], vs[b].
void Int8PassScalar(const AdamSlice& s, const AdamStepConsts& c, size_t b,
                    size_t b0, size_t from, size_t to, float* mt, float* rt,
                    uint32_t* am, uint32_t* ar);
void EncodeBlockScalar(const AdamSlice& s, size_t b, size_t b0, size_t from,
                       size_t to, const float* mt, const float* rt);
void AdamUpdateAvx512(const AdamSlice& s, const AdamStepConsts& c);

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_KERNEL_ADAM_H_
