#include "optimizer/optimizer.h"
#include "store/admin/verify.h"

#include <cmath>
#include <cstring>
#include <thread>

#include "gtest/gtest.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

void ExpectStateEquals(Optimizer* opt, const InMemoryRef& ref,
                       const std::string& what) {
  for (size_t g = 0; g < ref.p.size(); ++g) {
    std::vector<float> p, m, v;
    ASSERT_TRUE(opt->ReadState(g, &p, &m, &v).ok());
    uint64_t n = ref.p[g].size();
    if (n == 0) continue;
    EXPECT_EQ(0, std::memcmp(p.data(), ref.p[g].data(), n * 4))
        << what << " group " << g << " p";
    EXPECT_EQ(0, std::memcmp(m.data(), ref.m[g].data(), n * 4))
        << what << " group " << g << " m";
    EXPECT_EQ(0, std::memcmp(v.data(), ref.v[g].data(), n * 4))
        << what << " group " << g << " v";
  }
}

uint64_t StateBytes(ObjectStore* s) {
  uint64_t n = 0;
  for (auto& obj : s->List()) n += obj.layout.total_bytes();
  return n;
}

class PipelineParityTest : public ::testing::TestWithParam<int> {};

TEST_P(PipelineParityTest, StepsOverTwoPathStoreEqualInMemoryKernelBitForBit) {
  TempDir dir;
  // Group 1 is empty; subgroups never span groups; 20000 does not divide.
  OptimizerOptions o = TestOptimizerOptions(dir, {100003, 0, 54321}, 20000);
  o.pipeline.prefetch_depth = GetParam();
  o.pipeline.max_commits_in_flight = std::max(1, GetParam() / 2);
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ((*opt)->subgroups().size(), 6u + 3u);
  InMemoryRef ref(o);
  for (uint64_t t = 1; t <= 4; ++t) {
    ASSERT_TRUE(StageAll(opt->get(), t).ok());
    auto r = (*opt)->Step(1024.0);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(r->skipped);
    EXPECT_EQ(r->step, t);
    ref.Step(o, t, 1.0 / 1024);
    // Alternating order: forward on odd steps, backward on even ones.
    int n = static_cast<int>((*opt)->subgroups().size());
    ASSERT_EQ(r->order.size(), static_cast<size_t>(n));
    for (int k = 0; k < n; ++k)
      EXPECT_EQ(r->order[k], t % 2 == 1 ? k : n - 1 - k);
    EXPECT_EQ(r->params, 154324u);
    for (auto& pb : r->paths) {
      EXPECT_GT(pb.written, 0u) << pb.root;
      if (t > 1) {
        EXPECT_GT(pb.read, 0u) << pb.root;
      }
    }
    for (size_t g = 0; g < 3; ++g) {
      if (ref.out[g].empty()) continue;  // the empty group has no params
      EXPECT_EQ(0, std::memcmp((*opt)->Params(g), ref.out[g].data(),
                               ref.out[g].size() * 2))
          << "params of group " << g << " after step " << t;
    }
  }
  ExpectStateEquals(opt->get(), ref, "after 4 steps");
  EXPECT_EQ((*opt)->step(), 4u);
  opt->reset();
  // Reopen: the step number comes back from the store.
  auto again = Optimizer::Open(o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->step(), 4u);
  ExpectStateEquals(again->get(), ref, "after reopen");
}

INSTANTIATE_TEST_SUITE_P(PrefetchDepth, PipelineParityTest,
                         ::testing::Values(1, 2, 4, 8));

