#include "optimizer/kernel/update_rule.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace mlpo {

const char* RuleKindName(RuleKind k) {
  switch (k) {
    case RuleKind::kLion: return "lion";
    case RuleKind::kAdagrad: return "adagrad";
    case RuleKind::kSgd: return "sgd";
    default: return "adam";
  }
}

absl::Status CheckRuleHyper(RuleKind k, int group, const RuleHyper& h) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter group ", group, ": ", what, " (", RuleKindName(k), ": lr ",
        h.lr, ", weight_decay ", h.weight_decay, ", betas (", h.beta1, ", ",
        h.beta2, "), eps ", h.eps, ", momentum ", h.momentum, ", dampening ",
        h.dampening, ", lr_decay ", h.lr_decay, ")"));
  };
  auto nonneg = [](double x) { return std::isfinite(x) && x >= 0; };
  if (!nonneg(h.lr) || !nonneg(h.weight_decay))
    return bad("need finite lr >= 0 and weight_decay >= 0");
  switch (k) {
    case RuleKind::kAdam:
    case RuleKind::kLion:
      if (!nonneg(h.beta1) || !nonneg(h.beta2) || h.beta1 >= 1 ||
          h.beta2 >= 1)
        return bad("need betas in [0, 1)");
      if (k == RuleKind::kAdam && !nonneg(h.eps)) return bad("need eps >= 0");
      break;
    case RuleKind::kAdagrad:
      if (!nonneg(h.eps) || !nonneg(h.lr_decay) ||
          !nonneg(h.initial_accumulator_value))
        return bad("need eps, lr_decay and initial_accumulator_value >= 0");
      break;
    case RuleKind::kSgd:
      if (!nonneg(h.momentum) || !std::isfinite(h.dampening))
        return bad("need momentum >= 0 and a finite dampening");
      if (h.nesterov && (h.momentum <= 0 || h.dampening != 0))
        return bad("nesterov momentum needs momentum > 0 and dampening 0");
      break;
  }
  return absl::OkStatus();
}

int RuleSpec::SlotOf(absl::string_view section) const {
  std::vector<StateSlot> s = Slots();
  for (size_t i = 0; i < s.size(); ++i)
    if (section == s[i].section) return static_cast<int>(i);
  return -1;
}

std::string RuleSpec::Name() const {
  switch (kind) {
    case RuleKind::kAdam: return amsgrad ? "adam+amsgrad" : "adam";
    case RuleKind::kSgd: return momentum ? "sgd+momentum" : "sgd";
    default: return RuleKindName(kind);
  }
}

absl::StatusOr<RuleSpec> ParseRuleSpec(absl::string_view s) {
  RuleSpec r;
  if (s == "adam") return r;
  if (s == "adam+amsgrad") {
    r.amsgrad = true;
    return r;
  }
  if (s == "lion") r.kind = RuleKind::kLion;
  else if (s == "adagrad") r.kind = RuleKind::kAdagrad;
  else if (s == "sgd+momentum") r.kind = RuleKind::kSgd;
  else if (s == "sgd") {
    r.kind = RuleKind::kSgd;
    r.momentum = false;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown update rule '", s,
        "' (adam, adam+amsgrad, lion, adagrad, sgd, sgd+momentum)"));
  }
  return r;
}

RuleSpec SpecFor(RuleKind kind, const std::vector<RuleHyper>& groups) {
  RuleSpec r;
  r.kind = kind;
  r.momentum = false;
  for (const RuleHyper& h : groups) {
    r.amsgrad = r.amsgrad || (kind == RuleKind::kAdam && h.amsgrad);
    r.momentum = r.momentum || h.momentum != 0;
  }
  if (kind != RuleKind::kSgd) r.momentum = true;  // not an option there
  return r;
}

absl::Status CheckSpecCovers(const RuleSpec& spec, int group,
                             const RuleHyper& h) {
  if (spec.kind == RuleKind::kAdam && h.amsgrad && !spec.amsgrad)
    return absl::FailedPreconditionError(absl::StrCat(
        "parameter group ", group, ": amsgrad needs max_exp_avg_sq, which "
        "this store does not hold (it was created without amsgrad, as '",
        spec.Name(), "'); create the store with amsgrad=True, or move the "
        "state to a new store with it (export_state_dict, then "
        "load_state_dict)"));
  if (spec.kind == RuleKind::kSgd && h.momentum != 0 && !spec.momentum)
    return absl::FailedPreconditionError(absl::StrCat(
        "parameter group ", group, ": momentum ", h.momentum,
        " needs a momentum buffer, which this store does not hold (it was "
        "created with momentum 0, as 'sgd'); create the store with the "
        "momentum set"));
  return absl::OkStatus();
}

double RuleBytesPerParam(const RuleSpec& spec, StateFormat f) {
  double slot = f == StateFormat::kF32           ? 4
                : f == StateFormat::kBF16Moments ? 2
                                                 : 1 + 4.0 / 256;
  return 4 + slot * static_cast<double>(spec.Slots().size());
}

}  // namespace mlpo
