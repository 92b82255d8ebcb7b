// The Optimizer's lineage: which step the store's heads hold (LoadStep),
// a fresh start, the initial state stored as step 0 by a tag before the
// first step, tags and restores, and a reset. The rest of the facade is in
// optimizer.cc.
#include <cstring>
#include <deque>
#include <future>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/status_reason.h"
#include "optimizer/optimizer.h"

namespace mlpo {

void Optimizer::FillInitial(const Subgroup& s, const ObjectLayout& l,
                            char* blob) const {
  std::memset(blob, 0, l.total_bytes());  // zero slots (and scales)
  const std::vector<StateSlot> slots = rule_.Slots();
  for (int k = 0; k < static_cast<int>(slots.size()); ++k) {
    const float x = InitialSlotValue(s.group, k);
    if (x == 0.f) continue;
    StateRef ref;
    ref.format = format_;
    ref.grid = &s.grid;
    ref.slots = static_cast<int>(slots.size());
    for (int j = 0; j < ref.slots; ++j) {
      ref.slot[j] = blob + l.Find(slots[j].section)->offset;
      ref.nonneg[j] = slots[j].nonneg;
      if (format_ == StateFormat::kInt8Moments)
        ref.scale[j] = reinterpret_cast<float*>(
            blob + l.Find(ScaleSection(slots[j].section))->offset);
    }
    std::vector<float> fill(s.numel, x);
    EncodeSlot(ref, k, s.numel, fill.data());
  }
  if (options_.init_params)
    options_.init_params(s.group, s.group_offset,
                         reinterpret_cast<float*>(blob + l.Find("p")->offset),
                         s.numel);
}

absl::Status Optimizer::LoadStep() {
  std::set<uint64_t> versions;
  const std::string steps_object = ParamStepsObject();
  bool has = false;  // per-parameter step counts kept (at step `at`)
  uint64_t at = 0;
  // Every state object has a version (step 0's too); at step 0 a part of
  // them is a Tag cut short, not the initial state (CompletePartialInitial).
  bool stored = true;
  for (const ObjectInfo& i : store_->List()) {
    if (by_object_.count(i.name)) {
      versions.insert(i.has_head ? i.head_step : 0);
      stored = stored && i.has_head;
    } else if (i.name == steps_object && i.has_head && !params_.empty())
      has = true, at = i.head_step;
  }
  if (versions.size() > 1)
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat(
            "store ", store_->options().meta_dir,
            " holds optimizer state from different steps (",
            absl::StrJoin(versions, ", "),
            "): a step was interrupted; restore a tag (OptimizerOptions."
            "restore_tag, or `mlpo restore STORE TAG`)")),
        kReasonStepInterrupted);
  step_ = versions.empty() ? 0 : *versions.begin();
  param_steps_.assign(params_.size(), step_);
  initial_stored_ = stored;
  initial_failed_ = false;  // whatever an attempt left, these heads replace
  if (!has) return absl::OkStatus();  // a store from before per-parameter steps
  if (at != step_)
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat(
            "store ", store_->options().meta_dir,
            ": the parameters' step counts are of step ", at,
            ", the state of step ", step_,
            ": a step was interrupted; restore a tag (OptimizerOptions."
            "restore_tag, or `mlpo restore STORE TAG`)")),
        kReasonStepInterrupted);
  MLPO_ASSIGN_OR_RETURN(Lease l, store_->Checkout(steps_object).get());
  MLPO_ASSIGN_OR_RETURN(param_steps_, ParamStepsIn(*l, params_.size()));
  for (uint64_t t : param_steps_)
    if (t > step_)
      return absl::DataLossError(absl::StrCat(
          "store ", store_->options().meta_dir, ": a parameter's step count ",
          t, " is above the state's step ", step_));
  return absl::OkStatus();
}

absl::Status Optimizer::StartFresh() {
  if (!reset_pending_) return absl::OkStatus();
  MLPO_RETURN_IF_ERROR(store_->ResetHeads());
  reset_pending_ = false;
  initial_stored_ = initial_failed_ = false;
  return absl::OkStatus();
}