// The DRAM tier changes what is read, never what is computed: with a cache
// of half the state the steps stay bit-identical to the in-memory
// reference, and from the second step on the subgroups updated last are
// served from DRAM (alternating order), so fewer bytes are read.
// The device ends through the host backend (the same code a GPU runs, with
// memcpy for copies): gradients staged from "device" memory and new
// parameters copied to "device" buffers by the device sink give exactly the
// in-memory reference's parameters, and the stage and staging buffers are
// registered with the backend.
TEST(DeviceEndsTest, HostBackendThroughTheDevicePathsMatchesTheReference) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {100003, 0, 54321}, 20000);
  auto backend = CreateHostBackend();
  std::vector<std::vector<uint16_t>> device_params(3);
  std::vector<void*> dest;
  for (size_t g = 0; g < 3; ++g) {
    device_params[g].assign(std::max<uint64_t>(1, o.groups[g].numel), 0);
    dest.push_back(device_params[g].data());
  }
  auto sink = DeviceParamSink::Create(backend.get(), dest, DType::kBF16, 20000);
  ASSERT_TRUE(sink.ok()) << sink.status();
  o.param_sink = sink->get();
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  ASSERT_TRUE((*opt)->RegisterDevice(backend.get()).ok());
  // Stage: 2 B per element of 154324, plus two 20000-element staging buffers.
  EXPECT_EQ(backend->registered_bytes(),
            (100003u + 54321u) * 2 + 2u * 20000 * 2);
  InMemoryRef ref(o);
  for (uint64_t t = 1; t <= 3; ++t) {
    for (size_t g = 0; g < 3; ++g) {
      uint64_t n = o.groups[g].numel;
      std::vector<uint16_t> grad(n);  // "device memory"
      for (uint64_t i = 0; i < n; ++i) grad[i] = GradValue(t, g, i);
      ASSERT_TRUE((*opt)->StageGradFromDevice(backend.get(), g, 0, grad.data(),
                                               DType::kBF16, n).ok());
    }
    auto r = (*opt)->Step(1024.0);
    ASSERT_TRUE(r.ok()) << r.status();
    ref.Step(o, t, 1.0 / 1024);
    for (size_t g = 0; g < 3; ++g) {
      if (ref.out[g].empty()) continue;
      EXPECT_EQ(0, std::memcmp(device_params[g].data(), ref.out[g].data(),
                               ref.out[g].size() * 2))
          << "group " << g << " step " << t;
    }
  }
  EXPECT_EQ((*sink)->bytes_copied(), 3u * (100003u + 54321u) * 2);
  EXPECT_EQ((*opt)->Params(0), nullptr);  // not kept on the host
  // Bad input: a sink of another dtype, a missing destination.
  opt->reset();
  OptimizerOptions bad = o;
  bad.param_dtype = DType::kF16;
  EXPECT_EQ(Optimizer::Open(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(DeviceParamSink::Create(backend.get(), {nullptr}, DType::kBF16,
                                       10).ok());
}

TEST(OptimizerCacheTest, HalfTheStateCachedIsBitIdenticalAndReadsLess) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {100003, 0, 54321}, 20000);
  o.store.cache_percent = 50;
  o.pipeline.prefetch_depth = 2;
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  InMemoryRef ref(o);
  const uint64_t state_bytes = StateBytes((*opt)->store());
  for (uint64_t t = 1; t <= 5; ++t) {
    ASSERT_TRUE(StageAll(opt->get(), t).ok());
    auto r = (*opt)->Step(1024.0);
    ASSERT_TRUE(r.ok()) << r.status();
    ref.Step(o, t, 1.0 / 1024);
    if (t >= 3) {
      // At least a third of the state comes from DRAM (half fits; the
      // prefetch window takes some of what would hit).
      EXPECT_GE(r->cache_hit_bytes * 3, state_bytes) << "step " << t;
      EXPECT_LE(r->bytes_read + r->cache_hit_bytes, state_bytes + (1 << 20));
    }
    EXPECT_LE((*opt)->store()->cache_stats().cached_bytes,
              (*opt)->store()->cache_stats().budget_bytes);
  }
  ExpectStateEquals(opt->get(), ref, "after 5 cached steps");
  opt->reset();
  // What the disk holds is the same state: reopened without a cache.
  o.store.cache_percent = 0;
  auto again = Optimizer::Open(o);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectStateEquals(again->get(), ref, "reopened without the cache");
}

