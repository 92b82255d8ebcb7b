// Placement that follows the paths: the stripe split, water-filling against
// a double-precision reference, fractions from the bandwidth a store
// recorded, and adaptive fractions that follow a path whose cap changes
// while the optimizer steps.
#include "store/placement/stripe.h"

#include <atomic>
#include <thread>

#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "optimizer/optimizer.h"
#include "store/placement/placement.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

TEST(WaterFillTest, SharesFollowRatesUntilAPathIsFull) {
  const uint64_t kNoLimit = UINT64_MAX;
  // Room everywhere: f_k = U_k / sum U.
  auto f = WaterFill({3e9, 1e9}, {kNoLimit, kNoLimit}, 1000);
  EXPECT_NEAR(f[0], 0.75, 1e-12);
  EXPECT_NEAR(f[1], 0.25, 1e-12);
  // The fast path holds only 40% of a step: it gets 40%, the rest the others
  // share by rate (2:1).
  f = WaterFill({6e9, 2e9, 1e9}, {400, kNoLimit, kNoLimit}, 1000);
  EXPECT_NEAR(f[0], 0.4, 1e-12);
  EXPECT_NEAR(f[1], 0.4, 1e-12);
  EXPECT_NEAR(f[2], 0.2, 1e-12);
  // Nothing fits the whole step: shares follow the room.
  f = WaterFill({1, 1}, {100, 300}, 1000);
  EXPECT_NEAR(f[0], 0.25, 1e-12);
  EXPECT_NEAR(f[1], 0.75, 1e-12);
  // No rate known: equal shares.
  f = WaterFill({0, 0, 0}, {kNoLimit, kNoLimit, kNoLimit}, 10);
  for (double x : f) EXPECT_NEAR(x, 1.0 / 3, 1e-12);
}

TEST(WaterFillTest, RandomCasesMatchTheDefinition) {
  // Reference: the fractions are the unique water level L with
  // f_k = min(room_k / D, L * U_k) summing to 1 (when the room suffices).
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    size_t n = 1 + rng() % 5;
    std::vector<double> u(n);
    std::vector<uint64_t> room(n);
    const uint64_t demand = 1 << 20;
    uint64_t total_room = 0;
    for (size_t k = 0; k < n; ++k) {
      u[k] = 1e8 * (1 + rng() % 50);
      room[k] = rng() % 3 == 0 ? UINT64_MAX : (rng() % (2 * demand));
      total_room += std::min<uint64_t>(room[k], 4 * demand);
    }
    if (total_room < demand) continue;  // the room-bound case is above
    auto f = WaterFill(u, room, demand);
    double lo = 0, hi = 1;
    for (double x : u) hi = std::max(hi, 1.0 / x * 1e3);
    auto sum_at = [&](double level) {
      double s = 0;
      for (size_t k = 0; k < n; ++k) {
        double cap = room[k] == UINT64_MAX ? 1e300 : double(room[k]) / demand;
        s += std::min(cap, level * u[k]);
      }
      return s;
    };
    for (int it = 0; it < 200; ++it) {
      double mid = (lo + hi) / 2;
      (sum_at(mid) < 1 ? lo : hi) = mid;
    }
    for (size_t k = 0; k < n; ++k) {
      double cap = room[k] == UINT64_MAX ? 1e300 : double(room[k]) / demand;
      EXPECT_NEAR(f[k], std::min(cap, hi * u[k]), 1e-9) << "trial " << trial;
    }
  }
}

