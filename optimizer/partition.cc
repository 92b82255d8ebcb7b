#include "optimizer/partition.h"

#include "absl/strings/str_format.h"

namespace mlpo {

absl::StatusOr<std::vector<Subgroup>> PartitionParams(
    const std::vector<uint64_t>& group_numel, uint64_t subgroup_numel) {
  if (subgroup_numel == 0)
    return absl::InvalidArgumentError("subgroup_numel must be positive");
  std::vector<Subgroup> out;
  for (size_t g = 0; g < group_numel.size(); ++g) {
    for (uint64_t off = 0; off < group_numel[g]; off += subgroup_numel) {
      Subgroup s;
      s.index = static_cast<int>(out.size());
      s.group = static_cast<int>(g);
      s.group_offset = off;
      s.numel = std::min(subgroup_numel, group_numel[g] - off);
      s.object = absl::StrFormat("g%d.s%06d", g, s.index);
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace mlpo
