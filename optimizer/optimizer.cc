#include "optimizer/optimizer.h"

#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace mlpo {

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Open(
    OptimizerOptions options) {
  std::unique_ptr<Optimizer> o(new Optimizer(std::move(options)));
  MLPO_RETURN_IF_ERROR(o->Init());
  return o;
}

namespace {
absl::Status CheckHyper(int group, const AdamHyper& h) {
  auto finite = [](double x) { return std::isfinite(x); };
  if (!finite(h.lr) || !finite(h.eps) || !finite(h.weight_decay) ||
      !finite(h.beta1) || !finite(h.beta2) || h.lr < 0 || h.eps < 0 ||
      h.weight_decay < 0 || h.beta1 < 0 || h.beta1 >= 1 || h.beta2 < 0 ||
      h.beta2 >= 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter group ", group, ": need finite lr, eps, weight_decay >= 0 "
        "and betas in [0, 1) (lr ", h.lr, ", betas (", h.beta1, ", ", h.beta2,
        "), eps ", h.eps, ", weight_decay ", h.weight_decay, ")"));
  return absl::OkStatus();
}
}  // namespace

absl::Status Optimizer::SetHyper(int group, const AdamHyper& hyper) {
  if (group < 0 || group >= static_cast<int>(options_.groups.size()))
    return absl::InvalidArgumentError(
        absl::StrCat("no parameter group ", group));
  MLPO_RETURN_IF_ERROR(CheckHyper(group, hyper));
  options_.groups[group].hyper = hyper;
  return absl::OkStatus();
}

absl::Status Optimizer::Init() {
  const PipelineOptions& po = options_.pipeline;
  if (po.prefetch_depth < 1 || po.prefetch_depth > 64 ||
      po.max_commits_in_flight < 1 || po.max_commits_in_flight > 64)
    return absl::InvalidArgumentError(
        "prefetch_depth and max_commits_in_flight must be in 1..64");
  std::vector<uint64_t> numel;
  for (auto& g : options_.groups) {
    MLPO_RETURN_IF_ERROR(CheckHyper(static_cast<int>(numel.size()), g.hyper));
    numel.push_back(g.numel);
  }
  MLPO_ASSIGN_OR_RETURN(subgroups_,
                        PartitionParams(numel, options_.subgroup_numel));
  for (const Subgroup& s : subgroups_) by_object_[s.object] = &s;
  StoreOptions so = options_.store;
  auto init = options_.init_params;
  const auto* map = &by_object_;
  so.initializer = [init, map](const std::string& obj, const ObjectLayout& l,
                               char* blob) {
    std::memset(blob, 0, l.total_bytes());
    auto it = map->find(obj);
    if (it == map->end() || !init) return;  // gradient objects, or zeros
    const Subgroup& s = *it->second;
    init(s.group, s.group_offset,
         reinterpret_cast<float*>(blob + l.Find("p")->offset), s.numel);
  };
  MLPO_ASSIGN_OR_RETURN(store_, ObjectStore::Open(so));
  for (const Subgroup& s : subgroups_) {
    MLPO_ASSIGN_OR_RETURN(ObjectLayout l,
                          ObjectLayout::Make({{"p", DType::kF32, s.numel},
                                              {"m", DType::kF32, s.numel},
                                              {"v", DType::kF32, s.numel}}));
    MLPO_RETURN_IF_ERROR(store_->Declare(s.object, l));
    if (po.grad_offload) {
      MLPO_ASSIGN_OR_RETURN(ObjectLayout gl,
                            ObjectLayout::Make({{"g", DType::kF32, s.numel}}));
      MLPO_RETURN_IF_ERROR(store_->Declare(UpdatePipeline::GradObject(s), gl));
    }
  }
  if (!options_.restore_tag.empty())
    MLPO_RETURN_IF_ERROR(store_->Restore(options_.restore_tag));
  MLPO_RETURN_IF_ERROR(LoadStep());
  grads_ = std::make_unique<GradStage>(subgroups_, options_.grad_dtype);
  if (options_.param_sink == nullptr) {
    sink_ = std::make_unique<HostParamSink>(numel, options_.param_dtype);
  } else if (options_.param_sink->dtype() != options_.param_dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "param_sink takes ", DTypeName(options_.param_sink->dtype()),
        " parameters, but param_dtype is ",
        DTypeName(options_.param_dtype)));
  }
  pipeline_ = std::make_unique<UpdatePipeline>(store_.get(), &subgroups_, po);
  return absl::OkStatus();
}

