// Every update rule, and the one dispatch from a RuleKind to its part
// (rule_parts.h says what a part defines).
#ifndef MLPO_OPTIMIZER_KERNEL_RULES_H_
#define MLPO_OPTIMIZER_KERNEL_RULES_H_

#include "optimizer/kernel/rule_adagrad.h"
#include "optimizer/kernel/rule_adam.h"
#include "optimizer/kernel/rule_adamax.h"
#include "optimizer/kernel/rule_lion.h"
#include "optimizer/kernel/rule_sgd.h"

namespace mlpo::rules {

// fn.template operator()<Part>() for the part of `kind`.
template <typename Fn>
decltype(auto) WithRule(RuleKind kind, Fn&& fn) {
  switch (kind) {
    case RuleKind::kLion: return fn.template operator()<Lion>();
    case RuleKind::kAdagrad: return fn.template operator()<Adagrad>();
    case RuleKind::kSgd: return fn.template operator()<Sgd>();
    case RuleKind::kAdamax: return fn.template operator()<Adamax>();
    default: return fn.template operator()<Adam>();
  }
}

}  // namespace mlpo::rules

#endif  // MLPO_OPTIMIZER_KERNEL_RULES_H_