// Durability "tag" with the DRAM tier: versions stay dirty in DRAM until a
// tag or close writes them back, so steps write less; the numbers stay
// bit-identical, a tag covers the dirty versions, and a clean close loses
// nothing.
TEST(OptimizerCacheTest, WriteBackSavesWritesAndLosesNothing) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {100003, 0, 54321}, 20000);
  o.store.durability = Durability::kTag;
  o.store.cache_percent = 50;
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  InMemoryRef ref(o);
  const uint64_t state_bytes = StateBytes((*opt)->store());
  for (uint64_t t = 1; t <= 4; ++t) {
    ASSERT_TRUE(StageAll(opt->get(), t).ok());
    auto r = (*opt)->Step(1024.0);
    ASSERT_TRUE(r.ok()) << r.status();
    ref.Step(o, t, 1.0 / 1024);
    if (t >= 2) {
      EXPECT_LT(r->bytes_written * 10, state_bytes * 9) << "step " << t;
      EXPECT_GT(r->cache_hit_bytes, 0u) << "step " << t;
    }
  }
  CacheStats cs = (*opt)->store()->cache_stats();
  EXPECT_GT(cs.dirty_entries, 0u);
  EXPECT_GT(cs.writes_saved, 0u);
  // A tag writes every dirty version back first.
  {
    auto tagged = (*opt)->store()->Tag("after4");
    ASSERT_TRUE(tagged.ok()) << tagged.ToString();
  }
  EXPECT_EQ((*opt)->store()->cache_stats().dirty_entries, 0u);
  auto verified = Verify(*(*opt)->store(), "after4");
  ASSERT_TRUE(verified.ok());
  EXPECT_TRUE(verified->bad.empty());
  ExpectStateEquals(opt->get(), ref, "after the tag");
  // One more step, then a clean close: written back on close.
  ASSERT_TRUE(StageAll(opt->get(), 5).ok());
  ASSERT_TRUE((*opt)->Step(1024.0).ok());
  ref.Step(o, 5, 1.0 / 1024);
  opt->reset();
  o.store.cache_percent = 0;
  auto again = Optimizer::Open(o);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->step(), 5u);
  ExpectStateEquals(again->get(), ref, "reopened after a clean close");
}

TEST(OptimizerTest, BaselineModeGivesTheSameStateAsMlpoMode) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {30000, 12345}, 8192);
  o.pipeline.grad_offload = true;
  o.pipeline.alternate_order = false;
  o.pipeline.prefetch_depth = 1;
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  InMemoryRef ref(o);
  for (uint64_t t = 1; t <= 3; ++t) {
    ASSERT_TRUE(StageAll(opt->get(), t).ok());
    ASSERT_TRUE((*opt)->OffloadGrads().ok());
    auto r = (*opt)->Step(1024.0);
    ASSERT_TRUE(r.ok()) << r.status();
    for (size_t k = 0; k < r->order.size(); ++k)
      EXPECT_EQ(r->order[k], static_cast<int>(k)) << "baseline order is fixed";
    ref.Step(o, t, 1.0 / 1024);
  }
  ExpectStateEquals(opt->get(), ref, "baseline");
  // The fp32 gradient objects went through the store.
  auto rec = (*opt)->store()->GetVersion("grad.g0.s000000", 0);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->step, 3u);
}

TEST(OptimizerTest, ReportCarriesTheLowerBoundWhenBandwidthsAreGiven) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {40000}, 8192);
  o.pipeline.path_mixed_bps = {3e6, 1e6};  // 4 MB/s in all
  o.pipeline.kernel_params_per_s = 1e3;    // 40 s for 40000 params
  // Each step's own bytes: with write-behind and read-ahead a step's last
  // commits and the next step's first reads fall in whichever report the
  // disk's timing puts them.
  o.write_behind = false;
  o.read_ahead = 0;
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok());
  for (uint64_t t = 1; t <= 2; ++t) {
    ASSERT_TRUE(StageAll(opt->get(), t).ok());
    auto r = (*opt)->Step(1024.0);
    ASSERT_TRUE(r.ok());
    double moved = static_cast<double>(r->bytes_read + r->bytes_written);
    EXPECT_DOUBLE_EQ(r->lower_bound_s, std::max(moved / 4e6, 40.0));
    EXPECT_DOUBLE_EQ(r->bound_efficiency, r->lower_bound_s / r->total_s);
    EXPECT_DOUBLE_EQ(r->achieved_bps, moved / r->total_s);
    if (t == 2) {
      // Step 2 reads and writes p, m, v: 24 bytes per parameter.
      EXPECT_GE(moved, 24.0 * 40000);
    }
  }
}

