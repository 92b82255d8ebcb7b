#include "optimizer/optimizer.h"

#include <cmath>
#include <cstring>
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/status_reason.h"
#include "base/trace.h"
#include "optimizer/optimizer_config.h"

namespace mlpo {

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Open(
    OptimizerOptions options) {
  std::unique_ptr<Optimizer> o(new Optimizer(std::move(options)));
  MLPO_RETURN_IF_ERROR(o->Init());
  return o;
}

Optimizer::~Optimizer() {
  // A step still running during backward was never asked for: dropped.
  if (backward_ != nullptr) (void)DiscardStep(/*redo=*/false);
  (void)Settle();
}

absl::Status Optimizer::Settle() { return SettleWrites(false); }

absl::Status Optimizer::SettleKeepingReadAhead() {
  // The read-ahead is kept: a read-ahead object whose version a call
  // changed (an adopted edit) fails the step's version check and is read
  // again, so a loop that reads or checkpoints the state every step keeps
  // it. A discarded step still rewinds first (its values in the model's
  // memory are not edits).
  MLPO_RETURN_IF_ERROR(SettleWrites(/*keep_read_ahead=*/true));
  return RewindDiscarded();
}

absl::Status Optimizer::SettleWrites(bool keep_read_ahead) {
  if (pipeline_ == nullptr) return absl::OkStatus();
  if (backward_ != nullptr) {
    absl::StatusOr<StepReport> r = FinishStep();
    if (!r.ok()) return r.status();
  }
  absl::Status st = pipeline_->Settle(keep_read_ahead);
  absl::Status txn = SettleTransaction();
  if (st.ok()) st = txn;
  // A step to redo is the next Step's; anything else first rewinds it.
  if (!keep_read_ahead) {
    absl::Status rw = RewindDiscarded();
    if (st.ok()) st = rw;
  }
  return st;
}

absl::Status Optimizer::CheckRange(int group, uint64_t offset, uint64_t count,
                                   const char* what) const {
  if (group < 0 || group >= static_cast<int>(options_.groups.size()) ||
      offset + count > options_.groups[group].numel || offset + count < offset)
    return absl::InvalidArgumentError(absl::StrCat(
        what, " [", offset, ", +", count, ") are outside group ", group));
  return absl::OkStatus();
}

absl::Status Optimizer::SetHyper(int group, const RuleHyper& hyper) {
  if (group < 0 || group >= static_cast<int>(options_.groups.size()))
    return absl::InvalidArgumentError(
        absl::StrCat("no parameter group ", group));
  MLPO_RETURN_IF_ERROR(CheckRuleHyper(options_.rule, group, hyper));
  MLPO_RETURN_IF_ERROR(CheckSpecCovers(rule_, group, hyper));
  options_.groups[group].hyper = hyper;
  return absl::OkStatus();
}

// Long (about 110 lines): the options checked, the partition, the store
// opened with this optimizer's initializer, then the store's format and
// rule checked and each subgroup declared, in the order that lets a
// failure change nothing.
absl::Status Optimizer::Init() {
  const PipelineOptions& po = options_.pipeline;
  if (po.prefetch_depth < 1 || po.prefetch_depth > 64 ||
      po.max_commits_in_flight < 1 || po.max_commits_in_flight > 64)
    return absl::InvalidArgumentError(
        "prefetch_depth and max_commits_in_flight must be in 1..64");
  MLPO_ASSIGN_OR_RETURN(OptimizerConfig config,
                        ParseOptimizerConfig(options_.store.upper));
  if (options_.state_format && config.state_format &&
      *options_.state_format != *config.state_format)
    return absl::InvalidArgumentError(absl::StrCat(
        "state_format ", StateFormatName(*options_.state_format),
        " contradicts the store config's state_format ",
        StateFormatName(*config.state_format), "; drop one of them"));
  format_ = options_.state_format.value_or(
      config.state_format.value_or(StateFormat::kF32));
  const bool write_behind =
      options_.write_behind.value_or(config.write_behind);
  const int read_ahead = options_.read_ahead.value_or(config.read_ahead);
  std::vector<uint64_t> numel;
  for (auto& g : options_.groups) {
    int gi = static_cast<int>(numel.size());
    MLPO_RETURN_IF_ERROR(CheckRuleHyper(options_.rule, gi, g.hyper));
    numel.push_back(g.numel);
    uint64_t off = 0;
    for (uint64_t n : g.params) {
      if (n == 0)
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter group ", gi, ": a parameter of 0 elements"));
      params_.push_back({gi, off, n});
      off += n;
    }
    if (g.params.empty() && g.numel > 0) params_.push_back({gi, 0, g.numel});
    else if (off != g.numel)
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter group ", gi, ": its parameters hold ", off,
          " elements, the group ", g.numel));
  }
  param_steps_.assign(params_.size(), 0);
  param_memory_.assign(params_.size(), Memory());
  MLPO_ASSIGN_OR_RETURN(subgroups_,
                        PartitionParams(numel, options_.subgroup_numel));
  {
    std::vector<std::vector<uint64_t>> starts(options_.groups.size());
    for (const Param& q : params_) starts[q.group].push_back(q.offset);
    AssignPieces(&subgroups_, starts);
  }
  for (const Subgroup& s : subgroups_) by_object_[s.object] = &s;
  if (format_ == StateFormat::kInt8Moments &&
      po.tile_elems % kQuantBlock != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.tile_elems ", po.tile_elems, " must be a multiple of ",
        kQuantBlock, " with state format int8-moments"));
  by_group_ = SubgroupsByGroup(subgroups_);
  by_group_.resize(options_.groups.size());
  StoreOptions so = options_.store;
  // (The store is this optimizer's and goes with it: `this` outlives it.)
  so.initializer = [this](const std::string& obj, const ObjectLayout& l,
                          char* blob) {
    auto it = by_object_.find(obj);
    if (it == by_object_.end())  // gradient objects: zeros
      std::memset(blob, 0, l.total_bytes());
    else
      FillInitial(*it->second, l, blob);
  };
  MLPO_ASSIGN_OR_RETURN(store_, ObjectStore::Open(so));
  overrides_.resize(subgroups_.size());
  if (!params_.empty()) {
    MLPO_ASSIGN_OR_RETURN(ObjectLayout sl, ParamStepsLayout(params_.size()));
    MLPO_RETURN_IF_ERROR(store_->Declare(ParamStepsObject(), sl));
  }
  MLPO_RETURN_IF_ERROR(CheckStateFormat());
  MLPO_RETURN_IF_ERROR(CheckUpdateRule());
  for (const Subgroup& s : subgroups_) {
    MLPO_ASSIGN_OR_RETURN(
        ObjectLayout l, StateLayout(format_, rule_, s.numel,
                                    s.grid.blocks()));
    MLPO_RETURN_IF_ERROR(store_->Declare(s.object, l));
    if (po.grad_offload) {
      MLPO_ASSIGN_OR_RETURN(ObjectLayout gl,
                            ObjectLayout::Make({{"g", DType::kF32, s.numel}}));
      MLPO_RETURN_IF_ERROR(store_->Declare(GradObjectName(s), gl));
    }
  }
  if (!options_.restore_tag.empty()) {
    MLPO_RETURN_IF_ERROR(store_->Restore(options_.restore_tag));
    MLPO_RETURN_IF_ERROR(LoadStep());
  } else if (options_.fresh) {
    for (const ObjectInfo& i : store_->List())
      if (i.has_head) reset_pending_ = true;
  } else {
    MLPO_RETURN_IF_ERROR(LoadStep());
  }
  PipelineOptions pipe = po;
  // The baseline mode is DeepSpeed's, which waits for its writes.
  pipe.write_behind = write_behind && !po.grad_offload;
  pipe.read_ahead = po.grad_offload ? 0
                    : read_ahead < 0 ? std::max(4, po.prefetch_depth)
                                     : read_ahead;
  pipeline_ = std::make_unique<UpdatePipeline>(store_.get(), &subgroups_, pipe);
  grads_ = std::make_unique<GradStage>(subgroups_, options_.grad_dtype,
                                       pipeline_->runner());
  if (options_.param_sink == nullptr) {
    sink_ = std::make_unique<HostParamSink>(numel, options_.param_dtype);
  } else if (options_.param_sink->dtype() != options_.param_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "param_sink takes ", DTypeName(options_.param_sink->dtype()),
        " parameters, but param_dtype is ",
        DTypeName(options_.param_dtype)));
  }
  return absl::OkStatus();
}

