// torch.optim semantics of the Optimizer, each against a double-precision
// reference loop written here (not the kernel): a parameter with no
// gradient is skipped with its own step count, a fresh start leaves the
// store's tags alone, and the model's memory is authoritative (edits made
// between steps become the master).
#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "optimizer/optimizer.h"
#include "store/fs/fault_injection_fs.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

constexpr double kLr = 1e-2, kB1 = 0.9, kB2 = 0.999, kEps = 1e-8, kWd = 0.01;

// torch.optim.AdamW in double with this file's hyperparameters.
struct DoubleRef : DoubleAdamW {
  explicit DoubleRef(const std::vector<uint64_t>& sizes)
      : DoubleAdamW(sizes, kLr, kB1, kB2, kEps, kWd) {}
};

OptimizerOptions Options(const TempDir& dir, const std::vector<uint64_t>& sizes,
                         DType param_dtype) {
  uint64_t n = 0;
  for (uint64_t s : sizes) n += s;
  OptimizerOptions o = TestOptimizerOptions(dir, {n}, 1500);
  o.groups[0].params = sizes;
  o.groups[0].hyper = RuleHyper{kLr, kB1, kB2, kEps, kWd, AdamMode::kAdamW};
  o.grad_dtype = DType::kF32;
  o.param_dtype = param_dtype;
  return o;
}

// Stages (copies) the gradients of the active parameters, or lends them
// (BorrowGrad: the step reads `g` itself).
absl::Status StageSome(Optimizer* opt, const std::vector<float>& g,
                       const std::vector<uint64_t>& bounds,
                       const std::vector<bool>& active, bool borrow = false) {
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    if (!active[k]) continue;
    auto stage = borrow ? &Optimizer::BorrowGrad : &Optimizer::StageGrad;
    absl::Status s = (opt->*stage)(0, bounds[k], g.data() + bounds[k],
                                   DType::kF32, bounds[k + 1] - bounds[k]);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void ExpectNear(Optimizer* opt, const DoubleRef& ref, const char* what) {
  std::vector<float> p, m, v;
  ASSERT_TRUE(opt->ReadState(0, &p, &m, &v).ok());
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_NEAR(p[i], ref.p[i], 1e-5 * (1 + std::fabs(ref.p[i]))) << what << " p " << i;
    ASSERT_NEAR(m[i], ref.m[i], 1e-6 * (1 + std::fabs(ref.m[i]))) << what << " m " << i;
    ASSERT_NEAR(v[i], ref.v[i], 1e-6 * (1 + std::fabs(ref.v[i]))) << what << " v " << i;
  }
}

// Parameters spanning subgroups (1500 elements each): 1000 | 3000 | 500.
const std::vector<uint64_t> kSizes = {1000, 3000, 500};

TEST(ParamSemanticsTest, ParametersWithoutGradientsAreSkippedWithTheirOwnSteps) {
  TempDir dir;
  OptimizerOptions o = Options(dir, kSizes, DType::kBF16);
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  DoubleRef ref(kSizes);
  // Which parameters have a gradient at steps 1..6.
  std::vector<std::vector<bool>> plan = {
      {1, 1, 1}, {1, 0, 1}, {1, 0, 1}, {1, 1, 1}, {0, 1, 0}, {1, 1, 1}};
  for (uint64_t t = 1; t <= plan.size(); ++t) {
    std::vector<float> g = UnscaledGrads(t, ref.p.size());
    std::vector<float> p0, m0, v0;
    ASSERT_TRUE((*opt)->ReadState(0, &p0, &m0, &v0).ok());
    // Odd steps lend the gradients instead of copying them.
    ASSERT_TRUE(StageSome(opt->get(), g, ref.bounds, plan[t - 1], t % 2).ok());
    auto r = (*opt)->Step();
    ASSERT_TRUE(r.ok()) << r.status();
    ref.Step(g, plan[t - 1]);
    ExpectNear(opt->get(), ref, "after a step");
    std::vector<float> p1, m1, v1;
    ASSERT_TRUE((*opt)->ReadState(0, &p1, &m1, &v1).ok());
    for (size_t k = 0; k < kSizes.size(); ++k) {
      if (plan[t - 1][k]) continue;
      for (uint64_t i = ref.bounds[k]; i < ref.bounds[k + 1]; ++i) {
        ASSERT_TRUE(p1[i] == p0[i] && m1[i] == m0[i] && v1[i] == v0[i])
            << "skipped parameter " << k << " changed at step " << t;
      }
    }
    EXPECT_EQ((*opt)->param_steps(), ref.steps) << "step " << t;
    if (t == 3) {
      ASSERT_TRUE((*opt)->Tag("three").ok());
    }
  }
  EXPECT_EQ((*opt)->step(), 6u);
  // Step counts are part of the state: a reopen and a restore bring them.
  opt->reset();
  opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ((*opt)->param_steps(), ref.steps);
  ASSERT_TRUE((*opt)->Restore("three").ok());
  EXPECT_EQ((*opt)->param_steps(), (std::vector<uint64_t>{3, 1, 3}));
  // No gradient at all: nothing happens, and it is not an overflow.
  auto r = (*opt)->Step();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->skipped);
  EXPECT_EQ((*opt)->step(), 3u);
  EXPECT_EQ((*opt)->skipped_steps(), 0u);
}