absl::Status Optimizer::CompletePartialInitial() {
  if (step_ != 0 || initial_stored_) return absl::OkStatus();
  bool partial = initial_failed_;  // (its versions may be dirty in DRAM)
  for (const ObjectInfo& i : store_->List())
    partial = partial || (i.has_head && by_object_.count(i.name));
  return partial ? StoreInitialState() : absl::OkStatus();
}

absl::Status Optimizer::StoreInitialState() {
  if (initial_stored_) return absl::OkStatus();
  // One transaction: a crash or a failure leaves none of it.
  absl::Status st = store_->BeginTransaction();
  if (st.ok()) {
    st = StoreInitialIn();
    if (st.ok())
      st = store_->EndTransaction().get();
    else
      (void)store_->AbortTransaction();
  }
  // A part written is not the initial state: the next Step or Tag at step
  // 0 writes it whole again (CompletePartialInitial), and a reopen does
  // not take it for stored (LoadStep).
  initial_failed_ = !st.ok();
  MLPO_RETURN_IF_ERROR(Annotate(st, "storing the initial state (step 0)"));
  initial_stored_ = true;
  return absl::OkStatus();
}

absl::Status Optimizer::StoreInitialIn() {
  // Every object, whatever an attempt cut short left: init_params now.
  // A few commits in flight: each holds one object's buffer until written.
  constexpr size_t kInFlight = 8;
  std::deque<std::future<absl::Status>> writes;
  absl::Status first;
  auto wait_one = [&] {
    absl::Status st = writes.front().get();
    writes.pop_front();
    if (first.ok() && !st.ok()) first = st;
  };
  for (const Subgroup& s : subgroups_) {
    absl::StatusOr<Lease> l = store_->Blank(s.object);
    if (!l.ok()) {
      first = l.status();
      break;
    }
    FillInitial(s, (*l)->layout(), (*l)->data());
    writes.push_back(store_->Commit(std::move(*l), 0));
    if (writes.size() >= kInFlight) wait_one();
    if (!first.ok()) break;
  }
  while (!writes.empty()) wait_one();
  if (first.ok()) first = CommitParamSteps(0, param_steps_);
  return first;
}

absl::Status Optimizer::CommitParamSteps(uint64_t t,
                                         const std::vector<uint64_t>& steps) {
  if (params_.empty()) return absl::OkStatus();
  MLPO_ASSIGN_OR_RETURN(Lease l, store_->Blank(ParamStepsObject()));
  std::memcpy(l->Section<float>("t"), steps.data(),
              steps.size() * sizeof(uint64_t));
  return store_->Commit(std::move(l), t).get();
}

absl::Status Optimizer::Tag(const std::string& name) {
  MLPO_RETURN_IF_ERROR(SettleKeepingReadAhead());
  MLPO_RETURN_IF_ERROR(StartFresh());
  // A tag names stored versions: before the first step, the initial state
  // becomes step 0's, so that the tag gives these parameters back.
  if (step_ == 0) MLPO_RETURN_IF_ERROR(StoreInitialState());
  return store_->Tag(name);
}

absl::Status Optimizer::ContinueHeads() {
  MLPO_RETURN_IF_ERROR(Settle());
  if (!reset_pending_) return absl::OkStatus();
  absl::Status st = LoadStep();
  if (!st.ok()) {  // still the fresh start it was
    step_ = 0;
    param_steps_.assign(params_.size(), 0);
    return st;
  }
  reset_pending_ = false;
  return absl::OkStatus();
}

std::string Optimizer::ParamStepsObject() const {
  return mlpo::ParamStepsObject(params_.size());
}

absl::Status Optimizer::Reset() {
  MLPO_RETURN_IF_ERROR(Settle());
  MLPO_RETURN_IF_ERROR(store_->ResetHeads());
  reset_pending_ = false;
  initial_stored_ = initial_failed_ = false;
  grads_->Reset();
  for (auto& o : overrides_) o.clear();
  step_ = 0;
  param_steps_.assign(params_.size(), 0);
  return absl::OkStatus();
}

absl::Status Optimizer::Restore(const std::string& name) {
  MLPO_RETURN_IF_ERROR(Settle());
  MLPO_RETURN_IF_ERROR(store_->Restore(name));
  reset_pending_ = false;
  grads_->Reset();
  for (auto& o : overrides_) o.clear();
  return LoadStep();
}

}  // namespace mlpo
