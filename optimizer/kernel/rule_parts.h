// What a rule's file (optimizer/kernel/rule_<rule>.h) defines, one struct per
// rule (in namespace mlpo::rules):
//   static constexpr const char* kName                   its name ("lion")
//   static const char* Name(const RuleSpec&)             a store's spec of
//                                                          it ("adam+amsgrad")
//   static const char* Check(const RuleHyper&)           nullptr when the
//                                                          rule takes h, else
//                                                          what it needs
//                                                          (lr and weight
//                                                          decay are checked
//                                                          for every rule)
//   static std::vector<StateSlot> Slots(const RuleSpec&)   its state
//   static float Initial(const RuleHyper&, int slot)       a slot's value
//                                                          before step 1
//   static void Consts(const RuleHyper&, uint64_t t, double grad_scale,
//                      RuleConsts*)                          its per-step
//                                                            constants
//   template <KernelIsa> static void Loop(n, p, s0, s1, s2, g, c)
//       its fp32 update of n elements, IEEE operations only in a fixed
//       order, with its branches outside the element loop: each ISA's
//       translation unit (rule_kernels_<isa>.cc) instantiates Loop for its
//       own KernelIsa, so the three compilations are distinct functions
//       and the compiler vectorises each for its ISA; every one rounds as
//       the scalar one does.
// The registry is WithRule in rules.h. Adding a rule (docs/design.md
// "Adding a rule"; rule_adamax.h was added so): this file, its RuleKind
// value (update_rule.h) and its line in WithRule, and its adapter class
// (python/mlpo/_rules.py's RULES, torch.py).
#ifndef MLPO_OPTIMIZER_KERNEL_RULE_PARTS_H_
#define MLPO_OPTIMIZER_KERNEL_RULE_PARTS_H_

#include <cmath>

#include "base/isa_inline.h"
#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/kernel/update_rule.h"

namespace mlpo::rules {

MLPO_ISA_INLINE bool NonNeg(double x) { return std::isfinite(x) && x >= 0; }
// Betas in [0, 1), or what they need.
MLPO_ISA_INLINE const char* CheckBetas(const RuleHyper& h) {
  return NonNeg(h.beta1) && NonNeg(h.beta2) && h.beta1 < 1 && h.beta2 < 1
             ? nullptr
             : "need betas in [0, 1)";
}

}  // namespace mlpo::rules

#endif  // MLPO_OPTIMIZER_KERNEL_RULE_PARTS_H_