absl::Status Optimizer::CheckStateFormat() {
  const char* want = StateFormatName(format_);
  auto have = store_->GetAttribute(kStateFormatAttribute);
  if (have.ok()) {
    if (*have == want) return absl::OkStatus();
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat(
            "store ", store_->options().meta_dir, " holds its state as ",
            *have, ", not ", want,
            ": a store's state format is fixed when it is created (open it "
            "with state_format ", *have, ", or export the checkpoint and "
            "import it into a new store)")),
        kReasonStateFormat, *have);
  }
  if (!absl::IsNotFound(have.status())) return have.status();
  // A store from before formats holds fp32 state.
  for (const ObjectInfo& i : store_->List())
    if (by_object_.count(i.name) && format_ != StateFormat::kF32)
      return WithReason(
          absl::FailedPreconditionError(absl::StrCat(
              "store ", store_->options().meta_dir, " holds its state as "
              "fp32, not ", want,
              ": a store's state format is fixed when it is created")),
          kReasonStateFormat, "fp32");
  return store_->SetAttribute(kStateFormatAttribute, want);
}

absl::Status Optimizer::CheckUpdateRule() {
  const std::string dir = store_->options().meta_dir;
  auto have = store_->GetAttribute(kUpdateRuleAttribute);
  if (have.ok()) {
    absl::StatusOr<RuleSpec> r = ParseRuleSpec(*have);
    if (!r.ok())
      return absl::DataLossError(absl::StrCat(
          "store ", dir, " records update rule '", *have,
          "', which this build does not know"));
    rule_ = *r;
  } else if (!absl::IsNotFound(have.status())) {
    return have.status();
  } else {
    std::vector<RuleHyper> hypers;
    for (const ParamGroup& g : options_.groups) hypers.push_back(g.hyper);
    rule_ = SpecFor(options_.rule, hypers);
    // A store from before rules holds Adam's m and v.
    for (const ObjectInfo& i : store_->List())
      if (by_object_.count(i.name)) {
        rule_ = RuleSpec();
        break;
      }
  }
  if (rule_.kind != options_.rule)
    return absl::FailedPreconditionError(absl::StrCat(
        "store ", dir, " holds the state of update rule ", rule_.Name(),
        ", not ", RuleKindName(options_.rule), ": a store's rule is fixed "
        "when it is created (open it with its own optimizer, or use another "
        "store or name)"));
  for (size_t g = 0; g < options_.groups.size(); ++g)
    MLPO_RETURN_IF_ERROR(
        CheckSpecCovers(rule_, static_cast<int>(g), options_.groups[g].hyper));
  if (have.ok()) return absl::OkStatus();
  return store_->SetAttribute(kUpdateRuleAttribute, rule_.Name());
}