absl::Status Optimizer::LoadStep() {
  std::set<uint64_t> versions;
  for (const ObjectInfo& i : store_->List())
    if (by_object_.count(i.name))
      versions.insert(i.has_head ? i.head_step : 0);
  if (versions.size() > 1)
    return absl::FailedPreconditionError(absl::StrCat(
        "store ", store_->options().meta_dir,
        " holds optimizer state from different steps (",
        absl::StrJoin(versions, ", "),
        "): a step was interrupted; restore a tag (OptimizerOptions."
        "restore_tag, or `mlpo restore STORE TAG`)"));
  step_ = versions.empty() ? 0 : *versions.begin();
  return absl::OkStatus();
}

absl::Status Optimizer::Restore(const std::string& name) {
  MLPO_RETURN_IF_ERROR(store_->Restore(name));
  grads_->Reset();
  return LoadStep();
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

GradStats Optimizer::LocalGradStats() const { return grads_->Totals(); }

absl::Status Optimizer::ImportState(uint64_t t, const StateFill& fill) {
  if (t < 1 || t <= step_)
    return absl::FailedPreconditionError(absl::StrCat(
        "import at step ", t, ": the store ", store_->options().meta_dir,
        " is at step ", step_,
        "; state can only be imported at a later step (use a fresh store)"));
  for (const Subgroup& s : subgroups_) {
    MLPO_ASSIGN_OR_RETURN(Lease l, store_->Blank(s.object));
    MLPO_RETURN_IF_ERROR(fill(s, l->Section<float>("p"), l->Section<float>("m"),
                              l->Section<float>("v")));
    MLPO_RETURN_IF_ERROR(store_->Commit(l, t).get());
  }
  grads_->Reset();
  step_ = t;
  return absl::OkStatus();
}

absl::Status Optimizer::CopyParams(int group, uint64_t offset, void* dst,
                                   uint64_t count) const {
  if (group < 0 || group >= static_cast<int>(options_.groups.size()) ||
      offset + count > options_.groups[group].numel || offset + count < offset)
    return absl::InvalidArgumentError(absl::StrCat(
        "parameters [", offset, ", +", count, ") are outside group ", group));
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
  if (!(loss_scale > 0) || !std::isfinite(loss_scale))
    return absl::InvalidArgumentError(
        absl::StrCat("loss_scale ", loss_scale, " must be positive and finite"));
  MLPO_RETURN_IF_ERROR(grads_->CheckComplete());
  if (options_.pipeline.grad_offload && !grads_offloaded_)
    MLPO_RETURN_IF_ERROR(OffloadGrads());
  GradStats tot = global ? *global : grads_->Totals();
  StepReport rep;
  rep.step = step_;
  if (tot.nonfinite > 0) {
    rep.skipped = true;
    rep.skip_reason = absl::StrCat(tot.nonfinite,
                                   " non-finite gradient values (overflow)");
    ++skipped_;
    grads_->Reset();
    grads_offloaded_ = false;
    return rep;
  }
  rep.grad_norm = std::sqrt(tot.sum_sq) / loss_scale;
  if (options_.max_grad_norm > 0 && rep.grad_norm > options_.max_grad_norm)
    rep.clip_coef = options_.max_grad_norm / (rep.grad_norm + 1e-6);
  double grad_scale = rep.clip_coef / loss_scale;
  uint64_t t = step_ + 1;
  std::vector<AdamStepConsts> consts;
  for (auto& g : options_.groups)
    consts.push_back(MakeStepConsts(g.hyper, t, grad_scale));
  auto r = pipeline_->Step(t, consts, *grads_,
                           sink_ ? static_cast<ParamSink*>(sink_.get())
                                 : options_.param_sink);
  grads_->Reset();
  grads_offloaded_ = false;
  if (!r.ok()) return r.status();
  r->grad_norm = rep.grad_norm;
  r->clip_coef = rep.clip_coef;
  step_ = t;
  return r;
}

absl::Status Optimizer::ReadState(int group, std::vector<float>* p,
                                  std::vector<float>* m,
                                  std::vector<float>* v) {
  uint64_t n = options_.groups.at(group).numel;
  p->assign(n, 0);
  m->assign(n, 0);
  v->assign(n, 0);
  for (const Subgroup& s : subgroups_) {
    if (s.group != group) continue;
    auto l = store_->Checkout(s.object).get();
    if (!l.ok()) return l.status();
    std::memcpy(p->data() + s.group_offset, (*l)->Section<float>("p"), s.numel * 4);
    std::memcpy(m->data() + s.group_offset, (*l)->Section<float>("m"), s.numel * 4);
    std::memcpy(v->data() + s.group_offset, (*l)->Section<float>("v"), s.numel * 4);
  }
  return absl::OkStatus();
}

}  // namespace mlpo
