#include "optimizer/partition.h"

#include <algorithm>

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
      s.grid = QuantGrid(s.pieces, s.numel);
      out.push_back(s);
    }
  }
  return out;
}

void AssignPieces(std::vector<Subgroup>* subgroups,
                  const std::vector<std::vector<uint64_t>>& param_starts) {
  for (Subgroup& s : *subgroups) {
    s.pieces = {0};
    if (static_cast<size_t>(s.group) < param_starts.size())
      for (uint64_t start : param_starts[s.group])
        if (start > s.group_offset && start < s.group_offset + s.numel)
          s.pieces.push_back(start - s.group_offset);
    s.grid = QuantGrid(s.pieces, s.numel);
  }
}

std::vector<std::vector<int>> SubgroupsByGroup(
    const std::vector<Subgroup>& subgroups) {
  std::vector<std::vector<int>> out;
  for (const Subgroup& s : subgroups) {
    if (static_cast<size_t>(s.group) >= out.size()) out.resize(s.group + 1);
    out[s.group].push_back(s.index);
  }
  return out;
}

std::vector<SubgroupSlice> SlicesOf(const std::vector<Subgroup>& subgroups,
                                    const std::vector<int>& in_group,
                                    uint64_t offset, uint64_t count) {
  std::vector<SubgroupSlice> out;
  for (int si : in_group) {
    const Subgroup& s = subgroups[si];
    uint64_t lo = std::max(offset, s.group_offset);
    uint64_t hi = std::min(offset + count, s.group_offset + s.numel);
    if (lo < hi) out.push_back({si, lo - s.group_offset, hi - s.group_offset});
  }
  return out;
}

}  // namespace mlpo
