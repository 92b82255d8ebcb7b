// Update during backward (Optimizer::BeginStep / GradReady / FinishStep):
// the step runs on a thread of its own while backward hands in gradients;
// the pipeline takes each subgroup once every parameter in it is ready
// (ReadyGate), with the same plan, kernels and constants as Step(), so the
// result is the plain step's bit for bit.
#include <algorithm>
#include <cmath>
#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "base/status_macros.h"
#include "base/trace.h"
#include "optimizer/optimizer.h"

namespace mlpo {

class Optimizer::BackwardStep final : public ReadyGate {
 public:
  BackwardStep(Optimizer* o, uint64_t t, StepPlan plan)
      : o_(o), t_(t), plan_(std::move(plan)) {
    const size_t n = o_->subgroups_.size();
    run_param_.resize(n);
    pending_.assign(n, 0);
    of_param_.resize(o_->params_.size());
    for (size_t i = 0; i < n; ++i) {
      const Subgroup& s = o_->subgroups_[i];
      for (const StepRun& r : plan_.runs[i]) {
        int j = ParamAt(s.group, s.group_offset + r.offset);
        run_param_[i].push_back(j);
        of_param_[j].push_back(static_cast<int>(i));
      }
      pending_[i] = static_cast<int>(plan_.runs[i].size());
      if (pending_[i] == 0) ready_.push_back(static_cast<int>(i));
    }
    ready_param_.assign(o_->params_.size(), false);
    plan_.gate = this;
    plan_.order = o_->backward_order_;
  }

  ~BackwardStep() override {
    if (!thread_.joinable()) return;
    {
      MutexLock l(&mu_);
      closed_ = true;
    }
    thread_.join();
  }

  void Start() {
    thread_ = std::thread([this] {
      ParamSink* sink = o_->sink_ ? static_cast<ParamSink*>(o_->sink_.get())
                                  : o_->options_.param_sink;
      result_ = o_->pipeline_->Step(t_, plan_, *o_->grads_, sink);
    });
  }

  absl::Status Ready(int param) {
    MutexLock l(&mu_);
    if (param < 0 || param >= static_cast<int>(ready_param_.size()))
      return absl::InvalidArgumentError(
          absl::StrCat("no parameter ", param, " (the optimizer has ",
                       ready_param_.size(), ")"));
    if (ready_param_[param])
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter ", param, "'s gradient was handed in twice for step ",
          t_, " (a second backward before the step: gradient accumulation "
          "needs the option that says how many backwards make a step)"));
    const Param& q = o_->params_[param];
    uint64_t c = o_->grads_->StagedCount(q.group, q.offset, q.numel);
    if (c != q.numel)
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter ", param, " is ready but its gradient was staged for ",
          c, " of its ", q.numel, " elements"));
    ready_param_[param] = true;
    for (int i : of_param_[param])
      if (--pending_[i] == 0) ready_.push_back(i);
    return absl::OkStatus();
  }

  // Backward is over: the parameters not ready have no gradient.
  absl::StatusOr<StepReport> Finish(std::vector<bool>* active) {
    {
      MutexLock l(&mu_);
      closed_ = true;
    }
    thread_.join();
    *active = ready_param_;
    return std::move(result_);
  }

  absl::StatusOr<int> Next() override {
    int i;
    {
      MutexLock l(&mu_);
      mu_.Await(Condition(this, &BackwardStep::CanGo));
      if (!ready_.empty()) {
        i = ready_.front();
        ready_.pop_front();
      } else {  // closed: the first subgroup still waiting
        i = static_cast<int>(std::find_if(pending_.begin(), pending_.end(),
                                          [](int p) { return p > 0; }) -
                             pending_.begin());
        pending_[i] = 0;
      }
      // Parameters without a gradient stay as they are.
      std::vector<StepRun>& runs = plan_.runs[i];
      for (size_t r = 0; r < runs.size(); ++r)
        if (!ready_param_[run_param_[i][r]]) runs[r].consts = -1;
    }
    // (unlocked: backward goes on handing in gradients meanwhile; this
    // subgroup's are all in and no longer change)
    MLPO_RETURN_IF_ERROR(CheckFinite(i));
    return i;
  }

 private:
  bool CanGo() const {
    if (!ready_.empty()) return true;
    return closed_ && std::any_of(pending_.begin(), pending_.end(),
                                  [](int p) { return p > 0; });
  }
  // The index of the parameter holding element `e` of `group`.
  int ParamAt(int group, uint64_t e) const {
    const auto& ps = o_->params_;
    auto it = std::upper_bound(
        ps.begin(), ps.end(), std::make_pair(group, e),
        [](const std::pair<int, uint64_t>& x, const Param& q) {
          return x.first < q.group || (x.first == q.group && x.second < q.offset);
        });
    return static_cast<int>(it - ps.begin()) - 1;
  }
  // A non-finite gradient cannot skip a step part of which is applied: the
  // step stops, naming the parameter.
  absl::Status CheckFinite(int i) {
    const Subgroup& s = o_->subgroups_[i];
    const std::vector<StepRun>& runs = plan_.runs[i];
    for (size_t r = 0; r < runs.size(); ++r) {
      if (runs[r].consts < 0) continue;
      for (uint64_t at = runs[r].offset; at < runs[r].offset + runs[r].n;) {
        uint64_t avail = 0;
        const void* g = o_->grads_->Span(i, at, &avail);
        avail = std::min(avail, runs[r].offset + runs[r].n - at);
        if (g && ComputeGradStats(g, o_->grads_->dtype(), avail).nonfinite)
          return absl::FailedPreconditionError(absl::StrCat(
              "parameter ", run_param_[i][r], " has a non-finite gradient: "
              "a step updated during backward cannot be skipped once part "
              "of it is applied (", s.object, " and the subgroups after it "
              "keep step ", t_ - 1, "); use the plain step with loss "
              "scaling"));
        at += avail;
      }
    }
    return absl::OkStatus();
  }

  Optimizer* const o_;
  const uint64_t t_;
  StepPlan plan_;
  std::vector<std::vector<int>> run_param_;  // subgroup -> run -> param
  std::vector<std::vector<int>> of_param_;   // param -> subgroups
  Mutex mu_;
  std::vector<int> pending_ ABSL_GUARDED_BY(mu_);  // params not ready
  std::vector<bool> ready_param_ ABSL_GUARDED_BY(mu_);
  std::deque<int> ready_ ABSL_GUARDED_BY(mu_);  // in the order they came
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  absl::StatusOr<StepReport> result_ = absl::UnknownError("not run");
};

