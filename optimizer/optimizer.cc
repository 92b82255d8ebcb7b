#include "optimizer/optimizer.h"

#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "store/status_macros.h"

namespace mlpo {

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Open(
    OptimizerOptions options) {
  std::unique_ptr<Optimizer> o(new Optimizer(std::move(options)));
  MLPO_RETURN_IF_ERROR(o->Init());
  return o;
}

absl::Status Optimizer::Init() {
  const PipelineOptions& po = options_.pipeline;
  if (po.prefetch_depth < 1 || po.prefetch_depth > 64 ||
      po.max_commits_in_flight < 1 || po.max_commits_in_flight > 64)
    return absl::InvalidArgumentError(
        "prefetch_depth and max_commits_in_flight must be in 1..64");
  std::vector<uint64_t> numel;
  for (auto& g : options_.groups) {
    if (g.hyper.lr < 0 || g.hyper.eps < 0 || g.hyper.weight_decay < 0 ||
        g.hyper.beta1 < 0 || g.hyper.beta1 >= 1 || g.hyper.beta2 < 0 ||
        g.hyper.beta2 >= 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter group ", numel.size(),
          ": need lr, eps, weight_decay >= 0 and betas in [0, 1)"));
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
  sink_ = std::make_unique<HostParamSink>(numel, options_.param_dtype);
  pipeline_ = std::make_unique<UpdatePipeline>(store_.get(), &subgroups_, po);
  return absl::OkStatus();
}

absl::Status Optimizer::LoadStep() {
  std::set<uint64_t> versions;
  for (const ObjectInfo& i : store_->List())
    if (by_object_.count(i.name)) versions.insert(i.has_head ? i.head : 0);
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

absl::Status Optimizer::OffloadGrads() {
  if (!options_.pipeline.grad_offload)
    return absl::FailedPreconditionError(
        "OffloadGrads needs pipeline.grad_offload (the baseline mode)");
  MLPO_RETURN_IF_ERROR(grads_->CheckComplete());
  MLPO_RETURN_IF_ERROR(pipeline_->OffloadGrads(step_ + 1, *grads_));
  grads_offloaded_ = true;
  return absl::OkStatus();
}

absl::StatusOr<StepReport> Optimizer::Step(double loss_scale) {
  if (!(loss_scale > 0) || !std::isfinite(loss_scale))
    return absl::InvalidArgumentError(
        absl::StrCat("loss_scale ", loss_scale, " must be positive and finite"));
  MLPO_RETURN_IF_ERROR(grads_->CheckComplete());
  if (options_.pipeline.grad_offload && !grads_offloaded_)
    MLPO_RETURN_IF_ERROR(OffloadGrads());
  GradStats tot = grads_->Totals();
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
  auto r = pipeline_->Step(t, consts, *grads_, sink_.get());
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