TEST(ParamSemanticsTest, AFreshStartBeginsAtStepZeroAndKeepsEveryTag) {
  TempDir dir;
  OptimizerOptions o = Options(dir, kSizes, DType::kBF16);
  std::vector<bool> all = {1, 1, 1};
  std::vector<float> tagged_p;
  {
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok());
    for (uint64_t t = 1; t <= 3; ++t) {
      ASSERT_TRUE(StageSome(opt->get(), UnscaledGrads(t, 4500), DoubleRef(kSizes).bounds, all).ok());
      ASSERT_TRUE((*opt)->Step().ok());
    }
    ASSERT_TRUE((*opt)->Tag("old").ok());
    std::vector<float> m, v;
    ASSERT_TRUE((*opt)->ReadState(0, &tagged_p, &m, &v).ok());
    ASSERT_TRUE(StageSome(opt->get(), UnscaledGrads(4, 4500), DoubleRef(kSizes).bounds, all).ok());
    ASSERT_TRUE((*opt)->Step().ok());
  }
  o.fresh = true;
  {
    // Opened fresh and closed without a step: nothing changes.
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok()) << opt.status();
    EXPECT_EQ((*opt)->step(), 0u);
    std::vector<float> p, m, v;
    ASSERT_TRUE((*opt)->ReadState(0, &p, &m, &v).ok());
    EXPECT_EQ(p[7], InitValue(0, 7));
    EXPECT_EQ(m[7], 0.f);
  }
  o.fresh = false;
  {
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok()) << opt.status();
    EXPECT_EQ((*opt)->step(), 4u) << "a fresh open that never stepped dropped the run";
  }
  o.fresh = true;
  DoubleRef ref(kSizes);
  {
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok());
    std::vector<float> g = UnscaledGrads(1, 4500);
    ASSERT_TRUE(StageSome(opt->get(), g, ref.bounds, all).ok());
    auto r = (*opt)->Step();
    ASSERT_TRUE(r.ok()) << r.status();
    ref.Step(g, all);
    EXPECT_EQ((*opt)->step(), 1u);
    EXPECT_EQ((*opt)->param_steps(), (std::vector<uint64_t>{1, 1, 1}));
    ExpectNear(opt->get(), ref, "first step of a fresh run");
    // The old run's tag still loads, bit for bit.
    ASSERT_TRUE((*opt)->Restore("old").ok());
    EXPECT_EQ((*opt)->step(), 3u);
    std::vector<float> p, m, v;
    ASSERT_TRUE((*opt)->ReadState(0, &p, &m, &v).ok());
    EXPECT_EQ(p, tagged_p);
  }
  // A fresh start's tag before any step stores the initial state as step
  // 0: restoring it is a start from the initial state again.
  {
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok());
    ASSERT_TRUE((*opt)->Tag("start").ok());
    ASSERT_TRUE((*opt)->Restore("old").ok());
    EXPECT_EQ((*opt)->step(), 3u);
    ASSERT_TRUE((*opt)->Restore("start").ok());
    EXPECT_EQ((*opt)->step(), 0u);
    std::vector<float> p, m, v;
    ASSERT_TRUE((*opt)->ReadState(0, &p, &m, &v).ok());
    EXPECT_EQ(p[100], InitValue(0, 100));
    EXPECT_EQ(v[100], 0.f);
  }
}

