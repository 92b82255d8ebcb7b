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
#include <future>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "optimizer/grad_stage.h"
#include "optimizer/kernel/casts.h"
#include "optimizer/kernel/grad_stats.h"
#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/kernel/state_codec.h"
#include "optimizer/kernel/update_rule.h"
#include "optimizer/param_sink.h"
#include "optimizer/partition.h"
#include "optimizer/state_layout.h"
#include "optimizer/update_pipeline.h"
#include "store/object_store.h"

namespace mlpo {

struct ParamGroup {
  uint64_t numel = 0;  // may be 0 (the group then has no state)
  RuleHyper hyper;
  // Element counts of the group's parameters in order (summing to numel);
  // empty: the group is one parameter. Each parameter has its own step
  // count (its bias correction), and a parameter with no gradient staged
  // for a step is skipped: its p, m, v and step count stay as they are, as
  // torch.optim skips a parameter whose grad is None.
  std::vector<uint64_t> params;
};

// Fills the initial fp32 master parameters [offset, offset+n) of a group.
using ParamInit =
    std::function<void(int group, uint64_t offset, float* dst, uint64_t n)>;

struct OptimizerOptions {
  StoreOptions store;
  std::vector<ParamGroup> groups;
  // Elements per subgroup (one store object of 12 bytes per element in
  // fp32, StateBytesPerParam in general). Larger
  // subgroups mean fewer, larger I/Os and more host memory in flight:
  // (prefetch_depth + max_commits_in_flight + 1) subgroups.
  uint64_t subgroup_numel = uint64_t{1} << 24;
  // How the store holds m and v (kernel/state_codec.h). Unset: the store
  // config's state_format, else fp32; both set and different is
  // InvalidArgument. Fixed when the store's first state is declared (store
  // attribute "state_format"); opening with another is FailedPrecondition.
  std::optional<StateFormat> state_format;
  // Write-behind and read-ahead (OptimizerConfig, optimizer_config.h). Unset:
  // the store config's write_behind and read_ahead, else their defaults.
  std::optional<bool> write_behind;
  std::optional<int> read_ahead;
  // The update rule (kernel/update_rule.h). A new store takes it with the slots
  // its groups need (SpecFor) and records it; opening a store of another
  // rule is FailedPrecondition.
  RuleKind rule = RuleKind::kAdam;
  DType grad_dtype = DType::kBF16;   // dtype of staged gradients
  DType param_dtype = DType::kBF16;  // dtype of the model's parameters
  double max_grad_norm = 0;          // clip the global norm; 0 = off
  PipelineOptions pipeline;
  ParamInit init_params;             // default: zeros
  std::string restore_tag;           // restore this tag when opening
  // Start afresh at step 0 from init_params whatever the store's heads hold
  // (a new run in an existing store). The heads are dropped at the first
  // Step, Tag or ImportState, not before: until then nothing changes, and
  // Restore cancels it. Versions tags hold are never touched.
  bool fresh = false;
  // Where new parameters go (not owned): e.g. a device sink, or a streaming
  // one that keeps nothing. nullptr: a host sink keeps every group's
  // parameters (Params(), CopyParams()), 2 bytes per parameter in bf16.
  ParamSink* param_sink = nullptr;
};

class Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<Optimizer>> Open(
      OptimizerOptions options);
  // Settles a write-behind step first (its error is lost: call Settle()).
  ~Optimizer();