absl::Status Optimizer::SetParamMemory(int param, void* memory, DType dtype) {
  if (param < 0 || param >= static_cast<int>(params_.size()))
    return absl::InvalidArgumentError(absl::StrCat(
        "no parameter ", param, " (the optimizer has ", params_.size(), ")"));
  if (backward_ != nullptr)
    MLPO_RETURN_IF_ERROR(SetRunningParamMemory(param, memory, dtype));
  param_memory_[param] = {memory, dtype};
  return absl::OkStatus();
}

absl::Status Optimizer::OverrideMasters(int group, uint64_t offset,
                                        const void* data, DType dtype,
                                        uint64_t count) {
  MLPO_RETURN_IF_ERROR(CheckRange(group, offset, count, "masters"));
  for (const SubgroupSlice& sl :
       SlicesOf(subgroups_, by_group_[group], offset, count)) {
    uint64_t at = subgroups_[sl.index].group_offset + sl.a - offset;
    std::vector<float> vals(sl.b - sl.a);
    for (uint64_t i = 0; i < vals.size(); ++i)
      vals[i] = LoadAsFloat(data, dtype, at + i);
    overrides_[sl.index][sl.a] = std::move(vals);
  }
  return absl::OkStatus();
}

absl::Status Optimizer::AdoptEdits(const std::vector<int>& params) {
  MLPO_RETURN_IF_ERROR(SettleKeepingReadAhead());
  // Nothing stored yet: the first step (or step 0's Tag) takes them.
  if (!state_stored()) return absl::OkStatus();
  for (int k : params)
    if (k < 0 || k >= static_cast<int>(params_.size()))
      return absl::InvalidArgumentError(absl::StrCat("no parameter ", k));
  // All the edits, or none of them.
  return InTransaction([&] { return AdoptEditsIn(params); });
}

