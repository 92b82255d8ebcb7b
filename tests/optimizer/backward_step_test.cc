// Update during backward (Optimizer::BeginStep / GradReady / FinishStep):
// gradients handed in parameter by parameter, in a random order, while the
// step runs on its own thread, give the plain Step's parameters and state
// bit for bit; a parameter never marked ready is skipped as Step skips one
// without a gradient; a non-finite gradient discards the step whole; a
// clip discards and redoes it; a discarded step rewinds the model's memory.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "optimizer/optimizer.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

// Two groups of several parameters each, cut into subgroups of 1500 (some
// parameters span two subgroups, some subgroups hold several).
OptimizerOptions Options(const TempDir& dir) {
  OptimizerOptions o = TestOptimizerOptions(dir, {9000, 3000}, 1500);
  o.groups[0].params = {1000, 2500, 500, 4000, 1000};
  o.groups[1].params = {1200, 1800};
  return o;
}

struct ParamRef {
  int group;
  uint64_t offset, n;
};
std::vector<ParamRef> ParamsOf(const OptimizerOptions& o) {
  std::vector<ParamRef> out;
  for (int g = 0; g < static_cast<int>(o.groups.size()); ++g) {
    uint64_t at = 0;
    for (uint64_t n : o.groups[g].params) {
      out.push_back({g, at, n});
      at += n;
    }
  }
  return out;
}

std::vector<uint16_t> Grad(uint64_t t, const ParamRef& p, float poison) {
  std::vector<uint16_t> g(p.n);
  for (uint64_t i = 0; i < p.n; ++i) g[i] = GradValue(t, p.group, p.offset + i);
  if (poison != 0) g[p.n / 2] = FloatToBF16(poison);
  return g;
}

TEST(BackwardStepTest, EqualsThePlainStepWhateverOrderGradientsCome) {
  TempDir a, b;
  auto ours = Optimizer::Open(Options(a));
  auto plain = Optimizer::Open(Options(b));
  ASSERT_TRUE(ours.ok() && plain.ok());
  const std::vector<ParamRef> params = ParamsOf((*ours)->options());
  std::mt19937 rng(7);
  for (uint64_t t = 1; t <= 6; ++t) {
    // Step 3 leaves parameter 2 without a gradient; step 5 parameter 6.
    int skip = t == 3 ? 2 : t == 5 ? 6 : -1;
    std::vector<int> order(params.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int>(k);
    std::shuffle(order.begin(), order.end(), rng);
    ASSERT_TRUE((*ours)->BeginStep(1024.0).ok());
    std::vector<std::vector<uint16_t>> kept;
    for (int k : order) {
      if (k == skip) continue;
      kept.push_back(Grad(t, params[k], 0));
      ASSERT_TRUE((*ours)
                      ->BorrowGrad(params[k].group, params[k].offset,
                                   kept.back().data(), DType::kBF16,
                                   params[k].n)
                      .ok());
      ASSERT_TRUE((*ours)->GradReady(k).ok());
    }
    EXPECT_TRUE((*ours)->stepping_in_backward());
    auto r = (*ours)->FinishStep();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->step, t);
    for (size_t k = 0; k < params.size(); ++k) {
      if (static_cast<int>(k) == skip) continue;
      std::vector<uint16_t> g = Grad(t, params[k], 0);
      ASSERT_TRUE((*plain)
                      ->StageGrad(params[k].group, params[k].offset, g.data(),
                                  DType::kBF16, params[k].n)
                      .ok());
    }
    auto q = (*plain)->Step(1024.0);
    ASSERT_TRUE(q.ok()) << q.status();
    for (int g = 0; g < 2; ++g)
      EXPECT_EQ(std::memcmp((*ours)->Params(g), (*plain)->Params(g),
                            (*ours)->options().groups[g].numel * 2),
                0);
  }
  ExpectSameState(ours->get(), plain->get());
}

TEST(BackwardStepTest, RefusesWhatIsWrong) {
  TempDir b;
  auto plain = Optimizer::Open(Options(b));
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->GradReady(0).ok());  // no step running
  EXPECT_FALSE((*plain)->FinishStep().ok());
  EXPECT_FALSE((*plain)->DiscardStep(true).ok());
  ASSERT_TRUE((*plain)->BeginStep(1.0).ok());
  EXPECT_EQ((*plain)->BeginStep(1.0).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*plain)->GradReady(99).code(), absl::StatusCode::kInvalidArgument);
  // Ready without its gradient staged; then twice.
  EXPECT_EQ((*plain)->GradReady(0).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<ParamRef> ps = ParamsOf((*plain)->options());
  std::vector<uint16_t> g = Grad(1, ps[0], 0);
  ASSERT_TRUE((*plain)->StageGrad(0, 0, g.data(), DType::kBF16, ps[0].n).ok());
  ASSERT_TRUE((*plain)->GradReady(0).ok());
  absl::Status twice = (*plain)->GradReady(0);
  EXPECT_NE(twice.message().find("twice"), std::string::npos) << twice;
  auto r = (*plain)->FinishStep();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*plain)->param_steps()[0], 1u);
  EXPECT_EQ((*plain)->param_steps()[1], 0u);
  plain->reset();
  // A fresh start over a store with heads: its first step drops them,
  // which a discarded step could not give back; refused, heads kept.
  OptimizerOptions o = Options(b);
  o.fresh = true;
  auto fresh = Optimizer::Open(o);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ((*fresh)->BeginStep(1.0).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*fresh)->fresh_pending());
}

