#include "optimizer/state_layout.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/dtype.h"
#include "store/meta/layout.h"
#include "store/object_store.h"

namespace mlpo {

std::string ScaleSection(absl::string_view section) {
  return absl::StrCat(section, "s");
}

absl::StatusOr<ObjectLayout> StateLayout(StateFormat f, const RuleSpec& rule,
                                         uint64_t numel, uint64_t blocks) {
  std::vector<SectionSpec> secs = {{"p", DType::kF32, numel}};
  const DType code = f == StateFormat::kF32           ? DType::kF32
                     : f == StateFormat::kBF16Moments ? DType::kBF16
                                                      : DType::kU8;
  std::vector<StateSlot> slots = rule.Slots();
  for (const StateSlot& s : slots) secs.push_back({s.section, code, numel});
  if (f == StateFormat::kInt8Moments)
    for (const StateSlot& s : slots)
      secs.push_back({ScaleSection(s.section), DType::kF32, blocks});
  return ObjectLayout::Make(secs);
}

absl::StatusOr<ObjectLayout> StateLayout(StateFormat f, uint64_t numel,
                                         uint64_t blocks) {
  return StateLayout(f, RuleSpec(), numel, blocks);
}

absl::StatusOr<StateRef> StateIn(StateFormat f, const RuleSpec& rule,
                                 CheckoutLease* lease, const QuantGrid& grid) {
  StateRef r;
  r.format = f;
  r.grid = &grid;
  std::vector<StateSlot> slots = rule.Slots();
  r.slots = static_cast<int>(slots.size());
  for (int k = 0; k < r.slots; ++k) {
    r.slot[k] = lease->SectionData(slots[k].section);
    r.nonneg[k] = slots[k].nonneg;
    bool ok = r.slot[k] != nullptr;
    if (f == StateFormat::kInt8Moments) {
      r.scale[k] = lease->Section<float>(ScaleSection(slots[k].section));
      ok = ok && r.scale[k] != nullptr;
    }
    if (!ok)
      return absl::DataLossError(absl::StrCat(
          "object ", lease->object(), " lacks section ", slots[k].section,
          " of update rule ", rule.Name(), " in state format ",
          StateFormatName(f)));
  }
  return r;
}

std::string ParamStepsObject(size_t params) {
  return absl::StrCat("param_steps.n", params);
}

absl::StatusOr<ObjectLayout> ParamStepsLayout(size_t params) {
  return ObjectLayout::Make({{"t", DType::kF32, 2 * uint64_t{params}}});
}

absl::StatusOr<std::vector<uint64_t>> ParamStepsIn(const CheckoutLease& lease,
                                                   size_t params) {
  auto want = ParamStepsLayout(params);
  if (!want.ok() || !(lease.layout() == *want))
    return absl::DataLossError(absl::StrCat(
        lease.object(), " is laid out as ", lease.layout().DebugString(),
        ", not as the step counts of ", params, " parameters"));
  std::vector<uint64_t> out(params);
  std::memcpy(out.data(), lease.data() + lease.layout().Find("t")->offset,
              params * sizeof(uint64_t));
  return out;
}

}  // namespace mlpo