absl::Status Optimizer::InTransaction(
    const std::function<absl::Status()>& body) {
  MLPO_RETURN_IF_ERROR(store_->BeginTransaction());
  absl::Status st = body();
  if (!st.ok()) {
    (void)store_->AbortTransaction();
    return st;
  }
  return store_->EndTransaction().get();
}

absl::Status Optimizer::AdoptEditsIn(const std::vector<int>& params) {
  for (const Subgroup& s : subgroups_) {
    std::vector<int> touching;
    for (int k : params) {
      const Param& q = params_[k];
      if (q.group == s.group && param_memory_[k].ptr &&
          q.offset < s.group_offset + s.numel &&
          s.group_offset < q.offset + q.numel)
        touching.push_back(k);
    }
    if (touching.empty() && overrides_[s.index].empty()) continue;
    MLPO_ASSIGN_OR_RETURN(Lease l, store_->Checkout(s.object).get());
    float* p = l->Section<float>("p");
    std::vector<float> before(p, p + s.numel);
    ApplyOverrides(overrides_[s.index], p);
    for (int k : touching) {
      const Param& q = params_[k];
      uint64_t lo = std::max(q.offset, s.group_offset);
      uint64_t hi = std::min(q.offset + q.numel, s.group_offset + s.numel);
      const Memory& mem = param_memory_[k];
      AdoptModelValues(p + (lo - s.group_offset),
                       static_cast<char*>(mem.ptr) +
                           (lo - q.offset) * DTypeSize(mem.dtype),
                       mem.dtype, hi - lo);
    }
    if (std::memcmp(before.data(), p, s.numel * sizeof(float)) != 0)
      MLPO_RETURN_IF_ERROR(store_->Commit(std::move(l), step_).get());
    else
      store_->Return(std::move(l));
    overrides_[s.index].clear();
  }
  return absl::OkStatus();
}

StepPlan Optimizer::MakePlan(uint64_t t, double grad_scale,
                             const std::vector<bool>& active) const {
  StepPlan plan;
  plan.format = format_;
  plan.rule = rule_;
  for (auto& g : options_.groups)
    plan.consts.push_back(MakeRuleConsts(options_.rule, g.hyper, t,
                                         grad_scale));
  plan.runs.resize(subgroups_.size());
  plan.overrides = &overrides_;
  std::map<std::pair<int, uint64_t>, int> consts_of;  // (group, step) -> index
  // Subgroups and parameters are both in flat order: one pass over each.
  size_t first = 0;
  for (const Subgroup& s : subgroups_) {
    while (first < params_.size() &&
           (params_[first].group < s.group ||
            (params_[first].group == s.group &&
             params_[first].offset + params_[first].numel <= s.group_offset)))
      ++first;
    for (size_t j = first; j < params_.size(); ++j) {
      const Param& q = params_[j];
      if (q.group != s.group || q.offset >= s.group_offset + s.numel) break;
      uint64_t lo = std::max(q.offset, s.group_offset);
      uint64_t hi = std::min(q.offset + q.numel, s.group_offset + s.numel);
      StepRun r;
      r.offset = lo - s.group_offset;
      r.n = hi - lo;
      if (active[j]) {
        auto key = std::make_pair(q.group, param_steps_[j] + 1);
        auto it = consts_of.find(key);
        if (it == consts_of.end()) {
          int idx = static_cast<int>(plan.consts.size());
          plan.consts.push_back(MakeRuleConsts(
              options_.rule, options_.groups[q.group].hyper, key.second,
              grad_scale));
          it = consts_of.emplace(key, idx).first;
        }
        r.consts = it->second;
      }
      if (const Memory& mem = param_memory_[j]; mem.ptr) {
        r.memory = static_cast<char*>(mem.ptr) +
                   (lo - q.offset) * DTypeSize(mem.dtype);
        r.memory_dtype = mem.dtype;
      }
      plan.runs[s.index].push_back(r);
    }
  }
  return plan;
}

