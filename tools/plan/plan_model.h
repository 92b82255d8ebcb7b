// The capacity planner's model (`mlpo plan`): from a model size, ranks per
// node, DRAM and each path's measured bandwidth, what one update step needs
// and how long it takes in each mode, by the performance model of
// docs/design.md: a step moves its bytes over the paths at once, a path k
// carrying f_k of them at U_k (mixed read+write bandwidth), so the step takes
// max_k(f_k * B / U_k), and never less than the kernel's params / R_adam.
//
//   baseline  one path, 28 B/param: 12 read + 4 fp32 gradient read + 12 write
//   paper     two paths by a fixed integer ratio (1/r on the second), the
//             DRAM budget as a cache of whole subgroups
//   mlpo      every path, f_k proportional to U_k water-filled over capacity,
//             2 x the state format's bytes per parameter (24 for fp32, 16
//             for bf16-moments, ~12.06 for int8-moments) less what the DRAM
//             tier saves (reads; writes too with durability "tag")
// (baseline and paper are the fp32 systems they model.)
//
// Pure functions; thread-compatible.
#ifndef MLPO_TOOLS_PLAN_PLAN_MODEL_H_
#define MLPO_TOOLS_PLAN_PLAN_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mlpo {

struct PlanPath {
  std::string name;
  double read_bps = 0, write_bps = 0, mixed_bps = 0;  // U_k = mixed_bps
  uint64_t capacity = 0;  // bytes; 0 = unknown / unlimited
};

struct PlanInput {
  double params = 0;      // of the whole model
  int ranks = 1;          // ranks sharing this node's paths and DRAM
  uint64_t dram = 0;      // bytes of host memory for mlpo on the node
  std::vector<PlanPath> paths;
  double kernel_params_per_s = 1e9;  // R_adam of one rank
  uint64_t subgroup = 8'000'000;     // elements
  int prefetch = 2, commits = 2;
  bool durability_tag = false;
  double state_bytes_per_param = 12;  // StateBytesPerParam of the format
  int paper_ratio = 0;               // 0: the best integer
  uint64_t overhead = uint64_t{1} << 30;  // per rank: RocksDB, runtime
};

struct PlanMode {
  std::string mode;
  double bytes_per_step = 0;  // node total
  double step_s = 0;
  std::vector<double> fractions;
  std::string limit;  // what bounds the step
};

struct PlanResult {
  double params_per_rank = 0;
  uint64_t state_bytes_per_rank = 0;   // p, m, v in the state format
  uint64_t grad_stage_bytes_per_rank = 0;
  uint64_t inflight_bytes_per_rank = 0;  // prefetch + commits buffers
  uint64_t cache_bytes_per_rank = 0;   // what is left of DRAM for the tier
  double cache_fraction = 0;           // of the state
  uint64_t dram_needed_without_cache_per_rank = 0;
  bool dram_fits = true;
  // Disk per path for the node's state: a head and one tag of every object.
  std::vector<uint64_t> disk_bytes;
  std::vector<bool> disk_fits;
  int paper_ratio = 0;
  std::vector<PlanMode> modes;  // baseline, paper (two paths), mlpo
  std::string saturates_first;
};

absl::StatusOr<PlanResult> Plan(const PlanInput& in);

// "nvme:3GB/2GB/4GB[:2TB]": name, read/write/mixed bytes per second, and an
// optional capacity. Sizes as mlpo reads them ("3G", "2500MB", ...).
absl::StatusOr<PlanPath> ParsePlanPath(const std::string& spec);

}  // namespace mlpo

#endif  // MLPO_TOOLS_PLAN_PLAN_MODEL_H_