  // Every step is a transaction of the store (ObjectStore::
  // BeginTransaction): its new versions and step counts become the
  // store's state in one index write, or none of them does. A step that
  // fails is rolled back: the store and the step count stay at the step
  // before, and the model's memory (SetParamMemory) and the sink get the
  // parameters back that the failed step had written there.
  //
  // Write-behind (OptimizerConfig::write_behind): Step returns once every
  // parameter holds its new value; its last commits land, then its
  // transaction's index write, while the caller goes on. Settle() waits
  // for them: once it returns (and every call that reads or writes the
  // state, Step, Tag, Restore, ReadRange, ImportState, AdoptEdits, Reset,
  // ContinueHeads, settles first), every step that returned is durable
  // (durability "step"). If they fail, Settle returns the error naming
  // the step, and that step is rolled back as above. A crash loses at
  // most the step whose writes were still landing: the store resumes at
  // the last step that returned, or the one before it.
  absl::Status Settle();

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
  // Update during backward (optimizer_backward.cc): BeginStep starts the
  // step on a thread of its own; each parameter's gradient is then staged
  // or borrowed and marked with GradReady(param) as backward makes it
  // final; a subgroup is updated once every parameter in it is ready, in
  // the order they come (the next step's reads are issued in the order
  // this one took). The step is speculative: it is a transaction that
  // FinishStep decides. FinishStep: the parameters not ready have no
  // gradient; waits, then, as Step() would decide: a non-finite gradient
  // discards the step (report.skipped, nothing changed, the model's
  // memory rewound); a global norm above max_grad_norm discards it and
  // redoes it with the clipped gradients (report.redone); else it commits.
  // The result is the plain step's bit for bit either way; with data
  // parallel, from every rank's gradient statistics (`agree`, below).
  // DiscardStep: the
  // step is dropped (nothing applied; the model's memory holds what it
  // held before it): with `redo`, the next Step() redoes it from the
  // gradients staged then (after gradients changed once handed in: a
  // second backward, clipping or unscaling in place); without, it is
  // rewound now (an exception in backward, zero_grad before step).
  // Refused (FailedPrecondition) with the grad_offload baseline. Every
  // other call on the state finishes a running one first.
  absl::Status BeginStep(double loss_scale = 1.0);
  absl::Status GradReady(int param);
  // Data parallel: `agree` is given this rank's statistics once the
  // running step has stopped (whatever it ended in: every rank calls it,
  // so collectives inside it pair) and returns every rank's, from which
  // FinishStep decides as above; empty: this rank's own.
  using AgreeStats = std::function<GradStats(const GradStats& local)>;
  absl::StatusOr<StepReport> FinishStep(const AgreeStats& agree = {});
  absl::Status DiscardStep(bool redo);
  // Steps redone after a speculative one was discarded, since Open.
  uint64_t redone_steps() const { return redone_; }
  bool stepping_in_backward() const { return backward_ != nullptr; }
  // The same without a copy: the step reads `data` itself, which must stay
  // valid and unchanged until Step returns.
  absl::Status BorrowGrad(int group, uint64_t offset, const void* data,
                          DType dtype, uint64_t count);
  // Sum of squares and non-finite count of what is staged for this step.
  GradStats LocalGradStats();

  // All hyperparameters of a group, read every step (InvalidArgument for a
  // value out of range, FailedPrecondition for an option whose slot the
  // store lacks; the group keeps its old ones).
  absl::Status SetHyper(int group, const RuleHyper& hyper);

  // Writes a whole state as step `t` (> step(), >= 1): for every subgroup
  // `fill` writes its fp32 p and each slot of the rule (slots[k], in
  // RuleSpec::Slots() order; a compact state_format then rounds them;
  // InvalidArgument for a non-finite value there, or a negative one in a
  // slot that is never negative). For moving state in from elsewhere
  // (torch.optim state, another checkpoint). `param_steps`: each
  // parameter's step count (none above t); empty: t for all. One
  // transaction: all of it is stored, or (a failure, a crash) none.
  using StateFill = std::function<absl::Status(const Subgroup& s, float* p,
                                               float* const* slots)>;
  absl::Status ImportState(uint64_t t, const StateFill& fill,
                           std::vector<uint64_t> param_steps = {});

  // The model's own tensor of parameter `param` (index over every group's
  // parameters, in order), in `dtype`, or nullptr. Each step adopts its
  // values where they differ from the master (AdoptModelValues: the model's
  // tensors are authoritative) and writes the new parameters there instead
  // of to the sink. Must stay valid until changed. While a step runs during
  // backward it may change until the parameter is ready (GradReady): the
  // step then reads and writes the new memory (the adapter points it at a
  // copy of the parameter, so that the model's tensors hold their values
  // until the step is decided).
  absl::Status SetParamMemory(int param, void* memory, DType dtype);
  // Starts a new lineage at step 0 now: every head is dropped (tags stay),
  // step counts go to 0, and the next checkout of each object is its
  // initial state. Before importing state from elsewhere.
  absl::Status Reset();
  // Opened `fresh` and nothing done yet: continue from the store's heads
  // instead (a resume). FailedPrecondition when the heads are of different
  // steps (an interrupted step: restore a tag).
  absl::Status ContinueHeads();
  bool fresh_pending() const { return reset_pending_; }
  // Master values [offset, offset + count) of `group` (from `data` in
  // `dtype`) replacing the stored ones at the next step or AdoptEdits: for
  // model memory the optimizer cannot read (a device's).
  absl::Status OverrideMasters(int group, uint64_t offset, const void* data,
                               DType dtype, uint64_t count);
  // Writes, without a step, the edits of `params` (their memory's values
  // where they differ) and every pending override into the store, as
  // versions of the current step; subgroups with nothing changed are left
  // alone. Before a Tag, so that a checkpoint holds what the model holds.
  // Nothing to do while !state_stored() (the first step or Tag takes the
  // initial parameters as they are then).
  absl::Status AdoptEdits(const std::vector<int>& params);
  // The store holds this lineage's state: from the first step, or from a
  // Tag taken before it (which stores the initial state as step 0, so that
  // restoring that tag gives the initial parameters back). Until then the
  // state is init_params and zero moments, kept nowhere.
  bool state_stored() const {
    return !reset_pending_ && (step_ > 0 || initial_stored_);
  }
  // Step count of every parameter (see ParamGroup::params).
  const std::vector<uint64_t>& param_steps() const { return param_steps_; }
  size_t num_params() const { return params_.size(); }
  // Copies `count` new parameters of `group` from `offset` (param_dtype) to
  // `dst`.
  absl::Status CopyParams(int group, uint64_t offset, void* dst,
                          uint64_t count) const;
  uint64_t step() const { return step_; }
  uint64_t skipped_steps() const { return skipped_; }