absl::Status Optimizer::StageGrad(int group, uint64_t offset, const void* data,
                                  DType dtype, uint64_t count) {
  return grads_->Stage(group, offset, data, dtype, count);
}

absl::Status Optimizer::StageGradFromDevice(DeviceBackend* backend, int group,
                                            uint64_t offset,
                                            const void* device_data,
                                            DType dtype, uint64_t count) {
  return grads_->StageFromDevice(backend, group, offset, device_data, dtype,
                                 count);
}

absl::Status Optimizer::RegisterDevice(DeviceBackend* backend) {
  MLPO_RETURN_IF_ERROR(grads_->RegisterWith(backend));
  absl::Status st = store_->RegisterHostMemory(backend);
  if (!st.ok()) grads_->Unregister();
  return st;
}

absl::Status Optimizer::OffloadGrads() {
  if (!options_.pipeline.grad_offload)
    return absl::FailedPreconditionError(
        "OffloadGrads needs pipeline.grad_offload (the baseline mode)");
  MLPO_RETURN_IF_ERROR(grads_->CheckComplete());
  MLPO_RETURN_IF_ERROR(pipeline_->OffloadGrads(step_ + 1, *grads_));
  grads_offloaded_ = true;
  return absl::OkStatus();
}

absl::Status Optimizer::BorrowGrad(int group, uint64_t offset,
                                   const void* data, DType dtype,
                                   uint64_t count) {
  return grads_->Borrow(group, offset, data, dtype, count);
}

GradStats Optimizer::LocalGradStats() {
  grads_->FinishStats(pipeline_->runner());
  return grads_->Totals();
}

absl::Status Optimizer::ImportState(uint64_t t, const StateFill& fill,
                                    std::vector<uint64_t> param_steps) {
  MLPO_RETURN_IF_ERROR(Settle());
  MLPO_RETURN_IF_ERROR(StartFresh());
  if (param_steps.empty()) param_steps.assign(params_.size(), t);
  if (param_steps.size() != params_.size())
    return absl::InvalidArgumentError(absl::StrCat(
        "import: ", param_steps.size(), " step counts for ", params_.size(),
        " parameters"));
  for (uint64_t x : param_steps)
    if (x > t)
      return absl::InvalidArgumentError(absl::StrCat(
          "import: a parameter's step count ", x, " is above the step ", t));
  if (t < 1 || t <= step_)
    return absl::FailedPreconditionError(absl::StrCat(
        "import at step ", t, ": the store ", store_->options().meta_dir,
        " is at step ", step_,
        "; state can only be imported at a later step (use a fresh store)"));
  // One transaction: the whole state, or (a failure, a crash) none of it.
  MLPO_RETURN_IF_ERROR(InTransaction(
      [&] { return ImportIn(t, fill, param_steps); }));
  grads_->Reset();
  for (auto& o : overrides_) o.clear();
  step_ = t;
  param_steps_ = std::move(param_steps);
  return absl::OkStatus();
}

