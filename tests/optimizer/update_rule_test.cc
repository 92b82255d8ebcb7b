// Update rules (update_rule.h, rule_kernels.h): each rule's kernel against
// a double-precision loop of its definition (torch.optim's SGD and
// Adagrad, Lion's paper, Adam with amsgrad), every ISA bit for bit against
// the scalar one in every state format, and an optimizer over a store:
// the rule and its slots recorded at creation, another rule or a missing
// slot refused with nothing changed, the state read back per slot.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "optimizer/kernel/rule_kernels.h"
#include "optimizer/optimizer.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

struct Case {
  std::string name;
  RuleSpec spec;
  RuleHyper h;
};

std::vector<Case> Cases() {
  std::vector<Case> out;
  RuleHyper lion;
  lion.lr = 3e-3;
  lion.beta1 = 0.9;
  lion.beta2 = 0.99;
  lion.weight_decay = 0.1;
  out.push_back({"lion", {RuleKind::kLion, false, true}, lion});
  RuleHyper ada;
  ada.lr = 5e-2;
  ada.lr_decay = 0.01;
  ada.eps = 1e-10;
  ada.weight_decay = 0.01;
  ada.initial_accumulator_value = 0.1;
  out.push_back({"adagrad", {RuleKind::kAdagrad, false, true}, ada});
  RuleHyper sgd;
  sgd.lr = 1e-2;
  sgd.momentum = 0.9;
  sgd.dampening = 0.1;
  sgd.weight_decay = 1e-3;
  out.push_back({"sgd_momentum", {RuleKind::kSgd, false, true}, sgd});
  RuleHyper nes = sgd;
  nes.dampening = 0;
  nes.nesterov = true;
  out.push_back({"sgd_nesterov", {RuleKind::kSgd, false, true}, nes});
  RuleHyper plain;
  plain.lr = 1e-2;
  plain.weight_decay = 1e-2;
  plain.maximize = true;
  out.push_back({"sgd_plain_maximize", {RuleKind::kSgd, false, false}, plain});
  RuleHyper ams;
  ams.lr = 1e-2;
  ams.weight_decay = 1e-2;
  ams.amsgrad = true;
  ams.mode = AdamMode::kAdam;
  out.push_back({"adam_amsgrad", {RuleKind::kAdam, true, true}, ams});
  RuleHyper amax;
  amax.lr = 2e-3;
  amax.beta1 = 0.9;
  amax.beta2 = 0.99;
  amax.eps = 1e-6;
  amax.weight_decay = 1e-2;
  out.push_back({"adamax", {RuleKind::kAdamax, false, true}, amax});
  RuleHyper amax_max = amax;
  amax_max.maximize = true;
  amax_max.weight_decay = 0;
  out.push_back({"adamax_maximize", {RuleKind::kAdamax, false, true},
                 amax_max});
  return out;
}

// One step of the rule in double on element values (slots as doubles).
void ReferenceStep(const Case& c, uint64_t t, double g, double* p,
                   double* s) {
  const RuleHyper& h = c.h;
  if (h.maximize) g = -g;
  switch (c.spec.kind) {
    case RuleKind::kLion: {
      *p *= 1 - h.lr * h.weight_decay;
      double u = s[0] * h.beta1 + (1 - h.beta1) * g;
      *p -= h.lr * ((u > 0) - (u < 0));
      s[0] = s[0] * h.beta2 + (1 - h.beta2) * g;
      return;
    }
    case RuleKind::kAdagrad: {
      g += h.weight_decay * *p;
      double clr = h.lr / (1 + (t - 1) * h.lr_decay);
      s[0] += g * g;
      *p -= clr * g / (std::sqrt(s[0]) + h.eps);
      return;
    }
    case RuleKind::kSgd: {
      g += h.weight_decay * *p;
      if (c.spec.momentum) {
        s[0] = t == 1 ? g : s[0] * h.momentum + (1 - h.dampening) * g;
        g = h.nesterov ? g + h.momentum * s[0] : s[0];
      }
      *p -= h.lr * g;
      return;
    }
    case RuleKind::kAdamax: {
      g += h.weight_decay * *p;
      s[0] = h.beta1 * s[0] + (1 - h.beta1) * g;
      s[1] = std::max(h.beta2 * s[1], std::abs(g) + h.eps);
      *p -= h.lr / (1 - std::pow(h.beta1, t)) * s[0] / s[1];
      return;
    }
    case RuleKind::kAdam: {
      if (h.mode == AdamMode::kAdamW) *p *= 1 - h.lr * h.weight_decay;
      else g += h.weight_decay * *p;
      s[0] = h.beta1 * s[0] + (1 - h.beta1) * g;
      s[1] = h.beta2 * s[1] + (1 - h.beta2) * g * g;
      s[2] = std::max(s[2], s[1]);
      double bc1 = 1 - std::pow(h.beta1, t), bc2 = 1 - std::pow(h.beta2, t);
      *p -= h.lr / bc1 * s[0] / (std::sqrt(s[2]) / std::sqrt(bc2) + h.eps);
      return;
    }
  }
}

