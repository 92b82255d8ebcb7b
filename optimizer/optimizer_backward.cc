// Update during backward (Optimizer::BeginStep / GradReady / FinishStep /
// DiscardStep): the step runs on a thread of its own while backward hands
// in gradients; the pipeline takes each subgroup once every parameter in
// it is ready (ReadyGate), with the same plan, kernels and constants as
// Step(), so the result is the plain step's bit for bit. It is
// speculative: the step is a store transaction (step_transaction.cc) that
// FinishStep commits, or discards and redoes (a clip) or rewinds (a
// non-finite gradient), as the plain step would have decided.
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
    o_->adopt_log_ = std::make_unique<AdoptLog>();
    plan_.log = o_->adopt_log_.get();
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

  // Where parameter `param`'s new values go (Optimizer::SetParamMemory
  // while the step runs): before it is ready, so before any subgroup of
  // it is taken.
  absl::Status SetMemory(int param, void* memory, DType dtype) {
    MutexLock l(&mu_);
    if (ready_param_[param])
      return absl::FailedPreconditionError(absl::StrCat(
          "parameter ", param, "'s memory changed after its gradient was "
          "handed in to the running step"));
    const Param& q = o_->params_[param];
    for (int i : of_param_[param]) {
      const Subgroup& s = o_->subgroups_[i];
      std::vector<StepRun>& runs = plan_.runs[i];
      for (size_t r = 0; r < runs.size(); ++r) {
        if (run_param_[i][r] != param) continue;
        uint64_t lo = s.group_offset + runs[r].offset;
        runs[r].memory = static_cast<char*>(memory) +
                         (lo - q.offset) * DTypeSize(dtype);
        runs[r].memory_dtype = dtype;
      }
    }
    return absl::OkStatus();
  }

  // Backward is over: the parameters not ready have no gradient. Sets
  // `nonfinite` when the step stopped at a non-finite gradient.
  absl::StatusOr<StepReport> Finish(std::vector<bool>* active,
                                    bool* nonfinite) {
    {
      MutexLock l(&mu_);
      closed_ = true;
    }
    thread_.join();
    MutexLock l(&mu_);
    *active = ready_param_;
    *nonfinite = nonfinite_;
    return std::move(result_);
  }
  // Stops the step where it is (a discard): the subgroups not taken yet
  // are not updated.
  void Stop() {
    {
      MutexLock l(&mu_);
      closed_ = stopped_ = true;
    }
    thread_.join();
  }
  uint64_t t() const { return t_; }
  const StepPlan& plan() const { return plan_; }

  absl::StatusOr<int> Next() override {
    int i;
    {
      MutexLock l(&mu_);
      mu_.Await(Condition(this, &BackwardStep::CanGo));
      if (stopped_)
        return absl::CancelledError("the step was discarded");
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
    if (stopped_ || !ready_.empty()) return true;
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
  // A non-finite gradient: the step stops here; FinishStep discards it
  // (the plain step would skip it).
  absl::Status CheckFinite(int i) {
    const Subgroup& s = o_->subgroups_[i];
    const std::vector<StepRun>& runs = plan_.runs[i];
    for (size_t r = 0; r < runs.size(); ++r) {
      if (runs[r].consts < 0) continue;
      for (uint64_t at = runs[r].offset; at < runs[r].offset + runs[r].n;) {
        uint64_t avail = 0;
        const void* g = o_->grads_->Span(i, at, &avail);
        avail = std::min(avail, runs[r].offset + runs[r].n - at);
        if (g && ComputeGradStats(g, o_->grads_->dtype(), avail).nonfinite) {
          MutexLock l(&mu_);
          nonfinite_ = true;
          return absl::CancelledError(absl::StrCat(
              "parameter ", run_param_[i][r], " (", s.object,
              ") has a non-finite gradient"));
        }
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
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool nonfinite_ ABSL_GUARDED_BY(mu_) = false;
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
  if (reset_pending_)
    return absl::FailedPreconditionError(
        "the first step of a fresh start drops the store's heads, which a "
        "step during backward could not give back if it were discarded: "
        "run it with Step()");
  MLPO_RETURN_IF_ERROR(SettleWrites(/*keep_read_ahead=*/true));
  MLPO_RETURN_IF_ERROR(RewindDiscarded());
  MLPO_RETURN_IF_ERROR(CompletePartialInitial());
  if (backward_order_.size() != subgroups_.size()) {
    // Backward's order until one is seen: the last parameters first.
    backward_order_.clear();
    for (int i = static_cast<int>(subgroups_.size()) - 1; i >= 0; --i)
      backward_order_.push_back(i);
  }
  uint64_t t = step_ + 1;
  std::vector<bool> all(params_.size(), true);
  MLPO_RETURN_IF_ERROR(store_->BeginTransaction());
  backward_loss_scale_ = loss_scale;
  backward_.reset(new BackwardStep(this, t, MakePlan(t, 1 / loss_scale, all)));
  backward_->Start();
  return absl::OkStatus();
}

absl::Status Optimizer::SetRunningParamMemory(int param, void* memory,
                                              DType dtype) {
  return backward_->SetMemory(param, memory, dtype);
}

absl::Status Optimizer::GradReady(int param) {
  if (backward_ == nullptr)
    return absl::FailedPreconditionError(
        "no step is running during backward (BeginStep first)");
  return backward_->Ready(param);
}

absl::StatusOr<StepReport> Optimizer::FinishStep(const AgreeStats& agree) {
  if (backward_ == nullptr) {
    absl::Status st = absl::FailedPreconditionError(
        "no step is running during backward (BeginStep first)");
    if (agree) (void)agree(GradStats());  // the other ranks' collectives
    return st;
  }
  std::vector<bool> active;
  bool nonfinite = false;
  absl::StatusOr<StepReport> r = backward_->Finish(&active, &nonfinite);
  backward_.reset();
  const uint64_t t = step_ + 1;
  const double loss_scale = backward_loss_scale_;
  if (r.ok()) backward_order_ = r->order;
  // Decided as the plain step decides, from the same statistics.
  GradStats tot;
  if (agree) tot = agree(LocalGradStats());
  if (!r.ok() && !nonfinite) return EndStep(t, active, std::move(r));
  if (!agree && (nonfinite || options_.max_grad_norm > 0))
    tot = LocalGradStats();
  StepReport rep;
  rep.step = step_;
  if (nonfinite || tot.nonfinite > 0) {
    // Discarded whole, and the model's memory rewound.
    (void)pipeline_->Settle(/*keep_read_ahead=*/false);
    MLPO_RETURN_IF_ERROR(AbortStep());
    grads_->Reset();
    rep.skipped = true;
    rep.skip_reason = absl::StrCat(std::max<uint64_t>(tot.nonfinite, 1),
                                   " non-finite gradient values (overflow)");
    ++skipped_;
    return rep;
  }
  rep.grad_norm = std::sqrt(tot.sum_sq) / loss_scale;
  if (options_.max_grad_norm > 0 && rep.grad_norm > options_.max_grad_norm) {
    // Clipped: the speculative step is discarded and redone from the state
    // before it with the clipped gradients (still borrowed or staged).
    const double spec_s = r->total_s;
    rep.clip_coef = options_.max_grad_norm / (rep.grad_norm + 1e-6);
    MLPO_RETURN_IF_ERROR(DiscardRunning(/*redo=*/true));
    auto redo = RunStep(t, MakePlan(t, rep.clip_coef / loss_scale, active),
                        active);
    if (redo.ok()) {
      redo->grad_norm = rep.grad_norm;
      redo->clip_coef = rep.clip_coef;
      redo->discarded_s = spec_s;
    }
    return redo;
  }
  if (options_.max_grad_norm > 0 || agree) {
    r->grad_norm = rep.grad_norm;
  }
  return EndStep(t, active, std::move(r));
}

absl::Status Optimizer::DiscardRunning(bool redo) {
  // Its commits land, then nothing of it stays.
  (void)pipeline_->Settle(/*keep_read_ahead=*/false);
  if (store_->in_transaction())
    MLPO_RETURN_IF_ERROR(store_->AbortTransaction());
  discarded_ = std::move(adopt_log_);
  discarded_taken_ = pipeline_->last_taken();
  redo_pending_ = true;
  if (!redo) return RewindDiscarded();
  return absl::OkStatus();
}

absl::Status Optimizer::DiscardStep(bool redo) {
  if (backward_ == nullptr)
    return absl::FailedPreconditionError(
        "no step is running during backward (BeginStep first)");
  backward_->Stop();
  backward_.reset();
  absl::Status st = DiscardRunning(redo);
  // The gradients the step was handed: the redo's are handed in again.
  grads_->Reset();
  return st;
}

}  // namespace mlpo
