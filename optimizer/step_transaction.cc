// A step as a transaction (docs/design.md "Steps as transactions"): the
// pipeline's commits and the step counts of step t join one store
// transaction, which ends in one index write once the last of them has
// landed (at once, or behind the caller with write-behind). A step that
// fails, or that the update during backward discards, is aborted: the
// store keeps step t-1, and the parameters the step had already written
// into the model's memory (or the sink) are written back from the store
// (a rewind), with the edits the step had adopted from the model.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/trace.h"
#include "optimizer/optimizer.h"

namespace mlpo {

absl::StatusOr<StepReport> Optimizer::RunStep(uint64_t t, StepPlan plan,
                                              const std::vector<bool>& active) {
  adopt_log_ = std::make_unique<AdoptLog>();
  plan.log = adopt_log_.get();
  std::unique_ptr<AdoptLog> redoing;
  std::vector<bool> written;
  if (redo_pending_) {
    // The model holds the discarded step's values: the masters come from
    // the store and what that step had adopted.
    redoing = std::move(discarded_);
    redo_pending_ = false;
    plan.adopt = false;
    // Only the subgroups the discarded step took hold its values.
    written.assign(subgroups_.size(), false);
    for (int i : discarded_taken_) written[i] = true;
    plan.written = &written;
    if (redoing) {
      MutexLock l(&redoing->mu);
      plan.adopted = &redoing->by_subgroup;
    }
  }
  absl::Status began = store_->BeginTransaction();
  if (!began.ok()) {
    grads_->Reset();
    return began;
  }
  ParamSink* sink =
      sink_ ? static_cast<ParamSink*>(sink_.get()) : options_.param_sink;
  absl::StatusOr<StepReport> r = pipeline_->Step(t, plan, *grads_, sink);
  if (redoing) {
    // What the redo adopted is what the discarded step had: keep it for a
    // rollback of the redo too.
    MutexLock a(&adopt_log_->mu);
    MutexLock b(&redoing->mu);
    auto& mine = adopt_log_->by_subgroup;
    if (mine.size() < redoing->by_subgroup.size())
      mine.resize(redoing->by_subgroup.size());
    for (size_t i = 0; i < redoing->by_subgroup.size(); ++i)
      for (auto& [off, vals] : redoing->by_subgroup[i])
        mine[i].emplace(off, vals);
    if (r.ok()) {
      r->redone = true;
      ++redone_;
    }
  }
  return EndStep(t, active, std::move(r));
}

absl::StatusOr<StepReport> Optimizer::EndStep(uint64_t t,
                                              const std::vector<bool>& active,
                                              absl::StatusOr<StepReport> r) {
  grads_->Reset();
  grads_offloaded_ = false;
  if (!r.ok()) {
    absl::Status rolled = AbortStep();
    if (!rolled.ok())
      return Annotate(r.status(), absl::StrCat("(and rolling it back: ",
                                               rolled.message(), ")"));
    return Annotate(r.status(),
                    absl::StrCat("nothing of step ", t, " was applied: the "
                                 "store and the parameters are at step ",
                                 step_));
  }
  std::vector<uint64_t> steps = param_steps_;
  for (size_t k = 0; k < steps.size(); ++k) steps[k] += active[k] ? 1 : 0;
  absl::Status counted;
  {
    TraceSpan commit("step counts", "store", "optimizer");
    counted = CommitParamSteps(t, steps);
  }
  if (!counted.ok()) {
    (void)pipeline_->Settle(/*keep_read_ahead=*/false);
    absl::Status rolled = AbortStep();
    return Annotate(counted,
                    absl::StrCat("step ", t, "'s step counts; nothing of the "
                                 "step was applied",
                                 rolled.ok() ? "" : " (rolling it back: ",
                                 rolled.ok() ? "" : rolled.message(),
                                 rolled.ok() ? "" : ")"));
  }
  std::future<absl::Status> ended = store_->EndTransaction();
  prev_step_ = step_;
  prev_param_steps_ = param_steps_;
  param_steps_ = std::move(steps);
  step_ = t;
  txn_step_ = t;
  for (auto& o : overrides_) o.clear();
  if (pipeline_->unsettled()) {
    txn_end_ = std::move(ended);  // lands behind the caller
    return r;
  }
  txn_end_ = std::move(ended);
  MLPO_RETURN_IF_ERROR(SettleTransaction());
  return r;
}

absl::Status Optimizer::SettleTransaction() {
  if (!txn_end_) return absl::OkStatus();
  absl::Status st = txn_end_->get();
  txn_end_.reset();
  if (st.ok()) {
    adopt_log_.reset();
    return st;
  }
  // Step txn_step_ is not in the store: the optimizer and the model go
  // back to the step before it.
  const uint64_t t = txn_step_;
  step_ = prev_step_;
  param_steps_ = prev_param_steps_;
  (void)pipeline_->Settle(/*keep_read_ahead=*/false);
  absl::Status rw = Rewind(pipeline_->last_taken(), adopt_log_.get());
  adopt_log_.reset();
  return Annotate(st, absl::StrCat(
      "step ", t, " (its writes failed after step() returned); nothing of "
      "it was applied: the store and the parameters are at step ", step_,
      rw.ok() ? "" : absl::StrCat(" (the parameters could not all be "
                                  "written back: ", rw.message(), ")")));
}

absl::Status Optimizer::AbortStep() {
  if (store_->in_transaction())
    MLPO_RETURN_IF_ERROR(store_->AbortTransaction());
  std::unique_ptr<AdoptLog> log = std::move(adopt_log_);
  return Rewind(pipeline_->last_taken(), log.get());
}

absl::Status Optimizer::RewindDiscarded() {
  if (!redo_pending_) return absl::OkStatus();
  redo_pending_ = false;
  std::unique_ptr<AdoptLog> log = std::move(discarded_);
  return Rewind(discarded_taken_, log.get());
}

absl::Status Optimizer::Rewind(const std::vector<int>& subgroups,
                               const AdoptLog* adopted) {
  if (subgroups.empty()) return absl::OkStatus();
  TraceSpan span("rewind", "step", "optimizer");
  std::vector<bool> none(params_.size(), false);
  StepPlan plan = MakePlan(step_, 1.0, none);
  plan.commit = false;
  plan.adopt = false;
  plan.only = subgroups;
  std::vector<std::map<uint64_t, std::vector<float>>> masters;
  if (adopted) {
    MutexLock l(&const_cast<AdoptLog*>(adopted)->mu);
    masters = adopted->by_subgroup;
  }
  plan.adopted = &masters;
  ParamSink* sink =
      sink_ ? static_cast<ParamSink*>(sink_.get()) : options_.param_sink;
  absl::StatusOr<StepReport> r = pipeline_->Step(step_, plan, *grads_, sink);
  return Annotate(r.status(), "writing the parameters of the step before "
                              "back into the model");
}

}  // namespace mlpo
