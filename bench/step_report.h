// `mlpo-bench step`: what it makes of a run once every row has its figures
// in the JSON object (bench/step_bench.cc runs the rows): the rows compared
// with each other, the text table, the plot. Everything here reads the JSON
// object the run built, so `--json` and the table can never disagree.
#ifndef MLPO_BENCH_STEP_REPORT_H_
#define MLPO_BENCH_STEP_REPORT_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/state_format.h"
#include "nlohmann/json.hpp"

namespace mlpo {

// The row names of a run: each row is a mode in one state format ("mlpo",
// or "mlpo/bf16-moments" with several formats).
struct StepRows {
  std::vector<std::string> order;  // as run and printed
  std::map<std::string, std::pair<std::string, StateFormat>> of;  // mode, format
  bool several_formats = false;
};

// The fp32 rows the modes are compared by ("" where the run has none).
struct ComparedRows {
  std::string baseline, mlpo, cache, paper;
};

// Adds to `*out` what compares rows measured in the same run: each compact
// format's ratio_to_fp32 in its mode, every row's ratio_to_baseline (update
// phase, and with the backward phase), speedup_vs_baseline, the paper mode's
// best integer ratio for the probed bandwidths (two paths or more),
// speedup_vs_paper and speedup_cache_vs_mlpo. Reads out["modes"][row]
// ("step_s", "backward_s", "state_format") and out["paths"].
ComparedRows AddComparisons(const StepRows& rows, int paper_ratio,
                            nlohmann::json* out);

// The text report on stdout: the run's settings, each path's U, one line
// per row, the comparisons. Reads only `out`.
void PrintStepReport(const nlohmann::json& out, const ComparedRows& compared);

// Draws the rows as stacked wait/compute bars into `png` with
// bench/plot_step.py (Debian's python3 and its matplotlib); records it in
// out["plot"]. Exits the process (BenchFail) when plotting fails.
void DrawStepPlot(const std::string& png, nlohmann::json* out);

}  // namespace mlpo

#endif  // MLPO_BENCH_STEP_REPORT_H_