// A Tag before the first step stores the initial state as step 0 (it was
// kept nowhere: restoring such a tag after training gave back whatever
// init_params said then, in the adapter the trained parameters). Restoring
// it gives the parameters the tag was taken with, a reopen resumes them,
// edits after it are adopted into step 0, and a Tag that fails to write
// is an error that leaves nothing taken for stored.
TEST(ParamSemanticsTest, ATagBeforeTheFirstStepStoresTheInitialState) {
  TempDir dir;
  FaultInjectionFileSystem fsys;
  OptimizerOptions o = Options(dir, kSizes, DType::kF32);
  o.store.fs = &fsys;
  // init_params reads a vector the test changes, as the adapter's does
  // (the model's tensors; zeros once the first step dropped them).
  auto init = std::make_shared<std::vector<float>>();
  for (uint64_t i = 0; i < 4500; ++i) init->push_back(InitValue(0, i));
  o.init_params = [init](int, uint64_t off, float* dst, uint64_t n) {
    std::memcpy(dst, init->data() + off, n * sizeof(float));
  };
  const std::vector<float> first = *init;
  std::vector<bool> all = {1, 1, 1};
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_FALSE((*opt)->state_stored());
  // Every path is full: the tag is an error, nothing taken for stored.
  fsys.FailWhile(FaultInjectionFileSystem::Op::kWrite, ENOSPC,
                 dir.path());
  absl::Status bad = (*opt)->Tag("zero");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("step 0"), absl::string_view::npos) << bad;
  EXPECT_FALSE((*opt)->state_stored());
  EXPECT_EQ((*opt)->store()->Tags().count("zero"), 0u);
  fsys.ClearFaults();
  ASSERT_TRUE((*opt)->Tag("zero").ok());
  EXPECT_TRUE((*opt)->state_stored());
  EXPECT_EQ((*opt)->step(), 0u);
  std::fill(init->begin(), init->end(), 0.f);  // gone, as after a step
  DoubleRef ref(kSizes);
  for (uint64_t t = 1; t <= 2; ++t) {
    std::vector<float> g = UnscaledGrads(t, 4500);
    ASSERT_TRUE(StageSome(opt->get(), g, ref.bounds, all).ok());
    ASSERT_TRUE((*opt)->Step().ok());
    ref.Step(g, all);
  }
  ExpectNear(opt->get(), ref, "two steps from the tagged state");
  ASSERT_TRUE((*opt)->Restore("zero").ok());
  EXPECT_EQ((*opt)->step(), 0u);
  EXPECT_TRUE((*opt)->state_stored());
  EXPECT_EQ((*opt)->param_steps(), (std::vector<uint64_t>{0, 0, 0}));
  std::vector<float> p, m, v;
  ASSERT_TRUE((*opt)->ReadState(0, &p, &m, &v).ok());
  EXPECT_EQ(p, first) << "the tag gives back the parameters it was taken with";
  EXPECT_EQ(m, std::vector<float>(4500, 0.f));
  EXPECT_EQ(v, std::vector<float>(4500, 0.f));
  // An edit at step 0 once it is stored: adopted into step 0.
  std::vector<float> model(first.begin(), first.begin() + 1000);
  model[3] = 0.5f;
  ASSERT_TRUE((*opt)->SetParamMemory(0, model.data(), DType::kF32).ok());
  ASSERT_TRUE((*opt)->AdoptEdits({0}).ok());
  ASSERT_TRUE((*opt)->ReadState(0, &p, &m, &v).ok());
  EXPECT_EQ(p[3], 0.5f);
  EXPECT_EQ((*opt)->step(), 0u);
  ASSERT_TRUE((*opt)->SetParamMemory(0, nullptr, DType::kF32).ok());
  ASSERT_TRUE((*opt)->Tag("zero-edited").ok());
  // A reopen (not fresh) resumes step 0's stored state.
  opt->reset();
  opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ((*opt)->step(), 0u);
  EXPECT_TRUE((*opt)->state_stored());
  ASSERT_TRUE((*opt)->ReadState(0, &p, &m, &v).ok());
  EXPECT_EQ(p[3], 0.5f);
  EXPECT_EQ(p[4], first[4]);
  // From the tag again, one step equals the first step from the start.
  ASSERT_TRUE((*opt)->Restore("zero").ok());
  DoubleRef again(kSizes);
  std::vector<float> g = UnscaledGrads(1, 4500);
  ASSERT_TRUE(StageSome(opt->get(), g, again.bounds, all).ok());
  ASSERT_TRUE((*opt)->Step().ok());
  again.Step(g, all);
  ExpectNear(opt->get(), again, "one step from the restored tag");
  // A fresh open stores nothing until its own first step or tag.
  opt->reset();
  o.fresh = true;
  opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_FALSE((*opt)->state_stored());
  ASSERT_TRUE((*opt)->Tag("fresh-zero").ok());
  // A tag cut short by a kill: one object's step 0 written, not the rest.
  // A reopen takes it for nothing stored, and the first step starts from
  // init_params, not from that object's leftover.
  ASSERT_TRUE((*opt)->store()->ResetHeads().ok());
  {
    Lease l = *(*opt)->store()->Blank((*opt)->subgroups()[0].object);
    std::memset(l->data(), 0, l->size());
    std::fill_n(l->Section<float>("p"), 10, 9.0f);
    ASSERT_TRUE((*opt)->store()->Commit(l, 0).get().ok());
  }
  opt->reset();
  o.fresh = false;
  *init = first;
  opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ((*opt)->step(), 0u);
  EXPECT_FALSE((*opt)->state_stored()) << "a part of step 0 is not step 0";
  DoubleRef fresh(kSizes);
  ASSERT_TRUE(StageSome(opt->get(), g, fresh.bounds, all).ok());
  ASSERT_TRUE((*opt)->Step().ok());
  fresh.Step(g, all);
  ExpectNear(opt->get(), fresh, "the first step after a cut-short tag");
}