// Hands every parameter's gradient of step t in (poisoning parameter
// `poison_param` with `poison`); `kept` holds them while the step reads.
void HandIn(Optimizer* o, uint64_t t, std::vector<std::vector<uint16_t>>* kept,
            int poison_param = -1, float poison = 0, float scale = 1) {
  std::vector<ParamRef> ps = ParamsOf(o->options());
  kept->clear();
  kept->reserve(ps.size());
  for (size_t k = 0; k < ps.size(); ++k) {
    kept->push_back(Grad(t, ps[k], static_cast<int>(k) == poison_param
                                       ? poison : 0));
    if (scale != 1)
      for (uint16_t& x : kept->back())
        x = FloatToBF16(BF16ToFloat(x) * scale);
    ASSERT_TRUE(o->BorrowGrad(ps[k].group, ps[k].offset, kept->back().data(),
                              DType::kBF16, ps[k].n)
                    .ok());
    ASSERT_TRUE(o->GradReady(static_cast<int>(k)).ok());
  }
}

void StageScaled(Optimizer* o, uint64_t t, float scale) {
  std::vector<ParamRef> ps = ParamsOf(o->options());
  for (size_t k = 0; k < ps.size(); ++k) {
    std::vector<uint16_t> g = Grad(t, ps[k], 0);
    if (scale != 1)
      for (uint16_t& x : g) x = FloatToBF16(BF16ToFloat(x) * scale);
    ASSERT_TRUE(o->StageGrad(ps[k].group, ps[k].offset, g.data(), DType::kBF16,
                             ps[k].n)
                    .ok());
  }
}

void ExpectSameParams(Optimizer* a, Optimizer* b) {
  for (int g = 0; g < 2; ++g)
    EXPECT_EQ(std::memcmp(a->Params(g), b->Params(g),
                          a->options().groups[g].numel * 2),
              0)
        << "group " << g;
}

// Clipping by global norm during backward: each step runs speculatively;
// where the norm turns out above max_grad_norm it is discarded and redone
// clipped. Steps that clip and steps that do not, against the plain step.
TEST(BackwardStepTest, ClippingIsThePlainStepBitForBitRedoneWhereItClips) {
  TempDir a, b;
  OptimizerOptions o = Options(a);
  o.max_grad_norm = 40.0;
  OptimizerOptions q = Options(b);
  q.max_grad_norm = 40.0;
  auto ours = Optimizer::Open(o);
  auto plain = Optimizer::Open(q);
  ASSERT_TRUE(ours.ok() && plain.ok());
  int redone = 0;
  for (uint64_t t = 1; t <= 6; ++t) {
    // Odd steps' gradients are large (the norm clips), even ones small.
    const float scale = t % 2 ? 50.0f : 0.01f;
    ASSERT_TRUE((*ours)->BeginStep(1.0).ok());
    std::vector<std::vector<uint16_t>> kept;
    HandIn(ours->get(), t, &kept, -1, 0, scale);
    auto r = (*ours)->FinishStep();
    ASSERT_TRUE(r.ok()) << r.status();
    StageScaled(plain->get(), t, scale);
    auto p = (*plain)->Step(1.0);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(r->redone, p->clip_coef < 1) << "step " << t;
    EXPECT_EQ(r->clip_coef, p->clip_coef) << "step " << t;
    EXPECT_EQ(r->grad_norm, p->grad_norm) << "step " << t;
    redone += r->redone;
    ExpectSameParams(ours->get(), plain->get());
  }
  EXPECT_EQ(redone, 3);
  EXPECT_EQ((*ours)->redone_steps(), 3u);
  ExpectSameState(ours->get(), plain->get());
}

