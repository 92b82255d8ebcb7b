// `mlpo-bench gpu` as a script runs it (the host backend, a small model):
// both sides' parameters bit-identical, the step measured against the
// kernel alone, a trace of the steps that shows the stage's fused copies,
// the kernel runs and the parameter copies; a --trace that cannot be
// written fails before any work. The figures themselves are not asserted
// (speed is the benchmark's to show, not a test's).
#include <cstdio>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_test_util.h"
#include "tests/test_util.h"

namespace mlpo {
namespace {

TEST(GpuBenchTest, HostStepIsMeasuredAgainstTheKernelAndTraced) {
  TempDir dir;
  std::string trace = dir.path() + "/step.json";
  CommandResult r = RunCommand(std::string(MLPO_BENCH) +
                               " gpu --backend host --skip-copies --params "
                               "4194304 --subgroup 1048576 --steps 2 "
                               "--threads 2 --json --dir " + dir.Sub("work") +
                               " --trace " + trace + " 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string& out = r.out;
  auto j = nlohmann::json::parse(out);
  const auto& s = j["step"];
  EXPECT_TRUE(s["params_identical"].get<bool>());
  EXPECT_EQ(s["kernel_params_per_s_runs"].size(), 3u);
  EXPECT_GT(s["kernel_params_per_s"].get<double>(), 0);
  EXPECT_NEAR(s["host_step_vs_kernel"].get<double>(),
              4194304.0 / s["host_median_s"].get<double>() /
                  s["kernel_params_per_s"].get<double>(),
              1e-9);
  EXPECT_EQ(s["bytes_per_param"]["total"].get<int>(), 34);
  EXPECT_FALSE(j.contains("copies"));  // --skip-copies
  // The trace: every part of a step on its row.
  std::set<std::string> names = TraceEventNames(trace);
  for (const char* want : {"stage copy+stats", "param copy", "step",
                           "read wait", "commit call"})
    EXPECT_TRUE(names.count(want)) << want;
  bool kernel = false;
  for (const auto& n : names) kernel |= n.rfind("adam ", 0) == 0;
  EXPECT_TRUE(kernel);
  EXPECT_GT(j["trace_events"].get<size_t>(), 0u);
}

TEST(GpuBenchTest, AnUnwritableTraceFailsBeforeAnyWork) {
  TempDir dir;
  CommandResult r = RunCommand(std::string(MLPO_BENCH) +
                               " gpu --backend host --skip-copies --params "
                               "1048576 --dir " + dir.Sub("work") +
                               " --trace " + dir.path() + "/no/such/t.json" +
                               " 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  const std::string& out = r.out;
  EXPECT_NE(out.find("--trace: cannot write"), std::string::npos) << out;
  EXPECT_EQ(out.find("opening the two stores"), std::string::npos) << out;
}

}  // namespace
}  // namespace mlpo
