// Adam and AdamW (torch.optim.Adam / AdamW), with amsgrad: the state m
// (exp_avg), v (exp_avg_sq) and, with amsgrad, vmax (max_exp_avg_sq).
// Without amsgrad the step runs the hand-vectorised kernels of
// optimizer/kernel/adam.h; this loop is amsgrad's (and, with it off, the
// same arithmetic, tested equal to them).
#ifndef MLPO_OPTIMIZER_KERNEL_RULE_ADAM_H_
#define MLPO_OPTIMIZER_KERNEL_RULE_ADAM_H_

#include <cstddef>
#include <vector>

#include "optimizer/kernel/rule_parts.h"

namespace mlpo::rules {

struct Adam {
  static constexpr const char* kName = "adam";
  static const char* Name(const RuleSpec& s) {
    return s.amsgrad ? "adam+amsgrad" : "adam";
  }
  static const char* Check(const RuleHyper& h) {
    if (const char* b = CheckBetas(h)) return b;
    return NonNeg(h.eps) ? nullptr : "need eps >= 0";
  }
  static std::vector<StateSlot> Slots(const RuleSpec& spec) {
    if (spec.amsgrad)
      return {{"m", "exp_avg", false},
              {"v", "exp_avg_sq", true},
              {"vmax", "max_exp_avg_sq", true}};
    return {{"m", "exp_avg", false}, {"v", "exp_avg_sq", true}};
  }
  static float Initial(const RuleHyper&, int) { return 0.f; }
  static void Consts(const RuleHyper& h, uint64_t t, double grad_scale,
                     RuleConsts* c) {
    c->adam = MakeStepConsts(h, t, grad_scale);
    c->amsgrad = h.amsgrad;
    c->decay = c->adam.decay;
    c->l2 = c->adam.l2;
    c->one_minus_b1 = c->adam.one_minus_b1;
    c->b2 = c->adam.b2;
    c->one_minus_b2 = c->adam.one_minus_b2;
    c->bc2_sqrt = c->adam.bc2_sqrt;
    c->eps = c->adam.eps;
    c->neg_step = c->adam.neg_step;
  }
  // p = p*decay; g = g*scale + l2*p; m = m + (1-b1)(g-m);
  // v = v*b2 + ((1-b2)g)g; vmax = max(vmax, v) (amsgrad);
  // p = p + neg_step * (m / (sqrt(vmax or v) / sqrt(1-b2^t) + eps))
  template <KernelIsa kIsa>
  static void Loop(size_t n, float* __restrict p, float* __restrict s0,
                   float* __restrict s1, float* __restrict s2,
                   const float* __restrict g, const RuleConsts& c) {
    if (c.amsgrad)
      Run<kIsa, true>(n, p, s0, s1, s2, g, c);
    else
      Run<kIsa, false>(n, p, s0, s1, s2, g, c);
  }

 private:
  // One loop per option, so that no branch is left inside it; a template
  // on the ISA too, so that each ISA's unit has its own (one definition
  // of it compiled with other flags in each unit would break the
  // one-definition rule).
  template <KernelIsa kIsa, bool kAmsgrad>
  static void Run(size_t n, float* __restrict p, float* __restrict s0,
                  float* __restrict s1, float* __restrict s2,
                  const float* __restrict g, const RuleConsts& c) {
    const float gs = c.grad_scale, decay = c.decay, l2 = c.l2;
    const float omb1 = c.one_minus_b1, b2 = c.b2, omb2 = c.one_minus_b2;
    const float bc2 = c.bc2_sqrt, eps = c.eps, step = c.neg_step;
    for (size_t i = 0; i < n; ++i) {
      float gi = g[i] * gs;
      float pi = p[i] * decay;
      gi = gi + l2 * pi;
      float m = s0[i];
      m = m + omb1 * (gi - m);
      float v = s1[i] * b2;
      v = v + (omb2 * gi) * gi;
      float r = v;
      if constexpr (kAmsgrad) {
        float vm = s2[i];
        vm = vm < v ? v : vm;
        s2[i] = vm;
        r = vm;
      }
      float denom = __builtin_sqrtf(r) / bc2 + eps;
      p[i] = pi + step * (m / denom);
      s0[i] = m;
      s1[i] = v;
    }
  }
};

}  // namespace mlpo::rules

#endif  // MLPO_OPTIMIZER_KERNEL_RULE_ADAM_H_