TEST(ParamSemanticsTest, TheModelsMemoryIsTheMaster) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dt));
    TempDir dir;
    OptimizerOptions o = Options(dir, kSizes, dt);
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok());
    DoubleRef ref(kSizes);
    // The model: one tensor per parameter, in the model dtype.
    size_t es = DTypeSize(dt);
    std::vector<std::vector<char>> model;
    for (size_t k = 0; k < kSizes.size(); ++k) {
      model.emplace_back(kSizes[k] * es);
      for (uint64_t i = 0; i < kSizes[k]; ++i)
        StoreFromFloat(model[k].data(), dt, i, InitValue(0, ref.bounds[k] + i));
      ASSERT_TRUE((*opt)->SetParamMemory(k, model[k].data(), dt).ok());
    }
    std::vector<bool> all = {1, 1, 1};
    auto step = [&](uint64_t t) {
      std::vector<float> g = UnscaledGrads(t, 4500);
      ASSERT_TRUE(StageSome(opt->get(), g, ref.bounds, all).ok());
      ASSERT_TRUE((*opt)->Step().ok());
      ref.Step(g, all);
    };
    step(1);
    // The step wrote the model's tensors.
    for (size_t k = 0; k < kSizes.size(); ++k)
      for (uint64_t i = 0; i < kSizes[k]; i += 97)
        ASSERT_NEAR(LoadAsFloat(model[k].data(), dt, i), ref.p[ref.bounds[k] + i],
                    dt == DType::kF32 ? 1e-5 : 1e-2)
            << "parameter " << k << " element " << i;
    // Edits between steps (a clamp of one element, a re-initialised tensor)
    // become the master; the rest keeps the master's own precision.
    StoreFromFloat(model[1].data(), dt, 5, 0.5f);
    ref.p[ref.bounds[1] + 5] = 0.5;
    for (uint64_t i = 0; i < kSizes[2]; ++i) {
      StoreFromFloat(model[2].data(), dt, i, 0.25f);
      ref.p[ref.bounds[2] + i] = 0.25;
    }
    step(2);
    ExpectNear(opt->get(), ref, "a step after edits");
    // Edits written without a step (before a checkpoint).
    StoreFromFloat(model[0].data(), dt, 3, -0.75f);
    ref.p[3] = -0.75;
    ASSERT_TRUE((*opt)->AdoptEdits({0}).ok());
    EXPECT_EQ((*opt)->step(), 2u);
    ExpectNear(opt->get(), ref, "edits adopted without a step");
    // Overrides (memory the optimizer cannot read, e.g. a device's).
    ASSERT_TRUE((*opt)->SetParamMemory(0, nullptr, dt).ok());
    float two = 2.0f;
    ASSERT_TRUE((*opt)->OverrideMasters(0, 10, &two, DType::kF32, 1).ok());
    ref.p[10] = 2.0;
    ASSERT_TRUE((*opt)->AdoptEdits({}).ok());
    ExpectNear(opt->get(), ref, "an override adopted");
    step(3);
    ExpectNear(opt->get(), ref, "a step after an override");
  }
}