double InitialSlot(const Case& c, int k) {
  return c.spec.kind == RuleKind::kAdagrad && k == 0
             ? c.h.initial_accumulator_value
             : 0.0;
}

class RuleKernelTest : public ::testing::TestWithParam<Case> {};

// fp32 state, 20 steps of the kernel against the double loop.
TEST_P(RuleKernelTest, MatchesTheDoubleReference) {
  const Case& c = GetParam();
  const size_t n = 1000;
  const int ns = static_cast<int>(c.spec.Slots().size());
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> p(n), g(n);
  std::vector<std::vector<float>> s(ns, std::vector<float>(n));
  std::vector<double> pd(n), sd(n * 3, 0);
  for (size_t i = 0; i < n; ++i) {
    p[i] = nd(rng);
    pd[i] = p[i];
    for (int k = 0; k < ns; ++k) {
      s[k][i] = static_cast<float>(InitialSlot(c, k));
      sd[i * 3 + k] = s[k][i];
    }
  }
  int sign_flips = 0;
  for (uint64_t t = 1; t <= 20; ++t) {
    for (size_t i = 0; i < n; ++i) g[i] = nd(rng) * 0.1f;
    RuleSlice sl;
    sl.p = p.data();
    sl.grad = g.data();
    sl.grad_dtype = DType::kF32;
    sl.n = n;
    sl.slots = ns;
    for (int k = 0; k < ns; ++k) sl.slot[k] = s[k].data();
    RuleUpdate(sl, MakeRuleConsts(c.spec.kind, c.h, t, 1.0), KernelIsa::kScalar);
    for (size_t i = 0; i < n; ++i) {
      double before = pd[i];
      ReferenceStep(c, t, g[i], &pd[i], &sd[i * 3]);
      // Lion moves every element by exactly lr: a sign the fp32 and double
      // moments disagree on (|u| within rounding of 0) shows as 2 lr.
      if (c.spec.kind == RuleKind::kLion &&
          std::abs((p[i] - pd[i])) > c.h.lr) {
        ++sign_flips;
        pd[i] = p[i];
      }
      (void)before;
    }
  }
  EXPECT_EQ(sign_flips, 0);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(p[i], pd[i], 2e-5 * (1 + std::abs(pd[i]))) << c.name << " " << i;
    for (int k = 0; k < ns; ++k)
      ASSERT_NEAR(s[k][i], sd[i * 3 + k], 1e-5 * (1 + std::abs(sd[i * 3 + k])))
          << c.name << " slot " << k << " element " << i;
  }
}

