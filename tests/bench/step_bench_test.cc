// `mlpo-bench step` as a script runs it (a small model, two formats, two
// modes): a mode's formats take turns step by step, the disk is probed
// before the mode's warm-up steps and after its timed steps, and every
// mode's bound is what its own figures and the faster of the two probes
// around it give; the compact format's ratio is fp32's step time
// over its own; the trace shows the extents and the syncs. A bad
// --probe-seconds, count, format or path is refused before any work. The
// figures themselves are not asserted (speed is the benchmark's to show,
// not a test's).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/bench/bench_test_util.h"
#include "tests/test_util.h"

namespace mlpo {
namespace {

using json = nlohmann::json;

// U of a mode on the first `n` paths of one probe, as docs/design.md's bound
// defines it (written out here, not taken from the bench's code).
double ProbeU(const json& probe, size_t n) {
  std::vector<double> each = probe["mixed_bps"].get<std::vector<double>>();
  if (n == 1) return each[0];
  double sum = 0, all = 0;
  for (size_t i = 0; i < each.size(); ++i) {
    all += each[i];
    if (i < n) sum += each[i];
  }
  return sum * std::min(1.0, probe["together_bps"].get<double>() / all);
}

TEST(StepBenchTest, AModesFormatsTakeTurnsBetweenTwoProbes) {
  TempDir dir;
  const uint64_t params = 8388608;
  const int steps = 2;
  CommandResult r = RunCommand(
      std::string(MLPO_BENCH) + " step --params " + std::to_string(params) +
      " --subgroup 2097152 --steps " + std::to_string(steps) +
      " --modes mlpo,mlpo+cache "
      "--state-format fp32,int8-moments --probe-seconds 0.2 --paths " +
      dir.Sub("a") + "," + dir.Sub("b") + " --dir " + dir.path() +
      " --trace " + dir.path() + "/t.json --json 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  json j = json::parse(r.out);
  const std::vector<std::string> rows = {"mlpo/fp32", "mlpo/int8-moments",
                                         "mlpo+cache/fp32",
                                         "mlpo+cache/int8-moments"};
  ASSERT_EQ(j["mode_order"].get<std::vector<std::string>>(), rows);
  // A mode's formats take turns, one timed step each per round, and each
  // round starts with the next format.
  const std::vector<std::string> order = {
      rows[0], rows[1], rows[1], rows[0], rows[2], rows[3], rows[3], rows[2]};
  EXPECT_EQ(j["timed_step_order"].get<std::vector<std::string>>(), order);
  // One probe before everything, then per mode one after its stores were
  // created (before the warm-up steps) and one after its timed steps.
  ASSERT_EQ(j["probes"].size(), 1u + 2 * 2);
  EXPECT_EQ(j["warmup"].get<int>(), 1);
  // The first probe is the one the paths report.
  for (size_t k = 0; k < 2; ++k)
    EXPECT_EQ(j["probes"][0]["mixed_bps"][k].get<double>(),
              j["paths"][k]["mixed_bps"].get<double>());
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(rows[i]);
    const json& m = j["modes"][rows[i]];
    // The creating step, the default warm-up step, then the timed ones.
    EXPECT_EQ(m["fractions_per_step"].size(), 2u + steps);
    size_t n = m["paths_used"].get<size_t>();
    EXPECT_EQ(n, 2u);
    const size_t before = 1 + (i / 2) * 2;
    EXPECT_EQ(m["probes_used"].get<std::vector<size_t>>(),
              (std::vector<size_t>{before, before + 1}));
    double u = std::max(ProbeU(j["probes"][before], n),
                        ProbeU(j["probes"][before + 1], n));
    EXPECT_GT(u, 0);
    EXPECT_NEAR(m["bound_bps"].get<double>(), u, 1e-9 * u);
    std::vector<double> step_s = m["timed_step_s"].get<std::vector<double>>();
    std::vector<double> bytes = m["timed_step_bytes"].get<std::vector<double>>();
    ASSERT_EQ(step_s.size(), size_t{steps});
    ASSERT_EQ(bytes.size(), size_t{steps});
    double sum_s = 0, sum_bytes = 0;
    for (int k = 0; k < steps; ++k) {
      sum_s += step_s[k];
      sum_bytes += bytes[k];
    }
    EXPECT_NEAR(m["step_s"].get<double>(), sum_s / steps, 1e-9);
    double moved = m["bytes_read"].get<double>() +
                   m["bytes_written"].get<double>();
    EXPECT_NEAR(moved, sum_bytes / steps, 1e-6 * moved);
    std::string fmt = m["state_format"].get<std::string>();
    double kernel = fmt == "fp32"
                        ? j["r_adam_params_per_s"].get<double>()
                        : j["r_adam_params_per_s_of"][fmt].get<double>();
    double bound = std::max(moved / u, params / kernel);
    EXPECT_NEAR(m["lower_bound_s"].get<double>(), bound, 1e-9 * bound);
    EXPECT_NEAR(m["bound_efficiency"].get<double>(),
                bound / m["step_s"].get<double>(), 1e-9);
    EXPECT_NEAR(m["bytes_per_param"].get<double>(),
                moved / static_cast<double>(params), 1e-9);
  }
  // The trace shows the extents and, under the default durability (step),
  // each commit's path syncs and synced index write.
  std::set<std::string> names = TraceEventNames(dir.path() + "/t.json");
  for (const char* want : {"read", "write", "path sync",
                           "index write (synced)", "write wait"})
    EXPECT_TRUE(names.count(want)) << want;
  for (const char* mode : {"mlpo", "mlpo+cache"}) {
    const json& fp = j["modes"][std::string(mode) + "/fp32"];
    const json& i8 = j["modes"][std::string(mode) + "/int8-moments"];
    EXPECT_NEAR(i8["ratio_to_fp32"].get<double>(),
                fp["step_s"].get<double>() / i8["step_s"].get<double>(), 1e-9);
    EXPECT_LT(i8["bytes_per_param"].get<double>(),
              0.6 * fp["bytes_per_param"].get<double>());
  }
}

// With several formats the baseline (DeepSpeed's offload, fp32 state) is
// one row, and the comparisons between modes use their fp32 rows: they
// were missing when the rows were named MODE/FORMAT.
TEST(StepBenchTest, TheBaselineIsComparedWithTheFp32RowsOfSeveralFormats) {
  TempDir dir;
  CommandResult r = RunCommand(
      std::string(MLPO_BENCH) + " step --params 4194304 --subgroup 1048576 "
      "--steps 1 --modes baseline,mlpo,mlpo+cache "
      "--state-format int8-moments,fp32 --probe-seconds 0.1 --paths " +
      dir.Sub("nvme") + " --dir " + dir.path() + " --json 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  json j = json::parse(r.out);
  EXPECT_EQ(j["mode_order"].get<std::vector<std::string>>(),
            (std::vector<std::string>{"baseline", "mlpo/int8-moments",
                                      "mlpo/fp32", "mlpo+cache/int8-moments",
                                      "mlpo+cache/fp32"}));
  const json& modes = j["modes"];
  EXPECT_EQ(modes["baseline"]["state_format"], "fp32");
  const double base = modes["baseline"]["step_s"].get<double>();
  const double mlpo = modes["mlpo/fp32"]["step_s"].get<double>();
  const double cache = modes["mlpo+cache/fp32"]["step_s"].get<double>();
  ASSERT_TRUE(j.contains("speedup_vs_baseline")) << j.dump();
  EXPECT_NEAR(j["speedup_vs_baseline"].get<double>(), base / mlpo, 1e-9);
  ASSERT_TRUE(j.contains("speedup_cache_vs_mlpo")) << j.dump();
  EXPECT_NEAR(j["speedup_cache_vs_mlpo"].get<double>(), mlpo / cache, 1e-9);
  for (const char* row : {"mlpo/int8-moments", "mlpo+cache/int8-moments"})
    EXPECT_NEAR(modes[row]["ratio_to_baseline"].get<double>(),
                base / modes[row]["step_s"].get<double>(), 1e-9)
        << row;
}

// --optimizer: each rule's rows (adam's keep the mode's name), each
// moving its own bytes (Lion: p and one moment, 16 B a parameter against
// Adam's 24), with its params/s against adam's; one rule alone prints its
// table; an unknown rule is refused before any work.
TEST(StepBenchTest, RulesTakeTurnsAndAreComparedWithAdam) {
  TempDir dir;
  const std::string base = std::string(MLPO_BENCH) +
                           " step --params 4194304 --subgroup 1048576 "
                           "--steps 1 --modes mlpo --probe-seconds 0.1 "
                           "--paths " + dir.Sub("nvme") + " --dir " +
                           dir.path();
  CommandResult r = RunCommand(base + " --optimizer adam,lion,sgd --json "
                               "2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  json j = json::parse(r.out);
  EXPECT_EQ(j["mode_order"].get<std::vector<std::string>>(),
            (std::vector<std::string>{"mlpo", "mlpo/lion", "mlpo/sgd"}));
  const json& modes = j["modes"];
  EXPECT_EQ(modes["mlpo/lion"]["optimizer"], "lion");
  EXPECT_DOUBLE_EQ(modes["mlpo"]["bytes_per_param"].get<double>(), 24.0);
  EXPECT_DOUBLE_EQ(modes["mlpo/lion"]["bytes_per_param"].get<double>(), 16.0);
  EXPECT_DOUBLE_EQ(modes["mlpo/sgd"]["bytes_per_param"].get<double>(), 16.0);
  for (const char* row : {"mlpo/lion", "mlpo/sgd"})
    EXPECT_NEAR(modes[row]["ratio_to_adam"].get<double>(),
                modes[row]["params_per_s"].get<double>() /
                    modes["mlpo"]["params_per_s"].get<double>(),
                1e-9)
        << row;
  r = RunCommand(base + " --optimizer lion 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("mlpo/lion "), std::string::npos) << r.out;
  r = RunCommand(base + " --optimizer adamw 2>&1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown update rule 'adamw'"), std::string::npos)
      << r.out;
}

// scripts/bench.sh keeps the mlpo store and inspects it: the store must be
// where the script looks (it looked under the name from before the state
// format joined the store's name, and the script failed).
TEST(StepBenchTest, AKeptStoreIsWhereTheBenchScriptInspectsIt) {
  std::ifstream in(std::string(MLPO_SOURCE_DIR) + "/scripts/bench.sh");
  ASSERT_TRUE(in) << "scripts/bench.sh";
  std::string line, store;
  const std::string cmd = "build/tools/mlpo inspect var/nvme/";
  while (std::getline(in, line))
    if (line.rfind(cmd, 0) == 0) store = line.substr(cmd.size());
  ASSERT_FALSE(store.empty()) << "no `" << cmd << "...` line in bench.sh";
  TempDir dir;
  CommandResult r = RunCommand(
      std::string(MLPO_BENCH) + " step --params 4194304 --subgroup 1048576 "
      "--steps 1 --warmup 0 --modes mlpo --probe-seconds 0.1 --keep --paths " +
      dir.Sub("nvme") + " --dir " + dir.path() + " --json 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  CommandResult inspect = RunCommand(std::string(MLPO_CLI) + " inspect " +
                                     dir.Sub("nvme") + "/" + store +
                                     " --json 2>&1");
  EXPECT_EQ(inspect.code, 0) << store << ": " << inspect.out;
}

// A run stopped by SIGTERM (a scheduler) or ^C once its store exists: the
// store and the probe file (gigabytes each at real sizes) go with it; only
// the path's identity stays, as after a run that ends.
TEST(StepBenchTest, AStoppedRunLeavesNoStoreAndNoProbeFile) {
  for (const char* sig : {"TERM", "INT"}) {
    TempDir dir;
    const std::string nvme = dir.Sub("nvme");
    CommandResult r = RunCommand(
        std::string(MLPO_BENCH) +
        " step --params 8388608 --subgroup 2097152 --steps 100000 --warmup 0 "
        "--modes mlpo --probe-seconds 0.2 --paths " + nvme + " --dir " +
        dir.path() + " >/dev/null 2>&1 & pid=$!; for i in $(seq 600); do "
        "[ -d " + nvme + "/step-mlpo-fp32 ] && break; sleep 0.1; done; "
        "sleep 0.5; kill -" + sig + " $pid; wait $pid; echo $?");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out, "0\n") << sig << ": the run was to be stopped";
    for (auto& e : std::filesystem::directory_iterator(nvme))
      if (e.path().filename() != ".mlpo")
        ADD_FAILURE() << sig << ": left behind: " << e.path();
  }
}

TEST(StepBenchTest, BadCountsAndDurationsAreRefusedBeforeAnyWork) {
  TempDir dir;
  const std::pair<const char*, const char*> bad[] = {
      {"--probe-seconds", "0"}, {"--probe-seconds", "-1"},
      {"--probe-seconds", "abc"}, {"--steps", "0"}, {"--warmup", "-1"},
      {"--queue-depth", "0"}, {"--queue-depth", "5000"},
      {"--memory-limit", "0"}, {"--memory-limit", "12Q"},
      {"--params", "0"}, {"--subgroup", "0"}, {"--state-format", "fp16"},
      {"--cap-change", "x@1MB:1"}};
  for (const auto& [flag, value] : bad) {
    CommandResult r = RunCommand(std::string(MLPO_BENCH) + " step --quick " +
                                 flag + " " + value + " --dir " +
                                 dir.Sub("w") + " 2>&1");
    EXPECT_EQ(r.code, 2) << flag << " " << value << ": " << r.out;
    EXPECT_NE(r.out.find(flag), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("probing"), std::string::npos) << r.out;
  }
  // A directory named under a parent that is not there (a typo, a disk not
  // mounted) is refused, and nothing is made there.
  for (const char* flag : {"--paths", "--dir"}) {
    const std::string where = dir.path() + "/typo/bench";  // Sub makes it
    CommandResult r = RunCommand(std::string(MLPO_BENCH) + " step --quick " +
                                 flag + " " + where + " 2>&1");
    EXPECT_EQ(r.code, 2) << flag << ": " << r.out;
    EXPECT_NE(r.out.find("does not exist"), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/typo")) << flag;
  }
}

// A mode's formats stay resident together: when the first has created its
// state and the others would not fit in --memory-limit, the run stops with
// an error naming the sizes, before any timed step, and leaves no store
// behind; the same run with room enough goes through.
TEST(StepBenchTest, FormatsThatWouldNotFitInMemoryStopTheRunCleanly) {
  TempDir dir;
  const std::string run =
      std::string(MLPO_BENCH) + " step --params 8388608 --subgroup 2097152 "
      "--steps 1 --modes mlpo --state-format fp32,bf16-moments,int8-moments "
      "--probe-seconds 0.1 --paths " + dir.Sub("nvme") + " --dir " +
      dir.path();
  CommandResult r = RunCommand(run + " --memory-limit 10M 2>&1");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("stay resident together"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the other 2 need about"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--memory-limit 10.00 MiB"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;  // no timed
  for (const auto& e : std::filesystem::directory_iterator(dir.Sub("nvme")))
    EXPECT_NE(e.path().filename().string().rfind("step-", 0), 0u)
        << "store left behind: " << e.path();
  r = RunCommand(run + " --memory-limit 64G --json 2>/dev/null");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json::parse(r.out)["timed_step_order"].size(), 3u);
}

// A kernel run whose arrays cannot fit is refused with the bound, not
// ended by std::bad_alloc.
TEST(StepBenchTest, KernelElementsBeyondMemoryAreRefused) {
  CommandResult r = RunCommand(std::string(MLPO_BENCH) +
                               " kernel --elements 1000000000000 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("must fit in half this machine's memory"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("bad_alloc"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mlpo

