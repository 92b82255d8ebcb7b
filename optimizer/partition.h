// Splits one rank's flat parameters into subgroups: contiguous slices of at
// most subgroup_numel elements that never span two parameter groups. Each
// subgroup is one store object with sections p, m, v (fp32).
#ifndef MLPO_OPTIMIZER_PARTITION_H_
#define MLPO_OPTIMIZER_PARTITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "optimizer/kernel/state_codec.h"

namespace mlpo {

struct Subgroup {
  int index = 0;              // 0..N-1 in flat order
  int group = 0;              // parameter group
  uint64_t group_offset = 0;  // first element within the group
  uint64_t numel = 0;
  std::string object;         // store object name
  // Where each parameter's part of the subgroup starts (subgroup-relative,
  // sorted, first 0), and the int8-moments blocks they give (never
  // spanning two parameters).
  std::vector<uint64_t> pieces = {0};
  QuantGrid grid;
};

// The store object of a subgroup's fp32 gradients in the baseline mode
// (DeepSpeed's: gradients offloaded in backward, read by the step).
inline std::string GradObjectName(const Subgroup& s) {
  return "grad." + s.object;
}

// Groups of numel 0 are allowed and get no subgroup. InvalidArgument when
// subgroup_numel is 0.
absl::StatusOr<std::vector<Subgroup>> PartitionParams(
    const std::vector<uint64_t>& group_numel, uint64_t subgroup_numel);

// Sets each subgroup's pieces (and grid) from where its group's parameters start
// (`param_starts[group]`: offsets within the group, sorted; a missing or
// empty list is one parameter).
void AssignPieces(std::vector<Subgroup>* subgroups,
                  const std::vector<std::vector<uint64_t>>& param_starts);

// Subgroup indices of each parameter group, in order.
std::vector<std::vector<int>> SubgroupsByGroup(
    const std::vector<Subgroup>& subgroups);

// The part of elements [offset, offset + count) of a group that each of its
// subgroups holds: the subgroup's index and [a, b) in its own elements.
// `in_group`: that group's subgroup indices (SubgroupsByGroup).
struct SubgroupSlice {
  int index;
  uint64_t a, b;
};
std::vector<SubgroupSlice> SlicesOf(const std::vector<Subgroup>& subgroups,
                                    const std::vector<int>& in_group,
                                    uint64_t offset, uint64_t count);

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_PARTITION_H_