TEST(OptimizerTest, NonFiniteGradientsSkipTheStepAndAreCounted) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {5000}, 2048);
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok());
  ASSERT_TRUE(StageAll(opt->get(), 1).ok());
  ASSERT_TRUE((*opt)->Step(1024.0).ok());
  std::vector<float> p0, m0, v0;
  ASSERT_TRUE((*opt)->ReadState(0, &p0, &m0, &v0).ok());
  std::vector<uint16_t> g(5000, FloatToBF16(0.5f));
  g[4321] = 0x7fc0;  // NaN
  ASSERT_TRUE((*opt)->StageGrad(0, 0, g.data(), DType::kBF16, 5000).ok());
  auto r = (*opt)->Step(1024.0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->skipped);
  EXPECT_NE(r->skip_reason.find("1 non-finite"), std::string::npos);
  EXPECT_EQ((*opt)->skipped_steps(), 1u);
  EXPECT_EQ((*opt)->step(), 1u);
  std::vector<float> p1, m1, v1;
  ASSERT_TRUE((*opt)->ReadState(0, &p1, &m1, &v1).ok());
  EXPECT_EQ(p0, p1);
  EXPECT_EQ(m0, m1);
  EXPECT_EQ(v0, v1);
  // The next clean step proceeds as step 2.
  ASSERT_TRUE(StageAll(opt->get(), 2).ok());
  r = (*opt)->Step(1024.0);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->skipped);
  EXPECT_EQ((*opt)->step(), 2u);
}

TEST(OptimizerTest, ClippingUsesTheGlobalNormOfAllGroups) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {3000, 2000}, 1024);
  o.max_grad_norm = 0.05;
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok());
  ASSERT_TRUE(StageAll(opt->get(), 1).ok());
  double sq = 0;
  for (int g = 0; g < 2; ++g)
    for (uint64_t i = 0; i < o.groups[g].numel; ++i) {
      double x = BF16ToFloat(GradValue(1, g, i)) / 1024.0;
      sq += x * x;
    }
  double norm = std::sqrt(sq);
  ASSERT_GT(norm, 0.05);
  auto r = (*opt)->Step(1024.0);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(r->grad_norm, norm, 1e-9 * norm);
  EXPECT_NEAR(r->clip_coef, 0.05 / (norm + 1e-6), 1e-12);
  InMemoryRef ref(o);
  ref.Step(o, 1, r->clip_coef / 1024.0);
  ExpectStateEquals(opt->get(), ref, "clipped step");
}

// The gradient statistics are taken two ways: as a host copy is made
// (StageGrad, and a host backend's StageGradFromDevice) and when the step
// starts (BorrowGrad; a GPU's copies). Slices that cross subgroups and the
// 1 Mi element statistics chunks, handed over in a scrambled order, give the
// same norm bit for bit every way, and a long-double sum's to 1e-12.
TEST(OptimizerTest, GradStatisticsAgreeBitForBitHoweverTheSlicesCame) {
  const uint64_t n = (uint64_t{5} << 20) + 12345;
  std::vector<uint16_t> g(n);
  long double want = 0;
  for (uint64_t i = 0; i < n; ++i) {
    g[i] = GradValue(1, 0, i);
    g[i] = i % 999983 == 17 ? 0x7f80 : g[i];  // +inf, a few times
    float x = BF16ToFloat(g[i]);
    if (std::isfinite(x)) want += static_cast<long double>(x) * x;
  }
  // Slice bounds: uneven, crossing subgroups (3 Mi) and chunks (1 Mi).
  std::vector<uint64_t> cuts = {0, 777, (uint64_t{1} << 20) + 5,
                                (uint64_t{3} << 20) - 1, (uint64_t{3} << 20) + 9,
                                n - 100, n};
  std::vector<int> order = {4, 0, 5, 2, 1, 3};
  std::unique_ptr<DeviceBackend> host = CreateHostBackend();
  GradStats got[3];
  for (int way = 0; way < 3; ++way) {
    TempDir dir;
    OptimizerOptions o = TestOptimizerOptions(dir, {n}, uint64_t{3} << 20);
    auto opt = Optimizer::Open(o);
    ASSERT_TRUE(opt.ok()) << opt.status();
    for (int k : order) {
      uint64_t a = cuts[k], c = cuts[k + 1] - a;
      absl::Status st =
          way == 0   ? (*opt)->StageGrad(0, a, g.data() + a, DType::kBF16, c)
          : way == 1 ? (*opt)->BorrowGrad(0, a, g.data() + a, DType::kBF16, c)
                     : (*opt)->StageGradFromDevice(host.get(), 0, a,
                                                   g.data() + a, DType::kBF16,
                                                   c);
      ASSERT_TRUE(st.ok()) << st;
    }
    got[way] = (*opt)->LocalGradStats();
  }
  EXPECT_EQ(got[0].nonfinite, 6u);
  EXPECT_NEAR(got[0].sum_sq, static_cast<double>(want),
              1e-12 * static_cast<double>(want));
  for (int way = 1; way < 3; ++way) {
    EXPECT_EQ(got[way].nonfinite, got[0].nonfinite) << way;
    EXPECT_EQ(std::memcmp(&got[way].sum_sq, &got[0].sum_sq, sizeof(double)), 0)
        << "way " << way << ": " << got[way].sum_sq << " vs " << got[0].sum_sq;
  }
}

