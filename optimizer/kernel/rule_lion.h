// Lion (Chen et al., "Symbolic Discovery of Optimization Algorithms",
// 2023, Algorithm 2), with lion-pytorch's state: m (exp_avg). One moment:
// 8 bytes a parameter in fp32 with the master, against Adam's 12.
#ifndef MLPO_OPTIMIZER_KERNEL_RULE_LION_H_
#define MLPO_OPTIMIZER_KERNEL_RULE_LION_H_

#include <cstddef>
#include <vector>

#include "optimizer/kernel/rule_parts.h"

namespace mlpo::rules {

struct Lion {
  static constexpr const char* kName = "lion";
  static const char* Name(const RuleSpec&) { return kName; }
  static const char* Check(const RuleHyper& h) { return CheckBetas(h); }
  static std::vector<StateSlot> Slots(const RuleSpec&) {
    return {{"m", "exp_avg", false}};
  }
  static float Initial(const RuleHyper&, int) { return 0.f; }
  static void Consts(const RuleHyper& h, uint64_t, double, RuleConsts* c) {
    c->decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
    c->b1 = static_cast<float>(h.beta1);
    c->one_minus_b1 = static_cast<float>(1.0 - h.beta1);
    c->b2 = static_cast<float>(h.beta2);
    c->one_minus_b2 = static_cast<float>(1.0 - h.beta2);
    c->neg_step = static_cast<float>(-h.lr);
  }
  // p *= 1 - lr*wd; u = m*b1 + (1-b1)*g; p = p + (-lr)*sign(u);
  // m = m*b2 + (1-b2)*g
  template <KernelIsa kIsa>
  static void Loop(size_t n, float* __restrict p, float* __restrict s0,
                   float* __restrict, float* __restrict,
                   const float* __restrict g, const RuleConsts& c) {
    const float gs = c.grad_scale, decay = c.decay, step = c.neg_step;
    const float b1 = c.b1, omb1 = c.one_minus_b1, b2 = c.b2,
                omb2 = c.one_minus_b2;
    for (size_t i = 0; i < n; ++i) {
      float gi = g[i] * gs;
      float pi = p[i] * decay;
      float m = s0[i];
      float u = m * b1 + omb1 * gi;
      // sign(u) without a branch (the compiler vectorises it; a branch on
      // random signs mispredicts half the time)
      float sg = static_cast<float>(static_cast<int>(u > 0.0f) -
                                    static_cast<int>(u < 0.0f));
      p[i] = pi + step * sg;
      s0[i] = m * b2 + omb2 * gi;
    }
  }
};

}  // namespace mlpo::rules

#endif  // MLPO_OPTIMIZER_KERNEL_RULE_LION_H_
