// `mlpo-bench step`: running one mode (bench/step_bench.cc has the
// command, its flags and what it prints). A mode is the synthetic model's
// update over its own store on the given paths; it measures step time,
// waits, bytes per path and the fractions after each step.
#ifndef MLPO_BENCH_STEP_MODE_H_
#define MLPO_BENCH_STEP_MODE_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/removed_on_signal.h"
#include "base/state_format.h"
#include "optimizer/kernel/update_rule.h"
#include "optimizer/optimizer.h"
#include "tools/probe/bandwidth_probe.h"

namespace mlpo {

struct PathSpec {
  std::pair<dev_t, ino_t> dev_ino{};
  std::string root;
  uint64_t cap = 0;
  double mixed_bps = 0;  // U_k, measured
};

struct ModeResult {
  std::string mode;
  double step_s = 0, backward_s = 0, read_wait_s = 0, compute_s = 0,
         write_wait_s = 0;
  double bytes_read = 0, bytes_written = 0;
  double cache_hit_bytes = 0;  // reads the DRAM tier saved, per step
  uint64_t peak_rss = 0;       // of the process after this mode (VmHWM)
  std::vector<std::vector<double>> fractions_per_step;  // after each step
  std::vector<PathBytes> paths;
  size_t paths_used = 0;  // the first paths_used of the run's paths
  // Each timed step's own time and bytes read + written, in order.
  std::vector<double> timed_step_s, timed_moved;
};

// Resident memory of this process now (VmRSS), bytes; 0 when unknown.
uint64_t ResidentBytes();

// --cap-change ROOT@CAP:STEP: the path's cap becomes CAP from step STEP on.
struct CapChange {
  std::string root;
  uint64_t cap = 0;
  int step = 0;
};

// The ablation rows, in order: each adds one idea to the row before.
extern const char* const kAblation[5];

// The paths' mixed bandwidth at one moment of a run. The disk here moves
// 1-8 GB/s depending on the minute, so the bench probes before the first
// mode and again before and after each mode's steps, and each mode's bound
// uses the faster of the probes on either side of it.
struct DiskProbe {
  std::vector<double> each;  // U_k, each path alone
  double together = 0;       // every path driven at once (one path: U_0)
  // min(1, together / sum of U_k): paths on one device cannot add up.
  double Scale() const;
  // U of a mode on the first `n` paths: U_0 alone, or their U_k summed
  // and scaled by Scale().
  double BoundBps(size_t n) const;
};

// Mixed read+write bytes/s of each path as ProbePath (`mlpo profile`)
// defines it: the same file size, block and depth, the path's caps; then
// of all paths driven at once. One probe file per path, written once and
// removed when the prober goes, so a run can probe again between modes.
// Exits the process (BenchFail) on an error.
class DiskProber {
 public:
  DiskProber(const std::vector<PathSpec>& paths, double seconds);
  ~DiskProber();
  DiskProber(const DiskProber&) = delete;
  DiskProber& operator=(const DiskProber&) = delete;
  // One progress line per probe, naming `when`.
  DiskProbe Probe(const std::string& when);
  // Puts every path under the probe's load for its duration, all at once,
  // measuring nothing: a rested disk first fills a host-side write cache
  // and reads faster than any sustained load sees.
  void Condition();

 private:
  std::vector<ProbeJob> jobs_;
  // Each probe file goes if the run is stopped (^C, SIGTERM).
  std::vector<std::unique_ptr<RemovedOnSignal>> removed_if_stopped_;
};

// One run of a mode: what `mlpo-bench step`'s flags say for it.
struct ModeRun {
  std::string mode;  // baseline, paper, mlpo, mlpo+cache or an ablation row
  std::string row;   // the row's name in the output (progress lines)
  std::vector<PathSpec> paths;
  std::string dir;  // the bench's working directory
  uint64_t params = 0, subgroup = 0;
  int steps = 0;   // timed steps, after the untimed ones
  int warmup = 0;  // untimed steps after the one that creates the state
  int prefetch = 0, commits = 0, threads = 0;
  int queue_depth = 16;  // I/O requests in flight per path
  bool stream = false;  // gradients streamed in per subgroup
  bool keep = false;    // keep the store afterwards
  Durability durability = Durability::kStep;
  double u_scale = 1;  // scales U_k for the pipeline when paths share a disk
  std::string cache;   // DRAM tier budget, as --cache
  CapChange change;    // --cap-change
  int paper_ratio = 0;
  StateFormat format = StateFormat::kF32;
  RuleKind rule = RuleKind::kAdam;  // --optimizer
};

// One mode in one state format over its own store, driven a step at a
// time so that the bench can interleave several runners step by step (a
// mode's formats take turns, and the disk's drift from minute to minute
// falls on all of them alike). Exits the process (BenchFail) on an error.
class ModeRunner {
 public:
  // Opens the store (removing one left by an earlier run).
  explicit ModeRunner(const ModeRun& run);
  ~ModeRunner();
  ModeRunner(const ModeRunner&) = delete;
  ModeRunner& operator=(const ModeRunner&) = delete;

  // The untimed step that creates the state.
  void CreateStep();
  // `run.warmup` more untimed steps.
  void WarmupSteps();
  // One timed step, added to the result (after any untimed ones not yet
  // taken).
  void TimedStep();
  // Closes the store and removes its files (unless `run.keep`).
  ModeResult Finish();

 private:
  void OneStep(bool timed);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A mode's formats stay resident together while they take turns. Called
// once the first (`first_row`) has created its state, `rss_before` having
// been read before it opened: if the other formats, each taken to hold as
// much, would not fit in `limit` bytes (0: the machine's available memory),
// finishes `runners` (removing their stores) and fails, rather than be
// killed for memory minutes later.
void CheckFormatsFit(uint64_t limit, const std::string& first_row,
                     size_t rows, uint64_t rss_before,
                     std::vector<std::unique_ptr<ModeRunner>>* runners);

}  // namespace mlpo

#endif  // MLPO_BENCH_STEP_MODE_H_