// Two capped paths; path 1's cap drops to a sixteenth after step 2 (what a
// shared PFS does when other jobs start): within three steps its fraction
// follows, and the state stays bit-identical to the in-memory reference.
// The estimates are a running mean (half old, half new), so three steps
// after a cut to a sixteenth path 1's estimate is about 7/16 of what it
// was and its share about 0.15. The cut is that deep so that a loaded CI
// machine, where CPU time shows up in both paths' observed rates and pulls
// the shares together, still lands well under the bound: a cut to a
// quarter (ideal 0.26 after three steps) measured 0.307 there.
TEST(AdaptivePlacementTest, FractionsFollowAChangedCapWithinThreeSteps) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {262144}, 32768);
  for (auto& pc : o.store.paths) {
    pc.fraction = 0.5;
    pc.path.read_cap = pc.path.write_cap = 40 << 20;
    pc.path.cap_burst = absl::Milliseconds(1);
  }
  o.pipeline.adaptive_placement = true;
  o.store.adaptive = 1;  // explicit fractions, adaptive asked for
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  InMemoryRef ref(o);
  std::vector<double> f1;
  for (uint64_t t = 1; t <= 6; ++t) {
    if (t == 3) {
      ASSERT_TRUE((*opt)->store()->path(1)->SetCaps(5 << 19, 5 << 19).ok());
    }
    ASSERT_TRUE(StageAll(opt->get(), t).ok());
    auto r = (*opt)->Step(1024.0);
    ASSERT_TRUE(r.ok()) << r.status();
    ref.Step(o, t, 1.0 / 1024);
    ASSERT_EQ(r->fractions.size(), 2u);
    f1.push_back(r->fractions[1]);
  }
  // Equal caps: about equal shares.
  EXPECT_NEAR(f1[1], 0.5, 0.15);
  // A sixteenth of the bandwidth: the share goes toward 0.06 (1/(1+16)).
  std::string seen;
  for (double x : f1) absl::StrAppend(&seen, " ", x);
  EXPECT_LT(f1[4], 0.30) << "after steps 3..5 at the lower cap; shares:" << seen;
  EXPECT_LT(f1[5], 0.30) << "shares:" << seen;
  EXPECT_GT(f1[5], 0.03) << "shares:" << seen;
  for (size_t g = 0; g < ref.p.size(); ++g) {
    std::vector<float> p, m, v;
    ASSERT_TRUE((*opt)->ReadState(g, &p, &m, &v).ok());
    EXPECT_EQ(0, std::memcmp(p.data(), ref.p[g].data(), p.size() * 4));
    EXPECT_EQ(0, std::memcmp(v.data(), ref.v[g].data(), v.size() * 4));
  }
  // A path opened without a cap cannot get one later: a clear error.
  TempDir d2;
  StoreOptions so = TestStoreOptions(d2, {0.5, 0.5});
  auto s = ObjectStore::Open(so);
  ASSERT_TRUE(s.ok());
  absl::Status st = (*s)->path(0)->SetCaps(1 << 20, 1 << 20);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find(so.paths[0].path.root), std::string::npos);
}

// Issue 17: explicit fractions were overridden by adaptive placement while
// the README says explicit wins. They stay as written (the same cap cut as
// above) unless `adaptive = true`; without explicit fractions the default
// adapts; a bad `adaptive` value in TOML names the key.
TEST(AdaptivePlacementTest, ExplicitFractionsStayFixedUnlessAdaptiveIsAsked) {
  for (int adaptive : {-1, 0}) {
    TempDir dir;
    OptimizerOptions o = TestOptimizerOptions(dir, {262144}, 32768);
    o.store.paths[0].fraction = 0.7;
    o.store.paths[1].fraction = 0.3;
    for (auto& pc : o.store.paths) {
      pc.path.read_cap = pc.path.write_cap = 40 << 20;
      pc.path.cap_burst = absl::Milliseconds(1);
    }
    o.store.adaptive = adaptive;
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok()) << opt.status();
    ASSERT_TRUE((*opt)->store()->path(1)->SetCaps(5 << 19, 5 << 19).ok());
    for (uint64_t t = 1; t <= 4; ++t) {
      ASSERT_TRUE(StageAll(opt->get(), t).ok());
      auto r = (*opt)->Step(1024.0);
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->fractions.size(), 2u);
      EXPECT_NEAR(r->fractions[0], 0.7, 1e-9) << "step " << t;
      EXPECT_NEAR(r->fractions[1], 0.3, 1e-9) << "step " << t;
    }
  }
  // No explicit fraction: the default adapts (the fractions move off 0.5).
  {
    TempDir dir;
    OptimizerOptions o = TestOptimizerOptions(dir, {262144}, 32768);
    for (auto& pc : o.store.paths) {
      pc.fraction = 0;
      pc.path.read_cap = pc.path.write_cap = 40 << 20;
      pc.path.cap_burst = absl::Milliseconds(1);
    }
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok()) << opt.status();
    ASSERT_TRUE((*opt)->store()->path(1)->SetCaps(5 << 19, 5 << 19).ok());
    double last = 0.5;
    for (uint64_t t = 1; t <= 4; ++t) {
      ASSERT_TRUE(StageAll(opt->get(), t).ok());
      auto r = (*opt)->Step(1024.0);
      ASSERT_TRUE(r.ok()) << r.status();
      last = r->fractions[1];
    }
    EXPECT_LT(last, 0.4);
  }
  auto bad = ParseStoreOptions("adaptive = \"yes\"\n[[path]]\nroot = \"x\"\n",
                               "/tmp");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("adaptive"), std::string::npos);
  auto good = ParseStoreOptions("adaptive = true\n[[path]]\nroot = \"x\"\n",
                                "/tmp");
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->adaptive, 1);
}

