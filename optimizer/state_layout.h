// The store layout of an optimizer's state (docs/design.md "State
// formats"): a subgroup's state object (p and the rule's slots in the
// store's format, kernel/state_codec.h), the slots found in a checked-out
// object, and each parameter's step counts.
//
// Thread-safety: pure functions.
#ifndef MLPO_OPTIMIZER_STATE_LAYOUT_H_
#define MLPO_OPTIMIZER_STATE_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/state_format.h"
#include "optimizer/kernel/state_codec.h"
#include "optimizer/kernel/update_rule.h"

namespace mlpo {

class CheckoutLease;
class ObjectLayout;

// The store layout of a subgroup's state: p (f32), then each slot of the
// rule (kernel/update_rule.h) as f32, bf16 or u8 codes, and for int8 each slot's
// scales "<slot>s" (f32, one per block): Adam's are p, m, v (ms, vs).
absl::StatusOr<ObjectLayout> StateLayout(StateFormat f, const RuleSpec& rule,
                                         uint64_t numel, uint64_t blocks);
// Adam's (p, m, v).
absl::StatusOr<ObjectLayout> StateLayout(StateFormat f, uint64_t numel,
                                         uint64_t blocks);
// The section holding slot `section`'s int8 scales.
std::string ScaleSection(absl::string_view section);

// The slots of `rule` in a lease of a subgroup's object (laid out by
// StateLayout for `grid`); DataLoss when a section the rule and format need
// is missing.
absl::StatusOr<StateRef> StateIn(StateFormat f, const RuleSpec& rule,
                                 CheckoutLease* lease, const QuantGrid& grid);
// Each parameter's own step count (Optimizer::param_steps) for a rank of
// `params` parameters: object "param_steps.n<params>" (a store whose groups
// grew, add_param_group, declares a new one), one section "t" of 2 * params
// f32 slots holding the params little-endian uint64 counts.
std::string ParamStepsObject(size_t params);
absl::StatusOr<ObjectLayout> ParamStepsLayout(size_t params);
// The counts in a lease of ParamStepsObject(params); DataLoss when it is
// not laid out as ParamStepsLayout(params).
absl::StatusOr<std::vector<uint64_t>> ParamStepsIn(const CheckoutLease& lease,
                                                   size_t params);

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_STATE_LAYOUT_H_