// Every ISA this CPU runs equals the scalar kernel bit for bit, in every
// format and gradient dtype, with an output cast and odd lengths.
TEST_P(RuleKernelTest, EveryIsaAgreesBitForBit) {
  const Case& c = GetParam();
  const int ns = static_cast<int>(c.spec.Slots().size());
  const size_t n = 3 * kQuantBlock + 77;
  for (StateFormat f : {StateFormat::kF32, StateFormat::kBF16Moments,
                        StateFormat::kInt8Moments}) {
    for (DType gd : {DType::kF32, DType::kBF16, DType::kF16}) {
      struct Run {
        std::vector<float> p;
        std::vector<std::vector<char>> s;
        std::vector<std::vector<float>> sc;
        std::vector<uint16_t> out;
      };
      std::mt19937 rng(11);
      std::normal_distribution<float> nd(0, 1);
      std::vector<float> p0(n);
      for (float& x : p0) x = nd(rng);
      std::vector<char> g(n * DTypeSize(gd));
      for (size_t i = 0; i < n; ++i) StoreFromFloat(g.data(), gd, i, nd(rng));
      auto run = [&](KernelIsa isa) {
        Run r;
        r.p = p0;
        r.s.assign(ns, std::vector<char>(n * 4, 0));
        r.sc.assign(ns, std::vector<float>(4, 0.f));
        r.out.assign(n, 0);
        for (uint64_t t = 1; t <= 3; ++t) {
          RuleSlice sl;
          sl.p = r.p.data();
          sl.grad = g.data();
          sl.grad_dtype = gd;
          sl.out = r.out.data();
          sl.out_dtype = DType::kBF16;
          sl.n = n;
          sl.format = f;
          sl.slots = ns;
          for (int k = 0; k < ns; ++k) {
            sl.slot[k] = r.s[k].data();
            sl.scale[k] = r.sc[k].data();
            sl.nonneg[k] = c.spec.Slots()[k].nonneg;
          }
          RuleUpdate(sl, MakeRuleConsts(c.spec.kind, c.h, t, 0.5), isa);
        }
        return r;
      };
      Run ref = run(KernelIsa::kScalar);
      for (size_t i = 0; i < n; ++i)  // the output is CastParams' bf16
        ASSERT_EQ(ref.out[i], FloatToBF16(ref.p[i])) << i;
      for (KernelIsa isa : {KernelIsa::kAvx2, KernelIsa::kAvx512}) {
        if (!KernelIsaSupported(isa)) continue;
        Run r = run(isa);
        ASSERT_EQ(std::memcmp(r.p.data(), ref.p.data(), n * 4), 0)
            << c.name << " " << KernelIsaName(isa) << " "
            << StateFormatName(f) << " " << DTypeName(gd);
        for (int k = 0; k < ns; ++k) {
          ASSERT_EQ(r.s[k], ref.s[k]) << c.name << " slot " << k;
          ASSERT_EQ(r.sc[k], ref.sc[k]) << c.name << " scales " << k;
        }
        ASSERT_EQ(r.out, ref.out);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, RuleKernelTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// The generic fp32 Adam loop (amsgrad's, with the option off) rounds as the
// hand-vectorised Adam kernel: one arithmetic, two implementations.
TEST(RuleKernelAdamTest, GenericLoopEqualsTheAdamKernel) {
  const size_t n = 999;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> p(n), g(n), m(n, 0), v(n, 0);
  for (size_t i = 0; i < n; ++i) p[i] = nd(rng), g[i] = nd(rng);
  std::vector<float> p2 = p, m2 = m, v2 = v;
  RuleHyper h;
  h.weight_decay = 0.01;
  for (uint64_t t = 1; t <= 5; ++t) {
    RuleConsts c = MakeRuleConsts(RuleKind::kAdam, h, t, 0.25);
    AdamSlice a;
    a.p = p.data();
    a.m = m.data();
    a.v = v.data();
    a.grad = g.data();
    a.grad_dtype = DType::kF32;
    a.n = n;
    AdamUpdate(a, c.adam, KernelIsa::kScalar);
    RuleLoopScalar(n, p2.data(), m2.data(), v2.data(), nullptr, g.data(), c);
  }
  EXPECT_EQ(p, p2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
}

TEST(RuleSpecTest, NamesSlotsAndHyperChecks) {
  for (const char* name :
       {"adam", "adam+amsgrad", "lion", "adagrad", "sgd", "sgd+momentum",
        "adamax"}) {
    auto s = ParseRuleSpec(name);
    ASSERT_TRUE(s.ok()) << name;
    EXPECT_EQ(s->Name(), name);
  }
  auto unknown = ParseRuleSpec("nadam").status();
  EXPECT_TRUE(absl::IsInvalidArgument(unknown));
  // The message lists what is known, from the rules' own names.
  EXPECT_NE(unknown.message().find("sgd, adamax"), std::string::npos)
      << unknown;
  EXPECT_EQ(*ParseRuleKind("adamax"), RuleKind::kAdamax);
  EXPECT_FALSE(ParseRuleKind("adam+amsgrad").ok());
  RuleHyper x;
  x.eps = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(CheckRuleHyper(RuleKind::kAdamax, 0, x)));
  EXPECT_EQ(RuleSpec{RuleKind::kLion}.Slots().size(), 1u);
  EXPECT_EQ(RuleBytesPerParam(RuleSpec{RuleKind::kLion}, StateFormat::kF32),
            8.0);
  EXPECT_EQ(RuleBytesPerParam(RuleSpec(), StateFormat::kInt8Moments),
            StateBytesPerParam(StateFormat::kInt8Moments));
  RuleHyper h;
  h.nesterov = true;
  EXPECT_TRUE(absl::IsInvalidArgument(CheckRuleHyper(RuleKind::kSgd, 0, h)));
  h.momentum = 0.9;
  EXPECT_TRUE(CheckRuleHyper(RuleKind::kSgd, 0, h).ok());
  h.dampening = 0.5;
  EXPECT_TRUE(absl::IsInvalidArgument(CheckRuleHyper(RuleKind::kSgd, 0, h)));
  RuleHyper a;
  a.lr_decay = -1;
  EXPECT_TRUE(
      absl::IsInvalidArgument(CheckRuleHyper(RuleKind::kAdagrad, 1, a)));
  a = RuleHyper();
  a.beta2 = 1.0;
  absl::Status st = CheckRuleHyper(RuleKind::kLion, 2, a);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_NE(st.message().find("parameter group 2"), std::string::npos) << st;
}

OptimizerOptions RuleOptions(const TempDir& dir, RuleKind k,
                             const RuleHyper& h, StateFormat f) {
  OptimizerOptions o = TestOptimizerOptions(dir, {5000, 3000}, 2048);
  o.rule = k;
  for (auto& g : o.groups) g.hyper = h;
  o.state_format = f;
  o.pipeline.tile_elems = 1024;
  return o;
}

// Steps through the store equal the kernel over whole arrays (the
// pipeline's tiles, subgroups and formats change nothing), for each rule.
class RuleOptimizerTest
    : public ::testing::TestWithParam<std::tuple<Case, StateFormat>> {};

TEST_P(RuleOptimizerTest, StoreStepsEqualTheKernelOnWholeArrays) {
  const auto& [c, f] = GetParam();
  TempDir dir;
  auto opt = Optimizer::Open(RuleOptions(dir, c.spec.kind, c.h, f));
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ((*opt)->rule(), c.spec);
  const int ns = static_cast<int>(c.spec.Slots().size());
  // The reference: group 0 as one slice in the same format (blocks of one
  // piece restart at element 0 in both).
  const uint64_t n = 5000;
  std::vector<float> p(n);
  for (uint64_t i = 0; i < n; ++i) p[i] = InitValue(0, i);
  std::vector<std::vector<char>> s(ns, std::vector<char>(n * 4));
  std::vector<std::vector<float>> sc(ns, std::vector<float>(n / 256 + 2));
  for (int k = 0; k < ns; ++k) {  // the initial slots, as the store's
    StateRef r;
    r.format = f;
    QuantGrid grid({}, n);
    r.grid = &grid;
    r.slots = ns;
    for (int j = 0; j < ns; ++j) {
      r.slot[j] = s[j].data();
      r.scale[j] = sc[j].data();
      r.nonneg[j] = c.spec.Slots()[j].nonneg;
    }
    std::vector<float> x(n, static_cast<float>(InitialSlot(c, k)));
    EncodeSlot(r, k, n, x.data());
  }
  for (uint64_t t = 1; t <= 4; ++t) {
    std::vector<uint16_t> g0(n), g1(3000);
    for (uint64_t i = 0; i < n; ++i) g0[i] = GradValue(t, 0, i);
    for (uint64_t i = 0; i < 3000; ++i) g1[i] = GradValue(t, 1, i);
    ASSERT_TRUE((*opt)->StageGrad(0, 0, g0.data(), DType::kBF16, n).ok());
    ASSERT_TRUE((*opt)->StageGrad(1, 0, g1.data(), DType::kBF16, 3000).ok());
    auto r = (*opt)->Step(1024.0);
    ASSERT_TRUE(r.ok()) << r.status();
    for (uint64_t a = 0; a < n; a += 2048) {  // per subgroup, as the store
      RuleSlice sl;
      uint64_t m = std::min<uint64_t>(2048, n - a);
      sl.p = p.data() + a;
      sl.grad = g0.data() + a;
      sl.grad_dtype = DType::kBF16;
      sl.n = m;
      sl.format = f;
      sl.slots = ns;
      for (int k = 0; k < ns; ++k) {
        sl.slot[k] = s[k].data() + a * MomentBytes(f);
        sl.scale[k] = sc[k].data() + a / 256;
        sl.nonneg[k] = c.spec.Slots()[k].nonneg;
      }
      RuleUpdate(sl, MakeRuleConsts(c.spec.kind, c.h, t, 1.0 / 1024));
    }
  }
  std::vector<float> rp;
  std::vector<std::vector<float>> rs;
  ASSERT_TRUE((*opt)->ReadState(0, &rp, &rs).ok());
  ASSERT_EQ(rs.size(), static_cast<size_t>(ns));
  EXPECT_EQ(rp, p);
  for (int k = 0; k < ns; ++k) {
    StateRef r;
    r.format = f;
    QuantGrid grid({0, 2048, 4096}, n);  // blocks restart per subgroup
    r.grid = &grid;
    r.slots = ns;
    for (int j = 0; j < ns; ++j) {
      r.slot[j] = s[j].data();
      r.scale[j] = sc[j].data();
      r.nonneg[j] = c.spec.Slots()[j].nonneg;
    }
    std::vector<float> want(n);
    DecodeSlot(r, k, 0, n, want.data());
    EXPECT_EQ(rs[k], want) << "slot " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Rules, RuleOptimizerTest,
    ::testing::Combine(::testing::ValuesIn(Cases()),
                       ::testing::Values(StateFormat::kF32,
                                         StateFormat::kBF16Moments,
                                         StateFormat::kInt8Moments)),
    [](const auto& info) {
      std::string f = StateFormatName(std::get<1>(info.param));
      for (char& ch : f)
        if (ch == '-') ch = '_';
      return std::get<0>(info.param).name + "_" + f;
    });

// A store's rule and slots are fixed at creation: another rule, or an
// option whose slot it lacks, is refused naming both, and the store still
// opens as it was.
TEST(RuleStoreTest, RuleAndSlotsAreFixedWhenTheStoreIsCreated) {
  TempDir dir;
  RuleHyper h;
  h.lr = 1e-2;
  {
    auto opt = Optimizer::Open(
        RuleOptions(dir, RuleKind::kAdam, h, StateFormat::kF32));
    ASSERT_TRUE(opt.ok()) << opt.status();
    EXPECT_EQ((*opt)->rule().Name(), "adam");
    RuleHyper ams = h;
    ams.amsgrad = true;
    absl::Status st = (*opt)->SetHyper(1, ams);
    EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
    EXPECT_NE(st.message().find("max_exp_avg_sq"), std::string::npos) << st;
    EXPECT_FALSE((*opt)->options().groups[1].hyper.amsgrad);
  }
  {
    auto opt = Optimizer::Open(
        RuleOptions(dir, RuleKind::kLion, h, StateFormat::kF32));
    ASSERT_FALSE(opt.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(opt.status())) << opt.status();
    EXPECT_NE(opt.status().message().find("update rule adam, not lion"),
              std::string::npos)
        << opt.status();
  }
  RuleHyper ams = h;
  ams.amsgrad = true;
  auto bad = Optimizer::Open(
      RuleOptions(dir, RuleKind::kAdam, ams, StateFormat::kF32));
  EXPECT_TRUE(absl::IsFailedPrecondition(bad.status())) << bad.status();
  // Created with amsgrad: turning it off keeps vmax (as torch keeps
  // max_exp_avg_sq), and on again uses it.
  TempDir d2;
  {
    auto opt = Optimizer::Open(
        RuleOptions(d2, RuleKind::kAdam, ams, StateFormat::kF32));
    ASSERT_TRUE(opt.ok()) << opt.status();
    EXPECT_EQ((*opt)->rule().Name(), "adam+amsgrad");
    EXPECT_TRUE((*opt)->SetHyper(0, h).ok());
  }
  auto re = Optimizer::Open(
      RuleOptions(d2, RuleKind::kAdam, h, StateFormat::kF32));
  ASSERT_TRUE(re.ok()) << re.status();
  EXPECT_EQ((*re)->rule().Name(), "adam+amsgrad");
  EXPECT_TRUE((*re)->SetHyper(0, ams).ok());
  // SGD created without momentum holds no buffer: momentum is refused.
  TempDir d3;
  RuleHyper sgd;
  sgd.lr = 0.1;
  auto s = Optimizer::Open(RuleOptions(d3, RuleKind::kSgd, sgd,
                                       StateFormat::kF32));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->rule().Name(), "sgd");
  sgd.momentum = 0.9;
  EXPECT_TRUE(absl::IsFailedPrecondition((*s)->SetHyper(0, sgd)));
}

}  // namespace
}  // namespace mlpo