// The Placement object on its own: estimates against the definition (half
// the last interval's rate, half the estimate before), pins, degraded paths.
TEST(PlacementTest, EstimatesFollowTheRunningMeanOfIntervalRates) {
  Placement pl(2);
  EXPECT_EQ(pl.fractions(), (std::vector<double>{0.5, 0.5}));
  // Interval 1: path 0 moves 100 MB in 1 s, path 1 nothing.
  auto e = pl.UpdateEstimates({{100'000'000, 1.0}, {0, 0}});
  EXPECT_DOUBLE_EQ(e[0], 1e8);
  EXPECT_EQ(e[1], 0);
  // Unmeasured path 1: adaptation keeps the fractions as they are.
  EXPECT_EQ(pl.Adapt(e, {UINT64_MAX, UINT64_MAX}, 1000),
            (std::vector<double>{0.5, 0.5}));
  // Interval 2: path 0 at 300 MB/s, path 1 at 100 MB/s (its first).
  e = pl.UpdateEstimates({{400'000'000, 2.0}, {50'000'000, 0.5}});
  EXPECT_DOUBLE_EQ(e[0], 0.5 * 1e8 + 0.5 * 3e8);
  EXPECT_DOUBLE_EQ(e[1], 1e8);
  auto f = pl.Adapt(e, {UINT64_MAX, UINT64_MAX}, 1000);
  EXPECT_NEAR(f[0], 2.0 / 3, 1e-12);
  EXPECT_EQ(pl.fractions(), f);
  // An idle interval changes no estimate.
  EXPECT_EQ(pl.UpdateEstimates({{400'000'000, 2.0}, {50'000'000, 0.5}}), e);
  // Room bounds a share (WaterFill): path 0 holds 10% of the demand.
  f = pl.Adapt(e, {100, UINT64_MAX}, 1000);
  EXPECT_NEAR(f[0], 0.1, 1e-12);
}

TEST(PlacementTest, PinsAndDegradedPathsDecideAnObjectsSplit) {
  Placement pl(3);
  pl.SetWeights({3, 1, 0});
  std::vector<double> f;
  std::vector<bool> out;
  pl.ForObject("a", &f, &out);
  EXPECT_EQ(f, (std::vector<double>{0.75, 0.25, 0}));
  EXPECT_EQ(out, (std::vector<bool>{false, false, false}));
  ASSERT_TRUE(pl.SetObjectFractions("a", {0, 0, 2}).ok());
  pl.ForObject("a", &f, &out);
  EXPECT_EQ(f, (std::vector<double>{0, 0, 1}));
  pl.ForObject("b", &f, &out);
  EXPECT_EQ(f, (std::vector<double>{0.75, 0.25, 0}));
  absl::Status st = pl.SetObjectFractions("a", {1, 1});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("fractions of a: 2 given"), std::string::npos);
  ASSERT_TRUE(pl.SetObjectFractions("a", {}).ok());  // unpinned
  pl.ForObject("a", &f, &out);
  EXPECT_EQ(f, (std::vector<double>{0.75, 0.25, 0}));

  EXPECT_EQ(pl.Degrade(3), Placement::Degraded::kRefused);  // no such path
  EXPECT_EQ(pl.Degrade(0), Placement::Degraded::kNow);
  EXPECT_EQ(pl.Degrade(0), Placement::Degraded::kAlready);
  EXPECT_EQ(pl.Degrade(1), Placement::Degraded::kNow);
  // The last healthy path stays in: there is nowhere else to go.
  EXPECT_EQ(pl.Degrade(2), Placement::Degraded::kRefused);
  EXPECT_EQ(pl.degraded_paths(), (std::vector<bool>{true, true, false}));
  EXPECT_TRUE(pl.degraded(1));
  EXPECT_FALSE(pl.degraded(2));
  EXPECT_FALSE(pl.degraded(7));
  pl.ForObject("b", &f, &out);
  EXPECT_EQ(out, (std::vector<bool>{true, true, false}));
}