absl::Status Optimizer::ImportIn(uint64_t t, const StateFill& fill,
                                 const std::vector<uint64_t>& param_steps) {
  const std::vector<StateSlot> slots = rule_.Slots();
  const int ns = static_cast<int>(slots.size());
  std::vector<std::vector<float>> vals(ns);
  for (const Subgroup& s : subgroups_) {
    MLPO_ASSIGN_OR_RETURN(Lease l, store_->Blank(s.object));
    MLPO_ASSIGN_OR_RETURN(StateRef ref,
                          StateIn(format_, rule_, l.get(), s.grid));
    float* ptrs[kMaxRuleSlots] = {};
    for (int k = 0; k < ns; ++k) {
      vals[k].assign(s.numel, 0.f);
      ptrs[k] = vals[k].data();
    }
    MLPO_RETURN_IF_ERROR(fill(s, l->Section<float>("p"), ptrs));
    for (int k = 0; k < ns; ++k) {
      for (uint64_t i = 0; i < s.numel; ++i) {
        float x = vals[k][i];
        if (!std::isfinite(x) || (slots[k].nonneg && x < 0))
          return absl::InvalidArgumentError(absl::StrCat(
              "import: element ", s.group_offset + i, " of group ", s.group,
              " has ", slots[k].torch, " ", x, ": update rule ", rule_.Name(),
              " needs finite values",
              slots[k].nonneg ? absl::StrCat(" and ", slots[k].torch, " >= 0")
                              : ""));
      }
      EncodeSlot(ref, k, s.numel, vals[k].data());
    }
    MLPO_RETURN_IF_ERROR(store_->Commit(l, t).get());
  }
  return CommitParamSteps(t, param_steps);
}

absl::Status Optimizer::CopyParams(int group, uint64_t offset, void* dst,
                                   uint64_t count) const {
  MLPO_RETURN_IF_ERROR(CheckRange(group, offset, count, "parameters"));
  if (sink_ == nullptr)
    return absl::FailedPreconditionError(
        "parameters went to the external param_sink; they are not kept");
  size_t es = DTypeSize(options_.param_dtype);
  std::memcpy(dst, static_cast<const char*>(sink_->Group(group)) + offset * es,
              count * es);
  return absl::OkStatus();
}

absl::StatusOr<StepReport> Optimizer::Step(double loss_scale,
                                           const GradStats* global) {
  MLPO_RETURN_IF_ERROR(SettleWrites(/*keep_read_ahead=*/true));
  if (!(loss_scale > 0) || !std::isfinite(loss_scale))
    return absl::InvalidArgumentError(
        absl::StrCat("loss_scale ", loss_scale, " must be positive and finite"));
  TraceSpan span("step", "step", "optimizer");
  // Parameters with a gradient this step; none staged: skipped.
  std::vector<bool> active(params_.size(), true);
  size_t n_active = params_.size();
  if (options_.pipeline.grad_offload) {
    MLPO_RETURN_IF_ERROR(grads_->CheckComplete());
    MLPO_RETURN_IF_ERROR(StartFresh());
    if (!grads_offloaded_) MLPO_RETURN_IF_ERROR(OffloadGrads());
  } else {
    for (size_t k = 0; k < params_.size(); ++k) {
      const Param& q = params_[k];
      uint64_t c = grads_->StagedCount(q.group, q.offset, q.numel);
      if (c == 0) {
        active[k] = false;
        --n_active;
      } else if (c < q.numel) {
        return absl::FailedPreconditionError(absl::StrCat(
            "parameter ", k, " (group ", q.group, ", elements [", q.offset,
            ", ", q.offset + q.numel, ")): the gradient was staged for ", c,
            " of its ", q.numel, " elements"));
      }
    }
  }
  GradStats tot = global ? *global : LocalGradStats();
  StepReport rep;
  rep.step = step_;
  if (n_active == 0) {
    rep.skipped = true;
    rep.skip_reason = "no parameter has a gradient";
    grads_->Reset();
    MLPO_RETURN_IF_ERROR(RewindDiscarded());
    return rep;
  }
  if (tot.nonfinite > 0) {
    rep.skipped = true;
    rep.skip_reason = absl::StrCat(tot.nonfinite,
                                   " non-finite gradient values (overflow)");
    ++skipped_;
    grads_->Reset();
    grads_offloaded_ = false;
    MLPO_RETURN_IF_ERROR(RewindDiscarded());
    return rep;
  }
  MLPO_RETURN_IF_ERROR(StartFresh());
  MLPO_RETURN_IF_ERROR(CompletePartialInitial());
  rep.grad_norm = std::sqrt(tot.sum_sq) / loss_scale;
  if (options_.max_grad_norm > 0 && rep.grad_norm > options_.max_grad_norm)
    rep.clip_coef = options_.max_grad_norm / (rep.grad_norm + 1e-6);
  double grad_scale = rep.clip_coef / loss_scale;
  uint64_t t = step_ + 1;
  auto r = RunStep(t, MakePlan(t, grad_scale, active), active);
  if (r.ok()) {
    r->grad_norm = rep.grad_norm;
    r->clip_coef = rep.clip_coef;
  }
  return r;
}