  // Names the current state. At step 0 the initial state is first stored
  // as step 0 (one write of every state object).
  absl::Status Tag(const std::string& name);
  // Restores a tag; the step number becomes the tag's.
  absl::Status Restore(const std::string& name);

  // New parameters of a group in param_dtype (valid after a step; nullptr
  // with an external param_sink).
  const void* Params(int group) const {
    return sink_ ? sink_->Group(group) : nullptr;
  }
  // The fp32 state of a group read back from the store (tests, tools):
  // p and each slot in RuleSpec::Slots() order.
  absl::Status ReadState(int group, std::vector<float>* p,
                         std::vector<std::vector<float>>* slots);
  // Adam's (or any rule's) slots named "m" and "v" (zeros where the rule
  // has none).
  absl::Status ReadState(int group, std::vector<float>* p, std::vector<float>* m,
                         std::vector<float>* v);
  // Elements [offset, offset + count) of a group's state into p and
  // slots[k] (count floats each; a nullptr slot is not read).
  absl::Status ReadRange(int group, uint64_t offset, uint64_t count, float* p,
                         float* const* slots);
  absl::Status ReadRange(int group, uint64_t offset, uint64_t count, float* p,
                         float* m, float* v);
  // The object holding every parameter's step count (ParamStepsObject of
  // state_layout.h for this optimizer's parameters).
  std::string ParamStepsObject() const;
  ObjectStore* store() { return store_.get(); }
  const std::vector<Subgroup>& subgroups() const { return subgroups_; }
  const OptimizerOptions& options() const { return options_; }
  StateFormat state_format() const { return format_; }
  const RuleSpec& rule() const { return rule_; }

