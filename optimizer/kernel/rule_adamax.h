// Adamax as torch.optim.Adamax (Kingma & Ba, "Adam: A Method for
// Stochastic Optimization", 2015, Algorithm 2: Adam with the infinity
// norm): the state m (exp_avg) and u (exp_inf, >= 0). Added by following
// docs/design.md "Adding a rule" as its test: this file, its RuleKind, its
// line in rules.h and its adapter class.
#ifndef MLPO_OPTIMIZER_KERNEL_RULE_ADAMAX_H_
#define MLPO_OPTIMIZER_KERNEL_RULE_ADAMAX_H_

#include <cmath>
#include <cstddef>
#include <vector>

#include "optimizer/kernel/rule_parts.h"

namespace mlpo::rules {

struct Adamax {
  static constexpr const char* kName = "adamax";
  static const char* Name(const RuleSpec&) { return kName; }
  static const char* Check(const RuleHyper& h) {
    if (const char* b = CheckBetas(h)) return b;
    return NonNeg(h.eps) ? nullptr : "need eps >= 0";
  }
  static std::vector<StateSlot> Slots(const RuleSpec&) {
    return {{"m", "exp_avg", false}, {"u", "exp_inf", true}};
  }
  static float Initial(const RuleHyper&, int) { return 0.f; }
  static void Consts(const RuleHyper& h, uint64_t t, double, RuleConsts* c) {
    c->l2 = static_cast<float>(h.weight_decay);
    c->one_minus_b1 = static_cast<float>(1.0 - h.beta1);
    c->b2 = static_cast<float>(h.beta2);
    c->eps = static_cast<float>(h.eps);
    // clr = lr / (1 - b1^t), in double as torch's Python scalars are
    const double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(t));
    c->neg_step = static_cast<float>(-(h.lr / bc1));
  }
  // g = g + wd*p; m = m + (1-b1)*(g - m) (lerp_);
  // u = max(u*b2, |g| + eps) (torch.maximum: a NaN on either side wins);
  // p = p + ((-clr) * m) / u (addcdiv's order)
  template <KernelIsa kIsa>
  static void Loop(size_t n, float* __restrict p, float* __restrict s0,
                   float* __restrict s1, float* __restrict,
                   const float* __restrict g, const RuleConsts& c) {
    const float gs = c.grad_scale, l2 = c.l2, omb1 = c.one_minus_b1,
                b2 = c.b2, eps = c.eps, step = c.neg_step;
    for (size_t i = 0; i < n; ++i) {
      float gi = g[i] * gs;
      float pi = p[i];
      gi = gi + l2 * pi;
      float m = s0[i];
      m = m + omb1 * (gi - m);
      float a = s1[i] * b2;
      float b = __builtin_fabsf(gi) + eps;
      float u = a != a ? a : (a < b ? b : a);
      p[i] = pi + (step * m) / u;
      s0[i] = m;
      s1[i] = u;
    }
  }
};

}  // namespace mlpo::rules

#endif  // MLPO_OPTIMIZER_KERNEL_RULE_ADAMAX_H_
