// Optimizer: the C++ facade a training loop uses. Parameter groups with
// their hyperparameters, gradient staging, Step() with per-group learning
// rates (for schedules), gradient clipping and loss-scale overflow skipping,
// and Tag/Restore of the whole state.
//
// The step number t is the version of every state object: after a crash a
// store whose objects disagree is refused until a tag is restored
// (OptimizerOptions::restore_tag or `mlpo restore`).
//
// Thread-safety: StageGrad may run concurrently for disjoint slices; all
// other calls from one thread at a time.
#ifndef MLPO_OPTIMIZER_OPTIMIZER_H_
#define MLPO_OPTIMIZER_OPTIMIZER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "optimizer/adam_kernel.h"
#include "optimizer/grad_stage.h"
#include "optimizer/param_sink.h"
#include "optimizer/partition.h"
#include "optimizer/update_pipeline.h"
#include "store/object_store.h"

namespace mlpo {

struct ParamGroup {
  uint64_t numel = 0;  // may be 0 (the group then has no state)
  AdamHyper hyper;
};

// Fills the initial fp32 master parameters [offset, offset+n) of a group.
using ParamInit =
    std::function<void(int group, uint64_t offset, float* dst, uint64_t n)>;

struct OptimizerOptions {
  StoreOptions store;
  std::vector<ParamGroup> groups;
  // Elements per subgroup (one store object of 12 bytes per element). Larger
  // subgroups mean fewer, larger I/Os and more host memory in flight:
  // (prefetch_depth + max_commits_in_flight + 1) subgroups.
  uint64_t subgroup_numel = uint64_t{1} << 24;
  DType grad_dtype = DType::kBF16;   // dtype of staged gradients
  DType param_dtype = DType::kBF16;  // dtype of the model's parameters
  double max_grad_norm = 0;          // clip the global norm; 0 = off
  PipelineOptions pipeline;
  ParamInit init_params;             // default: zeros
  std::string restore_tag;           // restore this tag when opening
  // Where new parameters go (not owned): e.g. a device sink, or a streaming
  // one that keeps nothing. nullptr: a host sink keeps every group's
  // parameters (Params(), CopyParams()), 2 bytes per parameter in bf16.
  ParamSink* param_sink = nullptr;
};

class Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<Optimizer>> Open(
      OptimizerOptions options);

  // Hands in gradient elements [offset, offset+count) of `group`.
  absl::Status StageGrad(int group, uint64_t offset, const void* data,
                         DType dtype, uint64_t count);
  // The same from device memory (`backend`'s pointers): the backend copies
  // straight into the gradient stage, which RegisterDevice pinned for it.
  absl::Status StageGradFromDevice(DeviceBackend* backend, int group,
                                   uint64_t offset, const void* device_data,
                                   DType dtype, uint64_t count);
  // Pins the gradient stage and the store's buffer pool for `backend`'s
  // copies (cudaHostRegister), once. `backend` must outlive the optimizer.
  absl::Status RegisterDevice(DeviceBackend* backend);
  // Baseline backward phase: writes the staged gradients to the store as
  // fp32 (only with pipeline.grad_offload).
  absl::Status OffloadGrads();
  // One step. Gradients are divided by loss_scale; a non-finite gradient
  // skips the step (report.skipped) and leaves the state as it was.
  // `global`: the gradient statistics over every rank (data parallel: each
  // rank stages only its shard, and clipping and the overflow check need
  // the global norm); default: this rank's own, LocalGradStats().
  absl::StatusOr<StepReport> Step(double loss_scale = 1.0,
                                  const GradStats* global = nullptr);
  // Sum of squares and non-finite count of what is staged for this step.
  GradStats LocalGradStats() const;

  void SetLr(int group, double lr) { options_.groups.at(group).hyper.lr = lr; }
  // All hyperparameters of a group, read every step (InvalidArgument for a
  // value out of range; the group keeps its old ones).
  absl::Status SetHyper(int group, const AdamHyper& hyper);

  // Writes a whole state as step `t` (> step(), >= 1): for every subgroup
  // `fill` writes its fp32 p, m and v. For moving state in from elsewhere
  // (torch.optim state, another checkpoint). Not atomic across subgroups:
  // import into a fresh store and Tag() after it.
  using StateFill = std::function<absl::Status(const Subgroup& s, float* p,
                                               float* m, float* v)>;
  absl::Status ImportState(uint64_t t, const StateFill& fill);
  // Copies `count` new parameters of `group` from `offset` (param_dtype) to
  // `dst`.
  absl::Status CopyParams(int group, uint64_t offset, void* dst,
                          uint64_t count) const;
  double lr(int group) const { return options_.groups.at(group).hyper.lr; }
  uint64_t step() const { return step_; }
  uint64_t skipped_steps() const { return skipped_; }

  absl::Status Tag(const std::string& name) { return store_->Tag(name); }
  // Restores a tag; the step number becomes the tag's.
  absl::Status Restore(const std::string& name);

  // New parameters of a group in param_dtype (valid after a step; nullptr
  // with an external param_sink).
  const void* Params(int group) const {
    return sink_ ? sink_->Group(group) : nullptr;
  }
  // The fp32 state of a group read back from the store (tests, tools).
  absl::Status ReadState(int group, std::vector<float>* p, std::vector<float>* m,
                         std::vector<float>* v);
  ObjectStore* store() { return store_.get(); }
  const std::vector<Subgroup>& subgroups() const { return subgroups_; }
  const OptimizerOptions& options() const { return options_; }

 private:
  explicit Optimizer(OptimizerOptions o) : options_(std::move(o)) {}
  absl::Status Init();
  absl::Status LoadStep();

  OptimizerOptions options_;
  std::vector<Subgroup> subgroups_;
  std::map<std::string, const Subgroup*> by_object_;
  // Declared before the pipeline, so destroyed after it.
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<GradStage> grads_;
  std::unique_ptr<HostParamSink> sink_;
  std::unique_ptr<UpdatePipeline> pipeline_;
  uint64_t step_ = 0;
  uint64_t skipped_ = 0;
  bool grads_offloaded_ = false;
};

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_OPTIMIZER_H_