 private:
  explicit Optimizer(OptimizerOptions o) : options_(std::move(o)) {}
  absl::Status Init();
  absl::Status LoadStep();
  // InvalidArgument naming `what` unless [offset, offset + count) lies in
  // parameter group `group`.
  absl::Status CheckRange(int group, uint64_t offset, uint64_t count,
                          const char* what) const;
  // Drops the heads if a fresh start is pending.
  absl::Status StartFresh();
  absl::Status CommitParamSteps(uint64_t t, const std::vector<uint64_t>& s);
  // A state object's initial blob: zero moments, init_params' masters
  // (zeros without it). The store's initializer and StoreInitialState.
  void FillInitial(const Subgroup& s, const ObjectLayout& l,
                   char* blob) const;
  // Writes the initial state (FillInitial) of every state object as step
  // 0, unless stored already.
  absl::Status StoreInitialState();
  absl::Status StoreInitialIn();  // its commits (in a transaction)
  // `body`'s commits as one store transaction: ended when it succeeds,
  // aborted when it fails.
  absl::Status InTransaction(const std::function<absl::Status()>& body);
  absl::Status AdoptEditsIn(const std::vector<int>& params);
  absl::Status ImportIn(uint64_t t, const StateFill& fill,
                        const std::vector<uint64_t>& param_steps);
  // At step 0 with the initial state partly stored (a StoreInitialState
  // that failed, or was cut short by a kill): stores it whole, so that no
  // object's leftover is taken for its initial state.
  absl::Status CompletePartialInitial();
  // Records the state format in a new store, or checks the one recorded.
  absl::Status CheckStateFormat();
  // The same for the update rule and its slots (rule_).
  absl::Status CheckUpdateRule();
  // Slot `slot`'s value before the first step (adagrad's
  // initial_accumulator_value; else 0).
  float InitialSlotValue(int group, int slot) const;
  // Settle(), keeping the read-ahead for the step about to run (and a
  // discarded step to redo).
  absl::Status SettleWrites(bool keep_read_ahead);
  // Settle() for the calls that do not move the heads (ReadRange, Tag,
  // AdoptEdits): the read-ahead stays for the next step.
  absl::Status SettleKeepingReadAhead();
  // Step t over `plan` (the pipeline), as one transaction, then EndStep.
  absl::StatusOr<StepReport> RunStep(uint64_t t, StepPlan plan,
                                     const std::vector<bool>& active);
  // After the pipeline ran step t in its transaction: the gradients
  // forgotten, each active parameter's step count advanced and committed
  // in the transaction, which ends (now, or as write-behind lands). A
  // failed step is aborted and rewound.
  absl::StatusOr<StepReport> EndStep(uint64_t t,
                                     const std::vector<bool>& active,
                                     absl::StatusOr<StepReport> r);
  // The step's transaction aborted (its commits drained first) and the
  // model's memory rewound over the subgroups it took.
  absl::Status AbortStep();
  // Writes the store's parameters of `subgroups` (every one when empty),
  // with the masters the discarded step adopted, back into the model's
  // memory and the sink: a rewind of a step that is not applied.
  absl::Status Rewind(const std::vector<int>& subgroups,
                      const AdoptLog* adopted);
  // A discarded step waiting to be redone by the next Step: rewound
  // instead (any other call comes first, or the next Step has nothing to
  // do).
  absl::Status RewindDiscarded();
  // SetParamMemory of a parameter not yet ready in the running step.
  absl::Status SetRunningParamMemory(int param, void* memory, DType dtype);
  // The running step's pipeline run is over: its transaction aborted and
  // kept to redo (`redo`) or rewound now.
  absl::Status DiscardRunning(bool redo);
  // The last step's transaction, ending behind (write-behind): waits;
  // when it failed, the step is rolled back.
  absl::Status SettleTransaction();
  // The step's work per subgroup; false in `active` skips a parameter.
  StepPlan MakePlan(uint64_t t, double grad_scale,
                    const std::vector<bool>& active) const;

  struct Param {
    int group = 0;
    uint64_t offset = 0, numel = 0;  // within the group
  };

  OptimizerOptions options_;
  std::vector<Subgroup> subgroups_;
  std::map<std::string, const Subgroup*> by_object_;
  std::vector<std::vector<int>> by_group_;  // group -> subgroup indices
  // Declared before the pipeline, so destroyed after it.
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<GradStage> grads_;
  std::unique_ptr<HostParamSink> sink_;
  std::unique_ptr<UpdatePipeline> pipeline_;
  uint64_t step_ = 0;
  uint64_t skipped_ = 0;
  std::vector<Param> params_;
  std::vector<uint64_t> param_steps_;
  struct Memory {
    void* ptr = nullptr;
    DType dtype = DType::kF32;
  };
  std::vector<Memory> param_memory_;
  // Per subgroup: pending master values by element offset.
  std::vector<std::map<uint64_t, std::vector<float>>> overrides_;
  StateFormat format_ = StateFormat::kF32;
  RuleSpec rule_;
  bool reset_pending_ = false;
  // Step 0's state is in the store (a Tag before the first step, or a
  // restore of one).
  bool initial_stored_ = false;
  bool initial_failed_ = false;  // the last StoreInitialState failed
  bool grads_offloaded_ = false;
  // The last step's transaction while its writes land (write-behind),
  // and what the optimizer held before that step (a rollback's).
  std::optional<std::future<absl::Status>> txn_end_;
  uint64_t txn_step_ = 0;
  uint64_t prev_step_ = 0;
  std::vector<uint64_t> prev_param_steps_;
  // What the running step adopted from the model (every step records it:
  // a rollback or a redo puts it in again).
  std::unique_ptr<AdoptLog> adopt_log_;
  // A discarded step that the next Step redoes (DiscardStep(true), or a
  // clip found at FinishStep), with what it had adopted.
  bool redo_pending_ = false;
  std::unique_ptr<AdoptLog> discarded_;
  std::vector<int> discarded_taken_;  // the subgroups it had written
  uint64_t redone_ = 0;
  class BackwardStep;  // a step running during backward
  struct BackwardStepDeleter {
    void operator()(BackwardStep* b) const;  // (a complete type there)
  };
  std::unique_ptr<BackwardStep, BackwardStepDeleter> backward_;
  std::vector<int> backward_order_;  // the order the last one took
  double backward_loss_scale_ = 1;
};

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_OPTIMIZER_H_
