#include "bench/step_report.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_common.h"
#include "tools/cli_util.h"

namespace mlpo {

using json = nlohmann::json;

ComparedRows AddComparisons(const StepRows& rows, int paper_ratio,
                            json* out) {
  json& modes = (*out)["modes"];
  auto step_s = [&](const std::string& row) {
    return modes[row]["step_s"].get<double>();
  };
  // Each compact format against fp32 in the same mode.
  for (const std::string& row : rows.order) {
    const auto& [m, fmt] = rows.of.at(row);
    const std::string base = absl::StrCat(m, "/fp32");
    if (fmt != StateFormat::kF32 && modes.contains(base))
      modes[row]["ratio_to_fp32"] = step_s(base) / step_s(row);
  }
  // The modes compared with each other by their fp32 rows.
  auto fp32_row = [&](const std::string& mode) -> std::string {
    std::string row = mode == "baseline" || !rows.several_formats
                          ? mode
                          : absl::StrCat(mode, "/fp32");
    return modes.contains(row) &&
                   modes[row]["state_format"] ==
                       StateFormatName(StateFormat::kF32)
               ? row
               : std::string();
  };
  ComparedRows c{.baseline = fp32_row("baseline"),
                 .mlpo = fp32_row("mlpo"),
                 .cache = fp32_row("mlpo+cache"),
                 .paper = fp32_row("paper")};
  if (!c.baseline.empty()) {
    const double b_step = step_s(c.baseline),
                 b_bwd = modes[c.baseline]["backward_s"].get<double>();
    for (auto& [row, j] : modes.items()) {
      const double s = j["step_s"].get<double>();
      j["ratio_to_baseline"] = b_step / s;
      j["total_ratio_to_baseline"] =
          (b_step + b_bwd) / (s + j["backward_s"].get<double>());
    }
    if (!c.mlpo.empty())
      (*out)["speedup_vs_baseline"] = b_step / step_s(c.mlpo);
  }
  const json& paths = (*out)["paths"];
  if (paths.size() >= 2) {
    // The integer a careful MLP-Offload user would pick: the share 1/r on
    // the second path closest to balancing both paths' time.
    const double u1 = paths[0]["mixed_bps"].get<double>(),
                 u2 = paths[1]["mixed_bps"].get<double>();
    int best = 1;
    double best_t = 1e300;
    for (int r = 1; r <= 64; ++r) {
      const double f2 = 1.0 / r;
      const double t = std::max((1 - f2) / u1, f2 / u2);
      if (t < best_t) {
        best_t = t;
        best = r;
      }
    }
    (*out)["paper_ratio"] = paper_ratio;
    (*out)["paper_best_ratio"] = best;
  }
  if (!c.paper.empty()) {
    const std::string& ours = !c.cache.empty() ? c.cache : c.mlpo;
    if (!ours.empty())
      (*out)["speedup_vs_paper"] = step_s(c.paper) / step_s(ours);
  }
  if (!c.mlpo.empty() && !c.cache.empty())
    (*out)["speedup_cache_vs_mlpo"] = step_s(c.mlpo) / step_s(c.cache);
  return c;
}

void PrintStepReport(const json& out, const ComparedRows& c) {
  std::printf("%s params, subgroup %s, %d timed steps; R_adam %.0f M params/s\n",
              FormatBytes(out["params"].get<double>()).c_str(),
              FormatBytes(out["subgroup"].get<double>()).c_str(),
              out["steps"].get<int>(),
              out["r_adam_params_per_s"].get<double>() / 1e6);
  if (out["paths"].size() > 1)
    std::printf("all paths together: mixed %s (sum of each alone %s)\n",
                FormatRate(out["mixed_together_bps"].get<double>()).c_str(),
                FormatRate(out["mixed_sum_bps"].get<double>()).c_str());
  for (auto& p : out["paths"])
    std::printf("path %s: cap %s, mixed U = %s\n",
                p["root"].get<std::string>().c_str(),
                p["cap_bps"].get<double>() > 0
                    ? FormatRate(p["cap_bps"].get<double>()).c_str()
                    : "none",
                FormatRate(p["mixed_bps"].get<double>()).c_str());
  std::printf("%-25s %8s %8s %8s %8s %8s %7s %9s %9s %7s %8s %8s\n",
              "mode", "step s", "bwd s", "rd wait", "compute", "wr wait",
              "B/param", "GB/s", "Mparam/s", "U GB/s", "bound s", "bound/s");
  const auto rows = out["mode_order"].get<std::vector<std::string>>();
  for (const std::string& m : rows) {
    const json& j = out["modes"][m];
    std::printf("%-25s %8.2f %8.2f %8.2f %8.2f %8.2f %7.1f %9.2f %9.1f %7.2f "
                "%8.2f %8.3f%s\n",
                m.c_str(), j["step_s"].get<double>(),
                j["backward_s"].get<double>(), j["read_wait_s"].get<double>(),
                j["compute_s"].get<double>(), j["write_wait_s"].get<double>(),
                j["bytes_per_param"].get<double>(),
                j["effective_gbps"].get<double>(),
                j["params_per_s"].get<double>() / 1e6,
                j["bound_bps"].get<double>() / 1e9,
                j["lower_bound_s"].get<double>(),
                j["bound_efficiency"].get<double>(),
                j.contains("ratio_to_fp32")
                    ? absl::StrFormat("  %.2fx fp32",
                                      j["ratio_to_fp32"].get<double>())
                          .c_str()
                    : "");
  }
  for (auto& [row, j] : out["modes"].items())
    if (j.contains("ratio_to_adam"))
      std::printf("%s: %.2fx the params/s of %s (same mode and format, "
                  "interleaved); %.2f of its own bound\n",
                  row.c_str(), j["ratio_to_adam"].get<double>(),
                  j["adam_row"].get<std::string>().c_str(),
                  j["bound_efficiency"].get<double>());
  if (out.contains("speedup_vs_baseline"))
    std::printf("speedup_vs_baseline (update phase) %.2fx; with the backward "
                "phase %.2fx\n",
                out["speedup_vs_baseline"].get<double>(),
                out["modes"][c.mlpo]["total_ratio_to_baseline"].get<double>());
  std::string rss;
  for (const std::string& m : rows)
    rss += absl::StrFormat(
        " %s %s", m,
        FormatBytes(out["modes"][m]["peak_rss_bytes"].get<double>()));
  std::printf("peak RSS of the process after each mode:%s%s\n", rss.c_str(),
              out["stream"].get<bool>() ? " (parameters streamed)" : "");
  if (out.contains("speedup_vs_paper"))
    std::printf("speedup_vs_paper %.2fx (paper ratio %d; the best integer "
                "for these bandwidths is %d)\n",
                out["speedup_vs_paper"].get<double>(),
                out["paper_ratio"].get<int>(),
                out["paper_best_ratio"].get<int>());
  if (out.contains("speedup_cache_vs_mlpo"))
    std::printf("mlpo+cache (cache %s): %.2fx mlpo's update phase, %s of "
                "reads per step served from DRAM\n",
                out["cache"].get<std::string>().c_str(),
                out["speedup_cache_vs_mlpo"].get<double>(),
                FormatBytes(out["modes"][c.cache]["cache_hit_bytes"]
                                .get<double>())
                    .c_str());
}

void DrawStepPlot(const std::string& png, json* out) {
  auto fail = [](const absl::Status& s) { BenchFail("step", "--plot", s); };
  const std::string tmp = png + ".json";
  {
    std::ofstream j(tmp);
    j << out->dump(2) << "\n";
    if (!j) fail(absl::InternalError("cannot write " + tmp));
  }
  // No shell: the file names go to python as they are.
  std::vector<std::string> argv = {MLPO_PLOT_PYTHON, MLPO_PLOT_SCRIPT, tmp,
                                   png};
  std::vector<char*> cargv;
  for (auto& x : argv) cargv.push_back(x.data());
  cargv.push_back(nullptr);
  pid_t pid = 0;
  int rc =
      ::posix_spawn(&pid, cargv[0], nullptr, nullptr, cargv.data(), environ);
  int status = 0;
  if (rc == 0 && ::waitpid(pid, &status, 0) < 0) rc = errno;
  std::filesystem::remove(tmp);
  if (rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail(absl::InternalError(absl::StrCat(
        "plotting failed: ", MLPO_PLOT_PYTHON, " ", MLPO_PLOT_SCRIPT,
        rc != 0 ? " could not start" : "", " (exit ", WEXITSTATUS(status),
        ")")));
  (*out)["plot"] = png;
}

}  // namespace mlpo