// A "device" whose copies fail from the `fail_from`-th on (host memory
// underneath, counted as device memory so the stage copies through it).
class FailingDevice final : public DeviceBackend {
 public:
  explicit FailingDevice(int fail_from) : fail_from_(fail_from) {}
  const char* name() const override { return "failing"; }
  bool on_device() const override { return true; }
  absl::Status RegisterHost(void* p, size_t b) override {
    return host_->RegisterHost(p, b);
  }
  void UnregisterHost(void* p) override { host_->UnregisterHost(p); }
  uint64_t registered_bytes() const override {
    return host_->registered_bytes();
  }
  absl::StatusOr<void*> AllocDevice(size_t b) override {
    return host_->AllocDevice(b);
  }
  void FreeDevice(void* p) override { host_->FreeDevice(p); }
  absl::StatusOr<void*> AllocPinnedHost(size_t b) override {
    return host_->AllocPinnedHost(b);
  }
  void FreePinnedHost(void* p) override { host_->FreePinnedHost(p); }
  absl::Status CopyToHost(void* d, const void* s, size_t b, int st) override {
    if (++copies_ >= fail_from_) return absl::DataLossError("injected");
    return host_->CopyToHost(d, s, b, st);
  }
  absl::Status CopyToDevice(void* d, const void* s, size_t b,
                            int st) override {
    return host_->CopyToDevice(d, s, b, st);
  }
  absl::Status Synchronize(int st) override { return host_->Synchronize(st); }
  absl::Status CastParams(const float* s, void* d, DType t,
                          size_t n) override {
    return host_->CastParams(s, d, t, n);
  }
  void Heal() { fail_from_ = 1 << 30; }

 private:
  std::unique_ptr<DeviceBackend> host_ = CreateHostBackend();
  int fail_from_, copies_ = 0;
};

// A device copy that fails part-way through a slice leaves nothing of the
// slice staged or counted: sent again, the statistics equal a clean run's
// (the subgroup copied before the failure is not counted twice).
TEST(OptimizerTest, AFailedDeviceCopyCountsNothingOfItsSlice) {
  const uint64_t n = 5000;
  std::vector<uint16_t> g(n);
  for (uint64_t i = 0; i < n; ++i) g[i] = GradValue(1, 0, i);
  GradStats clean, resent;
  {
    TempDir dir;
    auto opt = Optimizer::Open(TestOptimizerOptions(dir, {n}, 2048));
    ASSERT_TRUE(opt.ok()) << opt.status();
    ASSERT_TRUE((*opt)->StageGrad(0, 0, g.data(), DType::kBF16, n).ok());
    clean = (*opt)->LocalGradStats();
  }
  TempDir dir;
  auto opt = Optimizer::Open(TestOptimizerOptions(dir, {n}, 2048));
  ASSERT_TRUE(opt.ok()) << opt.status();
  FailingDevice dev(/*fail_from=*/2);  // the slice's second subgroup
  absl::Status st =
      (*opt)->StageGradFromDevice(&dev, 0, 0, g.data(), DType::kBF16, n);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("gradients of group 0"), std::string::npos)
      << st;
  dev.Heal();
  st = (*opt)->StageGradFromDevice(&dev, 0, 0, g.data(), DType::kBF16, n);
  ASSERT_TRUE(st.ok()) << st;
  resent = (*opt)->LocalGradStats();
  EXPECT_EQ(resent.nonfinite, clean.nonfinite);
  EXPECT_EQ(std::memcmp(&resent.sum_sq, &clean.sum_sq, sizeof(double)), 0)
      << resent.sum_sq << " vs " << clean.sum_sq;
  auto r = (*opt)->Step(1024.0);
  ASSERT_TRUE(r.ok()) << r.status();
}

