// One optimizer step over the store (docs/design.md "The update step"):
//
//   order = 0..N-1 on even steps, N-1..0 on odd ones (alternate_order)
//   keep Checkout(i+1 .. i+d) in flight (every path reads at once)
//   for each subgroup i: wait its checkout -> fused kernel over tiles on
//   the pool (grad widen + unscale + clip + the rule + cast) -> Commit(i)
//   asynchronously -> publish new params to the sink
//
// Reads, writes and compute overlap: while the kernel runs on subgroup i the
// paths read i+1..i+d and write i-1, i-2, ...
//
// The baseline mode (grad_offload) reproduces DeepSpeed ZeRO-3 NVMe offload:
// fp32 gradients are written to the store in the backward phase and read
// back in the step, order fixed, prefetch depth 1.
//
// Thread-compatible: one Step at a time.
#ifndef MLPO_OPTIMIZER_UPDATE_PIPELINE_H_
#define MLPO_OPTIMIZER_UPDATE_PIPELINE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "base/mutex.h"
#include "optimizer/grad_stage.h"
#include "optimizer/kernel/casts.h"
#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/parallel.h"
#include "optimizer/param_sink.h"
#include "optimizer/partition.h"
#include "optimizer/state_layout.h"
#include "store/object_store.h"

namespace mlpo {

struct PipelineOptions {
  int prefetch_depth = 2;         // checkouts in flight ahead, 1..64
  int max_commits_in_flight = 2;  // 1..64; each holds a subgroup's buffer
  bool alternate_order = true;    // cache-friendly order (docs/design.md)
  // Recompute the store's stripe fractions after every step from the
  // paths' observed rates (ObjectStore::AdaptPlacement).
  bool adaptive_placement = true;
  // Declare each step's access order to the DRAM tier (next-use eviction);
  // off: the tier evicts least recently used (MLP-Offload's cache).
  bool declare_order = true;
  int threads = 0;                // kernel threads; 0 = hardware threads
  size_t tile_elems = size_t{1} << 16;
  bool grad_offload = false;      // baseline: fp32 grads via the store
  // Write-behind: Step returns once every kernel ran and the sink has the
  // new parameters; its last commits (at most max_commits_in_flight)
  // drain until Settle(), which the next Step calls first (the next step's
  // first checkouts are this step's last objects: they must not be read
  // before their commits land).
  bool write_behind = false;
  // Read-ahead: once a step's kernels are done, the next step's first
  // subgroups that the DRAM tier does not hold (at most this many, in the
  // order the next step takes them) are checked out into buffers of their
  // own, so that the next Step finds their reads done (the optimizer's
  // default: 4, or prefetch_depth when deeper). Used only when the
  // object is still at the version read; any other call on the state
  // (Settle()) gives them back. 0: off.
  int read_ahead = 0;
  // Mixed read+write bandwidth U_k of each store path (bytes/s, in path
  // order) and the kernel's params/s (R_adam). When given, every report
  // carries the I/O lower bound of docs/design.md and the ratio to it.
  std::vector<double> path_mixed_bps;
  double kernel_params_per_s = 0;
};

struct PathBytes {
  std::string root;
  uint64_t read = 0, written = 0;
};

// With write-behind, a step's bytes (paths, bytes_read, bytes_written)
// include what the previous step's commits wrote after it returned.
struct StepReport {
  uint64_t step = 0;  // the step number t these updates produced
  bool skipped = false;
  std::string skip_reason;
  double grad_norm = 0;  // global L2 norm of the unscaled gradients
  double clip_coef = 1;
  double total_s = 0, read_wait_s = 0, compute_s = 0, write_wait_s = 0;
  uint64_t params = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  // The stripe fractions the next step's commits use (adaptive placement;
  // else the store's fixed ones).
  std::vector<double> fractions;
  // Checkouts the DRAM tier served (no I/O), and the bytes they saved.
  uint64_t cache_hits = 0, cache_hit_bytes = 0;
  std::vector<PathBytes> paths;
  std::vector<int> order;  // subgroups in the order they were updated
  // Subgroups whose checkout the previous step's read-ahead had done.
  int read_ahead_used = 0;
  // Update during backward: time the step waited for gradients (the gate).
  double grad_wait_s = 0;
  // The update during backward ran this step speculatively and it was
  // discarded (a clip, gradients changed after they were handed in): this
  // report is of the step redone from the state before it.
  bool redone = false;
  // The discarded speculative run's time (0 when none was redone).
  double discarded_s = 0;
  double achieved_bps = 0;  // (bytes_read + bytes_written) / total_s
  // max(bytes moved / sum U_k, params / R_adam); 0 when unknown.
  double lower_bound_s = 0;
  double bound_efficiency = 0;  // lower_bound_s / total_s (1 = at the bound)
};

// Update during backward: which subgroup the step takes next.
class ReadyGate {
 public:
  virtual ~ReadyGate() = default;
  // Blocks until a subgroup not yet taken has all its gradients in (its
  // runs in the plan then final) and returns it; an error stops the step.
  virtual absl::StatusOr<int> Next() = 0;
};

// The masters a speculative step adopted from the model's memory (the
// model's values where they differed: edits made between steps), by
// subgroup and element offset, for the step that redoes or rewinds it.
struct AdoptLog {
  Mutex mu;
  std::vector<std::map<uint64_t, std::vector<float>>> by_subgroup
      ABSL_GUARDED_BY(mu);
};

// What one step does to each subgroup. A run is one parameter's part of a
// subgroup: elements [offset, offset + n) of the subgroup.
struct StepRun {
  uint64_t offset = 0, n = 0;
  // Index into StepPlan::consts (the parameter's own step count), or -1:
  // no gradient this step, so p, m and v stay as they are.
  int consts = -1;
  // The model's tensor at the run's first element (in memory_dtype), or
  // nullptr. When set, its values are adopted as the master where they
  // differ (AdoptModelValues) and the new parameters are written there
  // instead of to the sink.
  void* memory = nullptr;
  DType memory_dtype = DType::kF32;
};
struct StepPlan {
  // How the subgroups' objects hold the rule's slots (StateLayout).
  StateFormat format = StateFormat::kF32;
  RuleSpec rule;
  std::vector<RuleConsts> consts;
  // Per subgroup index. An empty list: the whole subgroup is one run with
  // consts[group] (every element has its gradient). For int8-moments a run
  // must not span two of the subgroup's pieces (its parameters).
  std::vector<std::vector<StepRun>> runs;
  // Per subgroup index (or empty): fp32 master values put in first, by
  // element offset within the subgroup.
  const std::vector<std::map<uint64_t, std::vector<float>>>* overrides =
      nullptr;
  // Update during backward: subgroups are taken as `gate` hands them out;
  // `order` is the order expected (reads are issued in it, and the DRAM
  // tier and the read-ahead take it for the next step's too). Without a
  // gate: `order` when given, else the plain (alternating) one.
  ReadyGate* gate = nullptr;
  std::vector<int> order;
  // A step redone, or rewound, after a discarded one (the update during
  // backward is speculative: a discarded step's new parameters are in
  // the model's memory already). `adopt` false: the model's values are
  // not adopted, and runs without a gradient write their parameters
  // (from p) into the model's memory too, so that every parameter the
  // discarded step touched is written again. `adopted`: the masters the
  // discarded step had adopted from the model (AdoptLog), put in after
  // `overrides`.
  bool adopt = true;
  // With `adopt` false, per subgroup index: true where the discarded step
  // wrote the model's memory (no adoption there); false subgroups adopt as
  // usual (a redo of a step stopped before it took them). nullptr or
  // empty: none adopts.
  const std::vector<bool>* written = nullptr;
  const std::vector<std::map<uint64_t, std::vector<float>>>* adopted =
      nullptr;
  // A speculative step records there every tile whose masters it adopted
  // from the model (nullptr: nothing recorded).
  AdoptLog* log = nullptr;
  // false: a rewind: nothing is updated or committed; each subgroup's
  // parameters are written out and its checkout given back.
  bool commit = true;
  // Only these subgroups, in this order (empty: every one).
  std::vector<int> only;
};

// Puts pending master values (by element offset) into a subgroup's p.
void ApplyOverrides(const std::map<uint64_t, std::vector<float>>& overrides,
                    float* p);

class Prefetcher;  // optimizer/prefetcher.h

class UpdatePipeline {
 public:
  class CommitWindow;  // commits in flight (update_pipeline.cc)

