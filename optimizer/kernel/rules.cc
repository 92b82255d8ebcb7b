// The functions that reach a rule's own part (its file rule_<rule>.h)
// through the dispatch, rules.h's WithRule. update_rule.h and
// rule_kernels.h declare them and hold only the rules' common vocabulary,
// so no header of the rules includes the dispatch back.
#include "optimizer/kernel/rules.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace mlpo {

const char* RuleKindName(RuleKind k) {
  return rules::WithRule(k, []<typename Rule>() { return Rule::kName; });
}

std::string RuleSpec::Name() const {
  return rules::WithRule(kind, [&]<typename Rule>() {
    return std::string(Rule::Name(*this));
  });
}

absl::StatusOr<RuleSpec> ParseRuleSpec(absl::string_view s) {
  std::string known;
  for (int k = 0; k < kRuleKinds; ++k) {
    for (bool amsgrad : {false, true}) {
      for (bool momentum : {true, false}) {
        RuleSpec r{static_cast<RuleKind>(k), amsgrad, momentum};
        // amsgrad is Adam's option and the momentum buffer SGD's: the
        // spec of any other rule has amsgrad off and momentum on.
        if ((amsgrad && r.kind != RuleKind::kAdam) ||
            (!momentum && r.kind != RuleKind::kSgd))
          continue;
        if (r.Name() == s) return r;
        absl::StrAppend(&known, known.empty() ? "" : ", ", r.Name());
      }
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown update rule '", s, "' (", known, ")"));
}

absl::StatusOr<RuleKind> ParseRuleKind(absl::string_view s) {
  std::string known;
  for (int k = 0; k < kRuleKinds; ++k) {
    if (s == RuleKindName(static_cast<RuleKind>(k)))
      return static_cast<RuleKind>(k);
    absl::StrAppend(&known, known.empty() ? "" : ", ",
                    RuleKindName(static_cast<RuleKind>(k)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown update rule '", s, "' (", known, ")"));
}

absl::Status CheckRuleHyper(RuleKind k, int group, const RuleHyper& h) {
  const char* need = !rules::NonNeg(h.lr) || !rules::NonNeg(h.weight_decay)
                         ? "need finite lr >= 0 and weight_decay >= 0"
                         : rules::WithRule(k, [&]<typename Rule>() {
                             return Rule::Check(h);
                           });
  if (need == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "parameter group ", group, ": ", need, " (", RuleKindName(k), ": lr ",
      h.lr, ", weight_decay ", h.weight_decay, ", betas (", h.beta1, ", ",
      h.beta2, "), eps ", h.eps, ", momentum ", h.momentum, ", dampening ",
      h.dampening, ", lr_decay ", h.lr_decay, ")"));
}

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