// Commits read the split while the pipeline adapts it once a step: every
// split read is one of the fraction vectors that were in use (TSan checks
// the locking in its build).
TEST(PlacementTest, ReadersSeeWholeFractionVectorsWhileItAdapts) {
  Placement pl(2);
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    std::vector<double> f;
    std::vector<bool> out;
    while (!stop) {
      pl.ForObject("x", &f, &out);
      if (std::abs(f[0] + f[1] - 1) > 1e-9) ++torn;
    }
  });
  for (int i = 1; i <= 2000; ++i)
    pl.Adapt({double(i), double(2001 - i)}, {UINT64_MAX, UINT64_MAX}, 1 << 20);
  stop = true;
  reader.join();
  EXPECT_EQ(torn, 0);
  EXPECT_NEAR(pl.fractions()[0], 2000.0 / 2001, 1e-12);
}

TEST(StripeTest, SharesFollowFractionsInPagesAndSkipExcludedPaths) {
  std::vector<double> f = NormaliseFractions({2, 1, 1});
  EXPECT_DOUBLE_EQ(f[0], 0.5);
  auto b = SplitBytes(400 * 4096, f);
  EXPECT_EQ(b, (std::vector<uint64_t>{200 * 4096, 100 * 4096, 100 * 4096}));
  b = SplitBytes(400 * 4096, f, {true, false, false});
  EXPECT_EQ(b, (std::vector<uint64_t>{0, 200 * 4096, 200 * 4096}));
  b = SplitBytes(400 * 4096, f, {false, false, true});
  EXPECT_EQ(b[2], 0u);
  EXPECT_EQ(b[0] + b[1], 400u * 4096);
  EXPECT_EQ(b[0] % 4096, 0u);
  b = SplitBytes(4096, f, {true, true, true});
  EXPECT_EQ(b, (std::vector<uint64_t>{0, 0, 0}));
  // Bad weights count as zero; all zero gives equal shares.
  f = NormaliseFractions({std::nan(""), -1, 0});
  EXPECT_DOUBLE_EQ(f[0], 1.0 / 3);
  f = NormaliseFractions({std::nan(""), 1, 3});
  EXPECT_DOUBLE_EQ(f[0], 0);
  EXPECT_DOUBLE_EQ(f[2], 0.75);
}

// A store opened without fractions stripes by the mixed bandwidth `mlpo
// profile --store` recorded; explicit fractions win; observed rates are
// estimated from the paths' counters.
TEST(PlacementTest, RecordedBandwidthSetsTheFractionsWhenNoneAreGiven) {
  TempDir dir;
  StoreOptions o = TestStoreOptions(dir, {0, 0});
  {
    auto s = ObjectStore::Open(o);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->placement()->fractions(), (std::vector<double>{0.5, 0.5}));
    ASSERT_TRUE((*s)->SetAttribute(kBandwidthAttribute,
                                   R"([{"path":"a","mixed_bps":3e9},)"
                                   R"({"path":"b","mixed_bps":1e9}])")
                    .ok());
  }
  auto s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->placement()->fractions(), (std::vector<double>{0.75, 0.25}));
  ASSERT_TRUE((*s)->Declare("w", TestLayout(100000)).ok());
  ASSERT_TRUE(CommitFilled(s->get(), "w", 1).ok());
  auto rec = (*s)->GetVersion("w", 0);
  uint64_t per[2] = {0, 0};
  for (auto& e : rec->extents) per[e.path] += e.length;
  EXPECT_NEAR(static_cast<double>(per[0]) / (per[0] + per[1]), 0.75, 0.01);
  auto est = (*s)->UpdateBandwidthEstimates();
  ASSERT_EQ(est.size(), 2u);
  EXPECT_GT(est[0], 0);
  EXPECT_GT(est[1], 0);
  s->reset();
  // Explicit fractions win over the recorded figures.
  o.paths[0].fraction = 1;
  o.paths[1].fraction = 1;
  s = ObjectStore::Open(o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->placement()->fractions(), (std::vector<double>{0.5, 0.5}));
}

}  // namespace
}  // namespace mlpo