  UpdatePipeline(ObjectStore* store, const std::vector<Subgroup>* subgroups,
                 const PipelineOptions& options);
  ~UpdatePipeline();
  // Runs step t as `plan` says (after Settle()). On error some subgroups
  // may hold step t and others t-1: restore a tag.
  absl::StatusOr<StepReport> Step(uint64_t t, const StepPlan& plan,
                                  const GradStage& grads, ParamSink* sink);
  // Waits for the commits a write-behind step left in flight; the first
  // error, naming the step. Ok when none are. Gives back the read-ahead
  // checkouts unless `keep_read_ahead` (the next Step's own call).
  absl::Status Settle(bool keep_read_ahead = false);
  // A write-behind step's commits are in flight.
  bool unsettled() const { return behind_ != nullptr; }
  // Baseline backward phase: writes the staged gradients as fp32 objects
  // "grad.<object>" at version t.
  absl::Status OffloadGrads(uint64_t t, const GradStage& grads);
  // The subgroups the last Step took, in order (whether it ended well or
  // not): what a rewind of it writes back.
  const std::vector<int>& last_taken() const { return last_taken_; }
  const PipelineOptions& options() const { return options_; }
  ParallelRunner* runner() { return &runner_; }

 private:
  ObjectStore* store_;
  const std::vector<Subgroup>* subgroups_;
  PipelineOptions options_;
  ParallelRunner runner_;
  // Issues the read-ahead for the step after `t`, whose commits of the
  // last `in_flight` subgroups of `order` may still be in flight.
  void ReadAhead(uint64_t t, const std::vector<int>& order,
                 const std::vector<int>& next, int in_flight);
  void DropReadAhead();
  // carried_ = `now` - behind_from_ (then cleared); nothing when empty.
  void Carry(const std::vector<PathCounters>& now);
  std::vector<int> OrderOf(uint64_t t) const;

