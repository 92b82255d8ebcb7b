// Shared flags and helpers of mlpo-bench subcommands: every subcommand takes
// --dir (where its files go), --quick (a reduced run, ~30 s here) and --json.
#ifndef MLPO_BENCH_BENCH_COMMON_H_
#define MLPO_BENCH_BENCH_COMMON_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "optimizer/optimizer.h"
#include "tools/cli_util.h"  // Progress

namespace mlpo {

struct BenchFlags {
  std::string dir = "var/bench";
  bool quick = false;
  bool json = false;
  bool keep = false;
};

void AddBenchFlags(CLI::App* cmd, BenchFlags* f);
// Creates `dir` (and parents). Exits the command with a message on failure.
void EnsureDir(const std::string& dir);
// For a count option (--params, --subgroup): "500M", "1.5B", "70e9" or
// digits become the number (base/size_units.h ParseCount); anything else,
// zero included, is a usage error naming the text.
CLI::Validator CountArg();
// A directory the user named with `flag`: made when missing, but never its
// parents (as a store's paths are): a missing parent is a typo or a disk
// that is not mounted, and a benchmark writes gigabytes there. Exits the
// command with a usage error naming it.
void EnsureNamedDir(const std::string& flag, const std::string& dir);
// --dir: the default (var/bench in the checkout) is made with its parents,
// a directory the user named as EnsureNamedDir makes it.
void EnsureBenchDir(const BenchFlags& f);
// Fails the command (exit 2) naming `flag` when `file` cannot be written,
// before any work (the file is created, empty, if it was not there).
void EnsureWritableFile(const std::string& flag, const std::string& file);
// A size given for `flag`, or the command fails naming flag and value.
uint64_t SizeArg(const std::string& flag, const std::string& value);
// Exactly `want` comma-separated sizes for `flag` (e.g. --caps 600MB,300MB).
std::vector<uint64_t> SizeListArg(const std::string& flag,
                                  const std::string& value, size_t want);

// Ends the subcommand `cmd` with "mlpo-bench CMD: WHAT: message", exit 1.
[[noreturn]] void BenchFail(const std::string& cmd, const std::string& what,
                            const absl::Status& s);

void AddIoBench(CLI::App& app);
void AddStoreBench(CLI::App& app);
void AddStepBench(CLI::App& app);
void AddKernelBench(CLI::App& app);
void AddSlotsBench(CLI::App& app);
void AddGpuBench(CLI::App& app);

// The synthetic model the step benches update (step, gpu): one AdamW group
// of `params` elements (weight decay 0.01) in subgroups of `subgroup`, fp16
// gradients in, bf16 parameters out, on `threads` kernel threads.
void SetSyntheticModel(OptimizerOptions* o, uint64_t params,
                       uint64_t subgroup, int threads);

}  // namespace mlpo

#endif  // MLPO_BENCH_BENCH_COMMON_H_
