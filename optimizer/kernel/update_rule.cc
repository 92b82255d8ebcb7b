#include "optimizer/kernel/update_rule.h"

#include "absl/strings/str_cat.h"

namespace mlpo {

int RuleSpec::SlotOf(absl::string_view section) const {
  std::vector<StateSlot> s = Slots();
  for (size_t i = 0; i < s.size(); ++i)
    if (section == s[i].section) return static_cast<int>(i);
  return -1;
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
