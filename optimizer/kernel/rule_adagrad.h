// Adagrad as torch.optim.Adagrad: the state v (torch's sum), starting at
// initial_accumulator_value.
#ifndef MLPO_OPTIMIZER_KERNEL_RULE_ADAGRAD_H_
#define MLPO_OPTIMIZER_KERNEL_RULE_ADAGRAD_H_

#include <cstddef>
#include <vector>

#include "optimizer/kernel/rule_parts.h"

namespace mlpo::rules {

struct Adagrad {
  static constexpr const char* kName = "adagrad";
  static const char* Name(const RuleSpec&) { return kName; }
  static const char* Check(const RuleHyper& h) {
    return NonNeg(h.eps) && NonNeg(h.lr_decay) &&
                   NonNeg(h.initial_accumulator_value)
               ? nullptr
               : "need eps, lr_decay and initial_accumulator_value >= 0";
  }
  static std::vector<StateSlot> Slots(const RuleSpec&) {
    return {{"v", "sum", true}};
  }
  // The sum starts at initial_accumulator_value.
  static float Initial(const RuleHyper& h, int) {
    return static_cast<float>(h.initial_accumulator_value);
  }
  static void Consts(const RuleHyper& h, uint64_t t, double, RuleConsts* c) {
    c->l2 = static_cast<float>(h.weight_decay);
    c->eps = static_cast<float>(h.eps);
    const double td = static_cast<double>(t);
    c->neg_step = static_cast<float>(-(h.lr / (1.0 + (td - 1) * h.lr_decay)));
  }
  // g = g + wd*p; s = s + g*g; p = p + ((-clr) * g) / (sqrt(s) + eps),
  // clr = lr / (1 + (t-1) lr_decay) (addcdiv's order)
  template <KernelIsa kIsa>
  static void Loop(size_t n, float* __restrict p, float* __restrict s0,
                   float* __restrict, float* __restrict,
                   const float* __restrict g, const RuleConsts& c) {
    const float gs = c.grad_scale, l2 = c.l2, eps = c.eps,
                step = c.neg_step;
    for (size_t i = 0; i < n; ++i) {
      float gi = g[i] * gs;
      float pi = p[i];
      gi = gi + l2 * pi;
      float sum = s0[i] + gi * gi;
      float sd = __builtin_sqrtf(sum) + eps;
      p[i] = pi + (step * gi) / sd;
      s0[i] = sum;
    }
  }
};

}  // namespace mlpo::rules

#endif  // MLPO_OPTIMIZER_KERNEL_RULE_ADAGRAD_H_
