// What a rule's file (optimizer/kernel/rule_<rule>.h) defines, one struct per
// rule (in namespace mlpo::rules):
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
// The registry is WithRule in rules.h: adding a rule is a file
// rule_<rule>.h, a line there, and its adapter class
// (python/mlpo/_rules.py, torch.py).
#ifndef MLPO_OPTIMIZER_KERNEL_RULE_PARTS_H_
#define MLPO_OPTIMIZER_KERNEL_RULE_PARTS_H_

#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/kernel/update_rule.h"

#endif  // MLPO_OPTIMIZER_KERNEL_RULE_PARTS_H_