void Optimizer::BackwardStepDeleter::operator()(BackwardStep* b) const {
  delete b;
}

absl::Status Optimizer::BeginStep(double loss_scale) {
  if (backward_ != nullptr)
    return absl::FailedPreconditionError(
        "a step is already running during backward: FinishStep first");
  if (!(loss_scale > 0) || !std::isfinite(loss_scale))
    return absl::InvalidArgumentError(
        absl::StrCat("loss_scale ", loss_scale, " must be positive and finite"));
  if (options_.pipeline.grad_offload)
    return absl::FailedPreconditionError(
        "the grad_offload baseline writes every gradient first; it cannot "
        "update during backward");
  if (options_.max_grad_norm > 0)
    return absl::FailedPreconditionError(
        "gradient clipping by global norm needs every gradient before the "
        "first update; it cannot update during backward (clip in your own "
        "loop after backward, or use the plain step)");
  MLPO_RETURN_IF_ERROR(SettleWrites(/*keep_read_ahead=*/true));
  MLPO_RETURN_IF_ERROR(StartFresh());
  MLPO_RETURN_IF_ERROR(CompletePartialInitial());
  if (backward_order_.size() != subgroups_.size()) {
    // Backward's order until one is seen: the last parameters first.
    backward_order_.clear();
    for (int i = static_cast<int>(subgroups_.size()) - 1; i >= 0; --i)
      backward_order_.push_back(i);
  }
  uint64_t t = step_ + 1;
  std::vector<bool> all(params_.size(), true);
  backward_.reset(new BackwardStep(this, t, MakePlan(t, 1 / loss_scale, all)));
  backward_->Start();
  return absl::OkStatus();
}

absl::Status Optimizer::GradReady(int param) {
  if (backward_ == nullptr)
    return absl::FailedPreconditionError(
        "no step is running during backward (BeginStep first)");
  return backward_->Ready(param);
}

absl::StatusOr<StepReport> Optimizer::FinishStep() {
  if (backward_ == nullptr)
    return absl::FailedPreconditionError(
        "no step is running during backward (BeginStep first)");
  std::vector<bool> active;
  absl::StatusOr<StepReport> r = backward_->Finish(&active);
  backward_.reset();
  uint64_t t = step_ + 1;
  if (r.ok()) backward_order_ = r->order;
  return EndStep(t, active, std::move(r));
}

// Shared with Step(): what follows a step's pipeline run, either way.
absl::StatusOr<StepReport> Optimizer::EndStep(uint64_t t,
                                              const std::vector<bool>& active,
                                              absl::StatusOr<StepReport> r) {
  grads_->Reset();
  grads_offloaded_ = false;
  for (auto& o : overrides_) o.clear();
  if (!r.ok()) return r.status();
  std::vector<uint64_t> steps = param_steps_;
  for (size_t k = 0; k < steps.size(); ++k) steps[k] += active[k] ? 1 : 0;
  if (pipeline_->unsettled()) {  // written behind the state's commits
    pending_steps_.emplace(t, steps);
  } else {
    TraceSpan commit("step counts", "store", "optimizer");
    MLPO_RETURN_IF_ERROR(Annotate(CommitParamSteps(t, steps),
                                  absl::StrCat("step ", t)));
  }
  param_steps_ = std::move(steps);
  step_ = t;
  return r;
}

}  // namespace mlpo
