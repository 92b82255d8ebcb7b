// The fused kernel of every update rule (update_rule.h) over one contiguous
// slice: widen the gradient -> scale (1/loss_scale times the clip
// coefficient, negated for maximize) -> the rule's update of p and its
// slots -> p in the model dtype to an output buffer.
//
// Adam without amsgrad runs the hand-vectorised kernels of adam.h.
// Every other rule (and Adam with amsgrad) runs its own fp32 loop, written
// once in its file (optimizer/kernel/rule_<rule>.h) and compiled three times
// (rule_kernels_isa.inc in rule_kernels_{scalar,avx2,avx512}.cc): plain
// (scalar, no vectorisation), -mavx2 and -mavx512f. The loops use only
// IEEE-rounded operations (+ - * / sqrt, comparisons) with no FMA
// contraction and no reassociation, so the compiler's vector code rounds
// exactly as the scalar code: every ISA agrees bit for bit. Compact formats
// are decoded into fp32 a block (kQuantBlock elements) at a time, updated,
// and encoded back by state_codec.h's codec.
//
// The arithmetic, operation by operation in fp32 (g already scaled):
//   adam+amsgrad  as adam.h, then vmax = max(vmax, v) and
//                 denom = sqrt(vmax) / sqrt(1-b2^t) + eps
//   lion          p *= 1 - lr*wd;  u = m*b1 + (1-b1)*g
//                 p = p + (-lr) * sign(u);  m = m*b2 + (1-b2)*g
//                 (Chen et al., "Symbolic Discovery of Optimization
//                 Algorithms", 2023, Algorithm 2)
//   adagrad       g = g + wd*p;  s = s + g*g;  std = sqrt(s) + eps
//                 p = p + ((-clr) * g) / std,  clr = lr / (1 + (t-1) lr_decay)
//                 (torch.optim.Adagrad; addcdiv's order)
//   sgd           g = g + wd*p;  first step: b = g, else b = b*mu + (1-d)*g
//                 g = nesterov ? g + mu*b : b;  p = p + (-lr) * g
//                 (torch.optim.SGD)
//
// Thread-safety: pure over their arguments.
#ifndef MLPO_OPTIMIZER_KERNEL_RULE_KERNELS_H_
#define MLPO_OPTIMIZER_KERNEL_RULE_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"
#include "optimizer/kernel/adam.h"
#include "optimizer/kernel/casts.h"
#include "optimizer/kernel/isa.h"
#include "optimizer/kernel/state_codec.h"
#include "optimizer/kernel/update_rule.h"

namespace mlpo {

inline constexpr int kMaxRuleSlots = 3;

// One parameter's constants for its step t (every rule's fields; a rule
// reads its own).
struct RuleConsts {
  RuleKind kind = RuleKind::kAdam;
  bool amsgrad = false;
  bool nesterov = false;
  bool first = false;        // sgd: t == 1 (the buffer starts as g)
  float grad_scale = 1;      // negative for maximize
  float decay = 1;           // adamw, lion: 1 - lr*wd
  float l2 = 0;              // adam (L2), adagrad, sgd: wd
  float b1 = 0, one_minus_b1 = 1, b2 = 0, one_minus_b2 = 1;
  float bc2_sqrt = 1, eps = 0;
  float neg_step = 0;        // adam: -lr/(1-b1^t); lion, sgd: -lr;
                             // adagrad: -clr
  float momentum = 0, one_minus_damp = 1;
  AdamStepConsts adam;       // the hand-vectorised Adam kernel's
};
RuleConsts MakeRuleConsts(RuleKind kind, const RuleHyper& h, uint64_t t,
                          double grad_scale);

struct RuleSlice {
  float* p = nullptr;
  const void* grad = nullptr;
  DType grad_dtype = DType::kF32;
  void* out = nullptr;  // new params in out_dtype; nullptr = none
  DType out_dtype = DType::kBF16;
  size_t n = 0;
  StateFormat format = StateFormat::kF32;
  // The rule's slots in RuleSpec::Slots() order (f32, bf16 or u8 codes),
  // and for int8 each slot's block scales from the slice's first block
  // (the slice starts a block; blocks are kQuantBlock from there).
  int slots = 0;
  void* slot[kMaxRuleSlots] = {};
  float* scale[kMaxRuleSlots] = {};
  bool nonneg[kMaxRuleSlots] = {};
};

void RuleUpdate(const RuleSlice& s, const RuleConsts& c, KernelIsa isa);
inline void RuleUpdate(const RuleSlice& s, const RuleConsts& c) {
  RuleUpdate(s, c, BestKernelIsa());
}

// The fp32 loops of one ISA (rule_kernels_isa.inc), over n elements: g is
// the unscaled fp32 gradient; s0..s2 the rule's slots in fp32 (unused ones
// may be nullptr).
void RuleLoopScalar(size_t n, float* p, float* s0, float* s1, float* s2,
                    const float* g, const RuleConsts& c);
void RuleLoopAvx2(size_t n, float* p, float* s0, float* s1, float* s2,
                  const float* g, const RuleConsts& c);
void RuleLoopAvx512(size_t n, float* p, float* s0, float* s1, float* s2,
                    const float* g, const RuleConsts& c);
// n gradient values of `dtype` widened to fp32 (exact), and n parameters
// cast to `dtype` as CastParams does, per ISA.
void RuleWidenScalar(size_t n, const void* src, DType dtype, float* dst);
void RuleWidenAvx2(size_t n, const void* src, DType dtype, float* dst);
void RuleWidenAvx512(size_t n, const void* src, DType dtype, float* dst);
void RuleCastScalar(size_t n, const float* p, void* out, DType dtype);
void RuleCastAvx2(size_t n, const float* p, void* out, DType dtype);
void RuleCastAvx512(size_t n, const float* p, void* out, DType dtype);

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_KERNEL_RULE_KERNELS_H_