// A non-finite gradient discards the step whole: nothing is applied, the
// parameters are as before, and it counts as a skipped step (as the plain
// step skips one); training goes on from there.
TEST(BackwardStepTest, ANonFiniteGradientDiscardsTheStepWhole) {
  TempDir a, b;
  auto ours = Optimizer::Open(Options(a));
  auto plain = Optimizer::Open(Options(b));
  ASSERT_TRUE(ours.ok() && plain.ok());
  for (uint64_t t = 1; t <= 2; ++t) {
    ASSERT_TRUE((*ours)->BeginStep(1.0).ok());
    std::vector<std::vector<uint16_t>> kept;
    HandIn(ours->get(), t, &kept);
    ASSERT_TRUE((*ours)->FinishStep().ok());
    StageScaled(plain->get(), t, 1);
    ASSERT_TRUE((*plain)->Step(1.0).ok());
  }
  ASSERT_TRUE((*ours)->BeginStep(1.0).ok());
  std::vector<std::vector<uint16_t>> kept;
  HandIn(ours->get(), 3, &kept, 5, INFINITY);
  auto r = (*ours)->FinishStep();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->skipped);
  EXPECT_NE(r->skip_reason.find("non-finite"), std::string::npos);
  EXPECT_EQ((*ours)->step(), 2u);
  EXPECT_EQ((*ours)->skipped_steps(), 1u);
  ExpectSameParams(ours->get(), plain->get());
  ExpectSameState(ours->get(), plain->get());
  ASSERT_TRUE((*ours)->BeginStep(1.0).ok());
  HandIn(ours->get(), 3, &kept);
  ASSERT_TRUE((*ours)->FinishStep().ok());
  StageScaled(plain->get(), 3, 1);
  ASSERT_TRUE((*plain)->Step(1.0).ok());
  ExpectSameParams(ours->get(), plain->get());
  ExpectSameState(ours->get(), plain->get());
}

// The model's own memory (SetParamMemory, as the PyTorch adapter uses on
// the CPU): a step discarded part-way gives every parameter its value
// back, an edit made before it included; one discarded to be redone is
// redone from the gradients staged then, and equals the plain step.
TEST(BackwardStepTest, ADiscardedStepRewindsOrRedoesInTheModelsMemory) {
  TempDir a, b;
  auto ours = Optimizer::Open(Options(a));
  auto plain = Optimizer::Open(Options(b));
  ASSERT_TRUE(ours.ok() && plain.ok());
  std::vector<ParamRef> ps = ParamsOf((*ours)->options());
  // fp32 model tensors, one per parameter, in both.
  std::vector<std::vector<float>> mine(ps.size()), theirs(ps.size());
  for (size_t k = 0; k < ps.size(); ++k) {
    mine[k].resize(ps[k].n);
    for (uint64_t i = 0; i < ps[k].n; ++i)
      mine[k][i] = InitValue(ps[k].group, ps[k].offset + i);
    theirs[k] = mine[k];
    ASSERT_TRUE((*ours)->SetParamMemory(static_cast<int>(k), mine[k].data(),
                                        DType::kF32).ok());
    ASSERT_TRUE((*plain)->SetParamMemory(static_cast<int>(k),
                                         theirs[k].data(), DType::kF32).ok());
  }
  for (uint64_t t = 1; t <= 2; ++t) {
    ASSERT_TRUE((*ours)->BeginStep(1.0).ok());
    std::vector<std::vector<uint16_t>> kept;
    HandIn(ours->get(), t, &kept);
    ASSERT_TRUE((*ours)->FinishStep().ok());
    StageScaled(plain->get(), t, 1);
    ASSERT_TRUE((*plain)->Step(1.0).ok());
  }
  EXPECT_EQ(mine, theirs);
  // An edit between steps (as loading weights into the model would).
  mine[1][7] = 3.5f;
  theirs[1][7] = 3.5f;
  std::vector<std::vector<float>> before = mine;
  // Step 3 runs during backward, then is dropped (an exception in
  // backward, zero_grad before step): the model is as before it.
  ASSERT_TRUE((*ours)->BeginStep(1.0).ok());
  std::vector<std::vector<uint16_t>> kept;
  HandIn(ours->get(), 3, &kept);
  ASSERT_TRUE((*ours)->DiscardStep(/*redo=*/false).ok());
  EXPECT_FALSE((*ours)->stepping_in_backward());
  EXPECT_EQ((*ours)->step(), 2u);
  EXPECT_EQ(mine, before);
  // Step 3 again, discarded to be redone with other gradients (they
  // changed after they were handed in).
  ASSERT_TRUE((*ours)->BeginStep(1.0).ok());
  HandIn(ours->get(), 3, &kept);
  ASSERT_TRUE((*ours)->DiscardStep(/*redo=*/true).ok());
  StageScaled(ours->get(), 3, 2.0f);
  auto r = (*ours)->Step(1.0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->redone);
  StageScaled(plain->get(), 3, 2.0f);
  ASSERT_TRUE((*plain)->Step(1.0).ok());
  EXPECT_EQ(mine, theirs);
  EXPECT_EQ(mine[1][7] != 3.5f, true);  // (the edit was stepped from)
  ExpectSameState(ours->get(), plain->get());
  // A discard to redo followed by a call that is not a step: rewound.
  ASSERT_TRUE((*ours)->BeginStep(1.0).ok());
  HandIn(ours->get(), 4, &kept);
  before = mine;
  ASSERT_TRUE((*ours)->DiscardStep(/*redo=*/true).ok());
  ASSERT_TRUE((*ours)->Settle().ok());
  EXPECT_EQ(mine, before);
  ExpectSameState(ours->get(), plain->get());
}