// Stagers on several threads at once (a backward pass's hooks) share the
// optimizer's thread pool: every slice lands whole, the step runs, and the
// state equals the reference's.
TEST(OptimizerTest, ConcurrentStagersShareThePool) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {uint64_t{3} << 20}, 1 << 20);
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  const uint64_t n = o.groups[0].numel;
  std::vector<uint16_t> g(n);
  for (uint64_t i = 0; i < n; ++i) g[i] = GradValue(1, 0, i);
  const int kThreads = 4;
  std::vector<absl::Status> st(kThreads);
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      // Thread t stages every kThreads-th slice of 300 Ki elements.
      const uint64_t slice = 300 << 10;
      for (uint64_t a = t * slice; a < n && st[t].ok(); a += kThreads * slice)
        st[t] = (*opt)->StageGrad(0, a, g.data() + a, DType::kBF16,
                                  std::min(slice, n - a));
    });
  for (auto& t : ts) t.join();
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  auto r = (*opt)->Step(1024.0);
  ASSERT_TRUE(r.ok()) << r.status();
  InMemoryRef ref(o);
  ref.Step(o, 1, 1.0 / 1024.0);
  ExpectStateEquals(opt->get(), ref, "concurrent stagers");
}

TEST(OptimizerTest, BadInputsAreRejectedAndLeaveStateIntact) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {4000, 0}, 1500);
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok());
  std::vector<uint16_t> g(4000, FloatToBF16(0.25f));
  // A gradient for part of a parameter (the group is one parameter).
  ASSERT_TRUE((*opt)->StageGrad(0, 0, g.data(), DType::kBF16, 3500).ok());
  auto r = (*opt)->Step();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("3500 of its 4000"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("[0, 4000)"), std::string::npos)
      << r.status();
  EXPECT_EQ((*opt)->step(), 0u);
  // Wrong dtype, out of range, overlap, unknown or empty group.
  std::vector<float> f(10);
  EXPECT_EQ((*opt)->StageGrad(0, 3500, f.data(), DType::kF32, 10).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*opt)->StageGrad(0, 3990, g.data(), DType::kBF16, 20).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*opt)->StageGrad(0, 3000, g.data(), DType::kBF16, 600).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*opt)->StageGrad(5, 0, g.data(), DType::kBF16, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*opt)->StageGrad(1, 0, g.data(), DType::kBF16, 0).ok());
  // No data behind a non-empty slice: refused, nothing counts as staged.
  absl::Status null_data = (*opt)->StageGrad(0, 3500, nullptr, DType::kBF16, 10);
  EXPECT_EQ(null_data.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(null_data.message().find("null data"), std::string::npos)
      << null_data;
  EXPECT_EQ((*opt)->Step(0.0).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Completing the slice makes the step go through.
  ASSERT_TRUE((*opt)->StageGrad(0, 3500, g.data(), DType::kBF16, 500).ok());
  ASSERT_TRUE((*opt)->Step().ok());
  EXPECT_EQ((*opt)->step(), 1u);
  // Bad hyperparameters and subgroup size are rejected at open.
  opt->reset();
  OptimizerOptions bad = o;
  bad.groups[0].hyper.beta1 = 1.0;
  EXPECT_EQ(Optimizer::Open(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = o;
  bad.subgroup_numel = 0;
  EXPECT_EQ(Optimizer::Open(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = o;
  bad.pipeline.prefetch_depth = 0;
  EXPECT_EQ(Optimizer::Open(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mlpo