TEST(ParamSemanticsTest, BadParameterListsAreRefused) {
  TempDir dir;
  OptimizerOptions o = Options(dir, kSizes, DType::kBF16);
  o.groups[0].params = {1000, 3000};
  auto bad = Optimizer::Open(o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("4000 elements, the group 4500"),
            std::string::npos) << bad.status();
  o.groups[0].params = {1000, 0, 3500};
  EXPECT_EQ(Optimizer::Open(o).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = Options(dir, kSizes, DType::kBF16);
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok());
  int x = 0;
  EXPECT_EQ((*opt)->SetParamMemory(3, &x, DType::kF32).code(),
            absl::StatusCode::kInvalidArgument);
  float f = 1;
  EXPECT_EQ((*opt)->OverrideMasters(0, 4500, &f, DType::kF32, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*opt)->AdoptEdits({7}).code(), absl::StatusCode::kOk)
      << "step 0: nothing is stored yet, the first step (or Tag) takes edits";
  auto fill = [](const Subgroup&, float*, float* const*) {
    return absl::OkStatus();
  };
  EXPECT_EQ((*opt)->ImportState(2, fill, {1, 3, 2}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*opt)->step(), 0u);
  // Imported step counts are kept.
  ASSERT_TRUE((*opt)->ImportState(3, fill, {1, 3, 2}).ok());
  EXPECT_EQ((*opt)->param_steps(), (std::vector<uint64_t>{1, 3, 2}));
}

}  // namespace
}  // namespace mlpo

namespace mlpo {
namespace {

TEST(ParamSemanticsTest, LookingForEditsKeepsTheDramTierWarm) {
  TempDir dir;
  OptimizerOptions o = Options(dir, kSizes, DType::kF32);
  o.store.cache_percent = 100;  // durability "step": clean cached heads
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  DoubleRef ref(kSizes);
  std::vector<std::vector<float>> model;
  for (size_t k = 0; k < kSizes.size(); ++k) {
    model.emplace_back(ref.p.begin() + ref.bounds[k],
                       ref.p.begin() + ref.bounds[k + 1]);
    ASSERT_TRUE((*opt)->SetParamMemory(k, model[k].data(), DType::kF32).ok());
  }
  std::vector<bool> all = {1, 1, 1};
  for (uint64_t t = 1; t <= 2; ++t) {
    ASSERT_TRUE(StageSome(opt->get(), UnscaledGrads(t, 4500), ref.bounds, all).ok());
    ASSERT_TRUE((*opt)->Step().ok());
  }
  // Nothing was edited: every checkout goes back to the tier, and the next
  // step is served from DRAM entirely.
  ASSERT_TRUE((*opt)->AdoptEdits({0, 1, 2}).ok());
  ASSERT_TRUE(StageSome(opt->get(), UnscaledGrads(3, 4500), ref.bounds, all).ok());
  auto r = (*opt)->Step();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->cache_hits, (*opt)->subgroups().size());
  EXPECT_EQ(r->bytes_read, 0u);
}

}  // namespace
}  // namespace mlpo
