// `mlpo plan` against a measured `mlpo-bench step` (slow label): two capped
// paths, the bench's own probe figures and kernel rate fed to the planner,
// and mlpo's predicted step within a stated tolerance of the measured one.
// The model is a lower bound (it leaves out latency and the pipeline's
// start and end), so measured >= 0.9 x predicted and <= 1.6 x predicted.
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace mlpo {
namespace {

// stdout of `cmd`, which must succeed.
std::string Output(const std::string& cmd) {
  CommandResult r = RunCommand(cmd);
  EXPECT_EQ(r.code, 0) << cmd;
  return r.out;
}

TEST(PlanVsBenchTest, PredictedStepMatchesTheMeasuredOne) {
  TempDir dir;
  std::string a = dir.Sub("a"), b = dir.Sub("b");
  std::string bench = Output(std::string(MLPO_BENCH) +
                          " step --params 48000000 --subgroup 4000000 "
                          "--steps 2 --modes mlpo --probe-seconds 1 --paths " +
                          a + "@300MB," + b + "@150MB --dir " + dir.path() +
                          " --json 2>/dev/null");
  auto bj = nlohmann::json::parse(bench);
  std::string paths;
  for (auto& p : bj["paths"]) {
    double u = p["mixed_bps"];
    paths += " --path p" + std::to_string(paths.size()) + ":" +
             std::to_string(static_cast<uint64_t>(u)) + "/" +
             std::to_string(static_cast<uint64_t>(u)) + "/" +
             std::to_string(static_cast<uint64_t>(u));
  }
  std::string plan = Output(
      std::string(MLPO_CLI) + " plan --params 48000000 --subgroup 4000000 "
      "--dram 1G --kernel-rate " +
      std::to_string(static_cast<uint64_t>(bj["r_adam_params_per_s"])) +
      paths + " --json");
  auto pj = nlohmann::json::parse(plan);
  double predicted = pj["modes"]["mlpo"]["step_s"];
  double measured = bj["modes"]["mlpo"]["step_s"];
  RecordProperty("predicted_s", std::to_string(predicted));
  RecordProperty("measured_s", std::to_string(measured));
  std::fprintf(stderr, "mlpo step: predicted %.3f s, measured %.3f s (%.2fx)\n",
               predicted, measured, measured / predicted);
  EXPECT_GE(measured, 0.9 * predicted);
  EXPECT_LE(measured, 1.6 * predicted);
}

}  // namespace
}  // namespace mlpo