  // The parts of Step, in its order. The DRAM tier learns this step's
  // order and the next's.
  void DeclareOrder(const std::vector<int>& expected,
                    const std::vector<int>& next);
  // The next subgroup whose gradients are final (the update during
  // backward) and not yet taken, its wait counted in rep->grad_wait_s.
  absl::StatusOr<int> NextFromGate(ReadyGate* gate, const Prefetcher& reads,
                                   StepReport* rep);
  // Subgroup s's update in its checked-out state object: the plan's
  // overrides and adoptions, then its tiles (kernel/tile.h) on the
  // runner's threads, each tile's parameters to the sink or the model.
  // `offloaded`: its gradient object's data (the baseline), else the
  // stage's. *p_changed: p was set from outside the step.
  absl::Status UpdateSubgroup(const Subgroup& s, const StepPlan& plan,
                              const GradStage& grads, const float* offloaded,
                              ParamSink* sink, Lease* lease, bool* p_changed,
                              StepReport* rep);
  // The report's bytes per path (with what the last step moved after it
  // returned), cache hits and bound; returns the paths' counters now.
  std::vector<PathCounters> Account(const std::vector<PathCounters>& before,
                                    const CacheStats& cache_before,
                                    StepReport* rep);

  // Read-ahead checkouts for step ahead_step_, by subgroup; the step takes
  // (erases) the ones it uses.
  std::map<int, std::future<absl::StatusOr<Lease>>> ahead_;
  uint64_t ahead_step_ = 0;
  std::unique_ptr<CommitWindow> behind_;  // a write-behind step's commits
  uint64_t behind_step_ = 0;
  // The paths' counters when that step returned, and what its commits
  // and read-ahead moved after that (Settle), counted in the next step's
  // report (empty: nothing was left running).
  std::vector<PathCounters> behind_from_;
  std::vector<PathBytes> carried_;
  std::vector<int> last_taken_;
};

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_UPDATE_PIPELINE_H_