// The adapter points each parameter at a copy just before handing its
// gradient in (SetParamMemory while the step runs): the step adopts from
// and writes the copy, the model's own memory keeps its values; a change
// after the parameter is ready is refused.
TEST(BackwardStepTest, AParametersMemoryMovesToACopyBeforeItIsReady) {
  TempDir a, b;
  auto ours = Optimizer::Open(Options(a));
  auto plain = Optimizer::Open(Options(b));
  ASSERT_TRUE(ours.ok() && plain.ok());
  std::vector<ParamRef> ps = ParamsOf((*ours)->options());
  std::vector<std::vector<float>> model(ps.size()), copy(ps.size()),
      theirs(ps.size());
  for (size_t k = 0; k < ps.size(); ++k) {
    model[k].resize(ps[k].n);
    for (uint64_t i = 0; i < ps[k].n; ++i)
      model[k][i] = InitValue(ps[k].group, ps[k].offset + i);
    theirs[k] = model[k];
    ASSERT_TRUE((*ours)->SetParamMemory(static_cast<int>(k), model[k].data(),
                                        DType::kF32).ok());
    ASSERT_TRUE((*plain)->SetParamMemory(static_cast<int>(k),
                                         theirs[k].data(), DType::kF32).ok());
  }
  model[2][5] = -1.25f;  // an edit the step must adopt, from the copy
  theirs[2][5] = -1.25f;
  for (uint64_t t = 1; t <= 2; ++t) {
    const std::vector<std::vector<float>> before = model;
    ASSERT_TRUE((*ours)->BeginStep(1.0).ok());
    std::vector<std::vector<uint16_t>> kept(ps.size());
    for (size_t k = 0; k < ps.size(); ++k) {
      copy[k] = model[k];
      ASSERT_TRUE((*ours)->SetParamMemory(static_cast<int>(k), copy[k].data(),
                                          DType::kF32).ok());
      kept[k] = Grad(t, ps[k], 0);
      ASSERT_TRUE((*ours)->BorrowGrad(ps[k].group, ps[k].offset,
                                      kept[k].data(), DType::kBF16, ps[k].n)
                      .ok());
      ASSERT_TRUE((*ours)->GradReady(static_cast<int>(k)).ok());
    }
    absl::Status late = (*ours)->SetParamMemory(0, model[0].data(),
                                                DType::kF32);
    EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
    auto r = (*ours)->FinishStep();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(model, before);  // never written
    StageScaled(plain->get(), t, 1);
    ASSERT_TRUE((*plain)->Step(1.0).ok());
    EXPECT_EQ(copy, theirs);
    model = copy;  // the adapter's copy-in at step()
    for (size_t k = 0; k < ps.size(); ++k)
      ASSERT_TRUE((*ours)->SetParamMemory(static_cast<int>(k),
                                          model[k].data(), DType::kF32).ok());
  }
  ExpectSameState(ours->get(), plain->get());
}

// Closing with a step running during backward never asked for: nothing of
// it is applied.
TEST(BackwardStepTest, ClosingDiscardsARunningStep) {
  TempDir a;
  OptimizerOptions o = Options(a);
  std::vector<float> p_before;
  {
    auto ours = Optimizer::Open(o);
    ASSERT_TRUE(ours.ok());
    ASSERT_TRUE((*ours)->BeginStep(1.0).ok());
    std::vector<std::vector<uint16_t>> kept;
    HandIn(ours->get(), 1, &kept);
    ASSERT_TRUE((*ours)->FinishStep().ok());
    std::vector<float> m, v;
    ASSERT_TRUE((*ours)->ReadState(0, &p_before, &m, &v).ok());
    ASSERT_TRUE((*ours)->BeginStep(1.0).ok());
    HandIn(ours->get(), 2, &kept);
  }
  auto again = Optimizer::Open(o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->step(), 1u);
  std::vector<float> p, m, v;
  ASSERT_TRUE((*again)->ReadState(0, &p, &m, &v).ok());
  EXPECT_EQ(p, p_before);
}

}  // namespace
}  // namespace mlpo
