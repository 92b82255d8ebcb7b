// Update rules (docs/design.md "Update rules"): what an optimizer does to
// the state of one element, and which state it keeps. Each rule is one
// file, optimizer/kernel/rule_<rule>.h (rule_parts.h says what it
// defines): its state sections ("slots": one value per parameter element
// besides the fp32 master p, each coded in a compact state format as
// StateSlot::nonneg says), its per-step constants and its fp32 loop
// (run by rule_kernels.h). The store, the DRAM tier, placement and the pipeline see
// only objects of sections: none of them knows which rule runs.
//
//   rule      slots (torch.optim state name)           bytes/param, fp32
//   adam      m (exp_avg), v (exp_avg_sq)              12
//   +amsgrad  ... and vmax (max_exp_avg_sq)            16
//   lion      m (exp_avg)                               8
//   adagrad   v (sum)                                   8
//   sgd       m (momentum_buffer), none at momentum 0   8 (4)
//   adamax    m (exp_avg), u (exp_inf)                 12
//
// A store's rule and slots are fixed when it is created (store attribute
// "update_rule", absent = "adam" for stores from before rules): a slot
// present is kept even when the option that needs it is switched off (as
// torch.optim keeps max_exp_avg_sq), and an option whose slot the store
// lacks is refused (FailedPrecondition) rather than run without it.
//
// Thread-safety: pure values and functions.
#ifndef MLPO_OPTIMIZER_KERNEL_UPDATE_RULE_H_
#define MLPO_OPTIMIZER_KERNEL_UPDATE_RULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/state_format.h"

namespace mlpo {

inline constexpr char kUpdateRuleAttribute[] = "update_rule";

// Stored in manifests by name, never by number; values are contiguous from
// 0 (kRuleKinds of them), each dispatched in rules.h.
enum class RuleKind : uint8_t {
  kAdam = 0,
  kLion = 1,
  kAdagrad = 2,
  kSgd = 3,
  kAdamax = 4,
};
inline constexpr int kRuleKinds = 5;
// "adam", "lion", "adagrad", "sgd", "adamax" (rule_<rule>.h's kName).
const char* RuleKindName(RuleKind k);
absl::StatusOr<RuleKind> ParseRuleKind(absl::string_view s);

enum class AdamMode { kAdamW, kAdam };

// Every rule's hyperparameters in one value; a rule reads its own.
struct RuleHyper {
  double lr = 1e-3;
  double beta1 = 0.9;   // adam, lion, adamax
  double beta2 = 0.999; // adam, lion, adamax
  double eps = 1e-8;    // adam, adagrad, adamax
  double weight_decay = 0.0;
  AdamMode mode = AdamMode::kAdamW;  // adam: decoupled (AdamW) or L2
  // torch.optim's maximize: the gradient's sign flipped before anything
  // else (ascends the objective), folded into the gradient scale.
  bool maximize = false;
  bool amsgrad = false;              // adam: the running maximum of v
  double momentum = 0.0;             // sgd
  double dampening = 0.0;            // sgd
  bool nesterov = false;             // sgd
  double lr_decay = 0.0;             // adagrad
  // adagrad: the sum's value before the first step (read when the state is
  // first made, as torch.optim reads it at construction).
  double initial_accumulator_value = 0.0;
};

// InvalidArgument naming `group` and the value when a hyperparameter is out
// of the range its rule accepts.
absl::Status CheckRuleHyper(RuleKind k, int group, const RuleHyper& h);

struct StateSlot {
  const char* section;  // the section of the state object
  const char* torch;    // its name in a torch.optim state dict
  // >= 0 always (int8-moments codes its square root, as for Adam's v).
  bool nonneg;
};

// A rule with the options that decide its slots.
struct RuleSpec {
  RuleKind kind = RuleKind::kAdam;
  bool amsgrad = false;  // adam: a vmax slot
  bool momentum = true;  // sgd: an m slot (false: plain SGD, no state)

  std::vector<StateSlot> Slots() const;
  // The slot index of `section`, or -1.
  int SlotOf(absl::string_view section) const;
  // "adam", "adam+amsgrad", "lion", "adagrad", "sgd+momentum", "sgd",
  // "adamax" (the rule part's Name).
  std::string Name() const;
  bool operator==(const RuleSpec& o) const {
    return kind == o.kind && amsgrad == o.amsgrad && momentum == o.momentum;
  }
};
absl::StatusOr<RuleSpec> ParseRuleSpec(absl::string_view s);

// The spec a new store takes for `kind` and its groups' hyperparameters:
// amsgrad when any group sets it, momentum when any group's is non-zero.
RuleSpec SpecFor(RuleKind kind, const std::vector<RuleHyper>& groups);
// Slot `slot`'s value before the first step (adagrad's sum starts at
// initial_accumulator_value; the rest at 0).
float InitialSlotValue(RuleKind kind, const RuleHyper& h, int slot);
// FailedPrecondition when a group asks for a slot the store lacks.
absl::Status CheckSpecCovers(const RuleSpec& spec, int group,
                             const RuleHyper& h);

// Bytes of state per parameter element (p and every slot, int8's scales)
// read and written each step, for `spec` in format `f`.
double RuleBytesPerParam(const RuleSpec& spec, StateFormat f);

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_KERNEL_UPDATE_RULE_H_
