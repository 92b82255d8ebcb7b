// The functions that reach a rule's own part (its file rule_<rule>.h)
// through the dispatch, rules.h's WithRule. update_rule.h and
// rule_kernels.h declare them and hold only the rules' common vocabulary,
// so no header of the rules includes the dispatch back.
#include "optimizer/kernel/rules.h"

namespace mlpo {

std::vector<StateSlot> RuleSpec::Slots() const {
  return rules::WithRule(kind, [&]<typename Rule>() {
    return Rule::Slots(*this);
  });
}

float InitialSlotValue(RuleKind kind, const RuleHyper& h, int slot) {
  return rules::WithRule(kind, [&]<typename Rule>() {
    return Rule::Initial(h, slot);
  });
}

RuleConsts MakeRuleConsts(RuleKind kind, const RuleHyper& h, uint64_t t,
                          double grad_scale) {
  RuleConsts c;
  c.kind = kind;
  c.grad_scale = static_cast<float>(h.maximize ? -grad_scale : grad_scale);
  rules::WithRule(kind, [&]<typename Rule>() {
    Rule::Consts(h, t, grad_scale, &c);
  });
  return c;
}

}  // namespace mlpo
