// SGD as torch.optim.SGD (momentum, dampening, nesterov, weight decay):
// the state m (momentum_buffer), none at momentum 0.
#ifndef MLPO_OPTIMIZER_KERNEL_RULE_SGD_H_
#define MLPO_OPTIMIZER_KERNEL_RULE_SGD_H_

#include <cmath>
#include <cstddef>
#include <vector>

#include "optimizer/kernel/rule_parts.h"

namespace mlpo::rules {

struct Sgd {
  static constexpr const char* kName = "sgd";
  static const char* Name(const RuleSpec& s) {
    return s.momentum ? "sgd+momentum" : "sgd";
  }
  static const char* Check(const RuleHyper& h) {
    if (!NonNeg(h.momentum) || !std::isfinite(h.dampening))
      return "need momentum >= 0 and a finite dampening";
    if (h.nesterov && (h.momentum <= 0 || h.dampening != 0))
      return "nesterov momentum needs momentum > 0 and dampening 0";
    return nullptr;
  }
  static std::vector<StateSlot> Slots(const RuleSpec& spec) {
    if (!spec.momentum) return {};
    return {{"m", "momentum_buffer", false}};
  }
  static float Initial(const RuleHyper&, int) { return 0.f; }
  static void Consts(const RuleHyper& h, uint64_t t, double, RuleConsts* c) {
    c->l2 = static_cast<float>(h.weight_decay);
    c->momentum = static_cast<float>(h.momentum);
    c->one_minus_damp = static_cast<float>(1.0 - h.dampening);
    c->nesterov = h.nesterov;
    c->first = t == 1;
    c->neg_step = static_cast<float>(-h.lr);
  }
  // g = g + wd*p; b = (first step) g, else b*mu + (1-d)*g;
  // g = nesterov ? g + mu*b : b; p = p + (-lr)*g
  template <KernelIsa kIsa>
  static void Loop(size_t n, float* __restrict p, float* __restrict s0,
                   float* __restrict, float* __restrict,
                   const float* __restrict g, const RuleConsts& c) {
    const float gs = c.grad_scale, l2 = c.l2, step = c.neg_step;
    const float mu = c.momentum, omd = c.one_minus_damp;
    if (s0 == nullptr || mu == 0.f) {
      // No momentum buffer, or momentum 0 this step: torch.optim leaves
      // the buffer as it is (it is used again once momentum is back).
      for (size_t i = 0; i < n; ++i) {
        float gi = g[i] * gs;
        float pi = p[i];
        gi = gi + l2 * pi;
        p[i] = pi + step * gi;
      }
    } else if (c.first) {  // the buffer starts as the gradient
      for (size_t i = 0; i < n; ++i) {
        float gi = g[i] * gs;
        float pi = p[i];
        gi = gi + l2 * pi;
        float b = gi;
        float d = c.nesterov ? gi + mu * b : b;
        p[i] = pi + step * d;
        s0[i] = b;
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        float gi = g[i] * gs;
        float pi = p[i];
        gi = gi + l2 * pi;
        float b = s0[i] * mu + omd * gi;
        float d = c.nesterov ? gi + mu * b : b;
        p[i] = pi + step * d;
        s0[i] = b;
      }
    }
  }
};

}  // namespace mlpo::rules

#endif  // MLPO_OPTIMIZER_KERNEL_RULE_SGD_H_