absl::Status Optimizer::ReadState(int group, std::vector<float>* p,
                                  std::vector<std::vector<float>>* slots) {
  if (group < 0 || group >= static_cast<int>(options_.groups.size()))
    return absl::InvalidArgumentError(absl::StrCat("no parameter group ", group));
  uint64_t n = options_.groups[group].numel;
  p->assign(n, 0);
  slots->assign(rule_.Slots().size(), std::vector<float>(n, 0.f));
  float* ptrs[kMaxRuleSlots] = {};
  for (size_t k = 0; k < slots->size(); ++k) ptrs[k] = (*slots)[k].data();
  return ReadRange(group, 0, n, p->data(), ptrs);
}

absl::Status Optimizer::ReadState(int group, std::vector<float>* p,
                                  std::vector<float>* m,
                                  std::vector<float>* v) {
  if (group < 0 || group >= static_cast<int>(options_.groups.size()))
    return absl::InvalidArgumentError(absl::StrCat("no parameter group ", group));
  uint64_t n = options_.groups[group].numel;
  p->assign(n, 0);
  m->assign(n, 0);
  v->assign(n, 0);
  return ReadRange(group, 0, n, p->data(), m->data(), v->data());
}

absl::Status Optimizer::ReadRange(int group, uint64_t offset, uint64_t count,
                                  float* p, float* m, float* v) {
  float* ptrs[kMaxRuleSlots] = {};
  int km = rule_.SlotOf("m"), kv = rule_.SlotOf("v");
  if (km >= 0) ptrs[km] = m;
  else std::fill(m, m + count, 0.f);
  if (kv >= 0) ptrs[kv] = v;
  else std::fill(v, v + count, 0.f);
  return ReadRange(group, offset, count, p, ptrs);
}

float Optimizer::InitialSlotValue(int group, int slot) const {
  return mlpo::InitialSlotValue(rule_.kind, options_.groups[group].hyper,
                                slot);
}

absl::Status Optimizer::ReadRange(int group, uint64_t offset, uint64_t count,
                                  float* p, float* const* slots) {
  MLPO_RETURN_IF_ERROR(SettleKeepingReadAhead());
  MLPO_RETURN_IF_ERROR(CheckRange(group, offset, count, "state elements"));
  const int ns = static_cast<int>(rule_.Slots().size());
  for (const SubgroupSlice& sl :
       SlicesOf(subgroups_, by_group_[group], offset, count)) {
    const Subgroup& s = subgroups_[sl.index];
    uint64_t a = sl.a, n = sl.b - sl.a, lo = s.group_offset + a;
    uint64_t at = lo - offset;
    if (reset_pending_) {  // a fresh start: the initial state
      if (options_.init_params) options_.init_params(group, lo, p + at, n);
      else std::fill(p + at, p + at + n, 0.f);
      for (int k = 0; k < ns; ++k)
        if (slots[k])
          std::fill(slots[k] + at, slots[k] + at + n,
                    InitialSlotValue(group, k));
      continue;
    }
    auto l = store_->Checkout(s.object).get();
    if (!l.ok()) return l.status();
    std::memcpy(p + at, (*l)->Section<float>("p") + a, n * 4);
    MLPO_ASSIGN_OR_RETURN(StateRef ref,
                          StateIn(format_, rule_, l->get(), s.grid));
    for (int k = 0; k < ns; ++k)
      if (slots[k]) DecodeSlot(ref, k, a, n, slots[k] + at);
    store_->Return(std::move(*l));  // a look keeps the DRAM tier warm
  }
  return absl::OkStatus();
}

}  // namespace mlpo
