// The device ends of a step on each backend: "host" everywhere, "cuda" where
// a GPU is visible (skipped with a message otherwise). Gradients live in
// backend memory (cudaMalloc on a GPU), new parameters go to backend memory,
// and what comes back is compared bit for bit with the in-memory reference
// (tests/optimizer/optimizer_test_util.h), an independent loop over whole
// arrays.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu/device_backend.h"
#include "gtest/gtest.h"
#include "optimizer/param_sink.h"
#include "tests/optimizer/optimizer_test_util.h"

namespace mlpo {
namespace {

class DeviceStepTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda") {
      std::string why;
      if (!CudaDeviceAvailable(&why))
        GTEST_SKIP() << "GPU test skipped: " << why;
      auto b = CreateCudaBackend(0);
      ASSERT_TRUE(b.ok()) << b.status();
      backend_ = std::move(*b);
    } else {
      backend_ = CreateHostBackend();
    }
  }
  // Device memory holding `host`'s bytes.
  void* Upload(const void* host, size_t bytes) {
    auto p = backend_->AllocDevice(bytes);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    allocs_.push_back(*p);
    EXPECT_TRUE(backend_->CopyToDevice(*p, host, bytes, kGradStream).ok());
    EXPECT_TRUE(backend_->Synchronize(kGradStream).ok());
    return *p;
  }
  std::vector<char> Download(const void* dev, size_t bytes) {
    std::vector<char> out(bytes);
    EXPECT_TRUE(backend_->CopyToHost(out.data(), dev, bytes, kGradStream).ok());
    EXPECT_TRUE(backend_->Synchronize(kGradStream).ok());
    return out;
  }
  void TearDown() override {
    for (void* p : allocs_) backend_->FreeDevice(p);
  }
  std::unique_ptr<DeviceBackend> backend_;
  std::vector<void*> allocs_;
};

// Gradients from backend memory, parameters to backend memory, the stage
// and the store's pool pinned: every step's parameters equal the
// reference's, bit for bit, and the pool's buffers are pinned.
TEST_P(DeviceStepTest, StepsFromAndToTheDeviceMatchTheReference) {
  TempDir dir;
  OptimizerOptions o = TestOptimizerOptions(dir, {100003, 0, 54321}, 20000);
  std::vector<void*> dest;
  for (size_t g = 0; g < 3; ++g) {
    std::vector<uint16_t> zero(std::max<uint64_t>(1, o.groups[g].numel), 0);
    dest.push_back(Upload(zero.data(), zero.size() * 2));
  }
  auto sink = DeviceParamSink::Create(backend_.get(), dest, DType::kBF16, 20000);
  ASSERT_TRUE(sink.ok()) << sink.status();
  o.param_sink = sink->get();
  auto opt = Optimizer::Open(o);
  ASSERT_TRUE(opt.ok()) << opt.status();
  ASSERT_TRUE((*opt)->RegisterDevice(backend_.get()).ok());
  InMemoryRef ref(o);
  for (uint64_t t = 1; t <= 3; ++t) {
    for (size_t g = 0; g < 3; ++g) {
      uint64_t n = o.groups[g].numel;
      if (n == 0) continue;
      std::vector<uint16_t> grad(n);
      for (uint64_t i = 0; i < n; ++i) grad[i] = GradValue(t, g, i);
      void* dgrad = Upload(grad.data(), n * 2);
      // Two slices, the second first, as a backward pass hands them over.
      uint64_t cut = n / 3;
      ASSERT_TRUE((*opt)->StageGradFromDevice(
          backend_.get(), g, cut, static_cast<char*>(dgrad) + cut * 2,
          DType::kBF16, n - cut).ok());
      ASSERT_TRUE((*opt)->StageGradFromDevice(backend_.get(), g, 0, dgrad,
                                               DType::kBF16, cut).ok());
    }
    auto r = (*opt)->Step(1024.0);
    ASSERT_TRUE(r.ok()) << r.status();
    ref.Step(o, t, 1.0 / 1024);
    for (size_t g = 0; g < 3; ++g) {
      if (ref.out[g].empty()) continue;
      std::vector<char> got = Download(dest[g], ref.out[g].size() * 2);
      EXPECT_EQ(0, std::memcmp(got.data(), ref.out[g].data(), got.size()))
          << GetParam() << ": group " << g << " step " << t;
    }
  }
  EXPECT_GT((*opt)->store()->pinned_bytes(), 0u)
      << "the store's buffers were not pinned";
  // Stage + two staging buffers + the pool's buffers.
  EXPECT_GE(backend_->registered_bytes(),
            (100003u + 54321u) * 2 + 2u * 20000 * 2 +
                (*opt)->store()->pinned_bytes());
  // Bad input: a dtype the stage does not hold, a range outside the group.
  std::vector<uint16_t> one(10, 0);
  void* d = Upload(one.data(), 20);
  EXPECT_EQ((*opt)->StageGradFromDevice(backend_.get(), 0, 0, d, DType::kF16,
                                        10).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*opt)->StageGradFromDevice(backend_.get(), 0, 100000, d,
                                        DType::kBF16, 10).code(),
            absl::StatusCode::kInvalidArgument);
  opt->reset();  // closes the store: unpins the pool
  sink->reset();
  EXPECT_EQ(backend_->registered_bytes(), 0u) << "something stayed pinned";
}

// A buffer from the store's pool (pinned) goes to the device and back
// intact, in pieces on both streams.
TEST_P(DeviceStepTest, PinnedPoolBuffersRoundTrip) {
  TempDir dir;
  StoreOptions so = TestStoreOptions(dir, {1.0});
  auto store = ObjectStore::Open(so);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->RegisterHostMemory(backend_.get()).ok());
  const size_t n = 8 << 20;
  AlignedBuffer a = (*store)->BorrowBuffer(n);
  EXPECT_EQ((*store)->pinned_bytes(), n);
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    std::memcpy(a.data() + i, &v, 8);
  }
  auto dev = backend_->AllocDevice(n);
  ASSERT_TRUE(dev.ok()) << dev.status();
  allocs_.push_back(*dev);
  for (size_t off = 0; off < n; off += n / 4)
    ASSERT_TRUE(backend_->CopyToDevice(static_cast<char*>(*dev) + off,
                                       a.data() + off, n / 4,
                                       (off / (n / 4)) % 2).ok());
  ASSERT_TRUE(backend_->Synchronize(kGradStream).ok());
  ASSERT_TRUE(backend_->Synchronize(kParamStream).ok());
  AlignedBuffer b = (*store)->BorrowBuffer(n);
  ASSERT_TRUE(backend_->CopyToHost(b.data(), *dev, n, kGradStream).ok());
  ASSERT_TRUE(backend_->Synchronize(kGradStream).ok());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n));
  (*store)->ReturnBuffer(std::move(a));
  (*store)->ReturnBuffer(std::move(b));
  store->reset();
  EXPECT_EQ(backend_->registered_bytes(), 0u);
}

// The cast kernel agrees with the host conversion (round to nearest even)
// on random values, infinities, NaN and subnormals.
TEST_P(DeviceStepTest, CastAgreesWithTheHostConversion) {
  std::vector<float> src(100000);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-70000.f, 70000.f);
  for (float& f : src) f = u(rng);
  src[0] = INFINITY;
  src[1] = -INFINITY;
  src[2] = 1e-40f;  // subnormal
  src[3] = 3.0e-5f;
  src[4] = std::nanf("");
  for (DType dt : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> want(src.size());
    for (size_t i = 0; i < src.size(); ++i)
      StoreFromFloat(want.data(), dt, i, src[i]);
    void* out = backend_->on_device() ? *backend_->AllocDevice(src.size() * 2)
                                      : nullptr;
    std::vector<uint16_t> got(src.size());
    void* dst = out ? out : got.data();
    ASSERT_TRUE(backend_->CastParams(src.data(), dst, dt, src.size()).ok());
    if (out) {
      std::vector<char> d = Download(out, src.size() * 2);
      std::memcpy(got.data(), d.data(), d.size());
      backend_->FreeDevice(out);
    }
    for (size_t i = 0; i < src.size(); ++i) {
      if (std::isnan(src[i])) {
        // Any NaN encoding: exponent all ones, mantissa non-zero.
        uint16_t e = dt == DType::kBF16 ? 0x7f80 : 0x7c00;
        EXPECT_EQ(got[i] & e, e);
        EXPECT_NE(got[i] & ~(e | 0x8000), 0);
        continue;
      }
      ASSERT_EQ(got[i], want[i]) << DTypeName(dt) << " of " << src[i];
    }
  }
}

// A group made of separate tensors (pieces), a gap between two of them, and
// subgroups that span tensors: each tensor gets exactly its elements,
// whether the subgroup's tiles were reported done (the host backend then
// copies each as it comes: tiles of 100 elements crossing the pieces),
// only some were (Publish copies the subgroup), or none were.
TEST_P(DeviceStepTest, PiecesGetTheirOwnElements) {
  std::vector<float> src(1000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  std::vector<uint16_t> zero(1000, 0);
  void* t1 = Upload(zero.data(), 300 * 2);  // elements [0, 300)
  void* t2 = Upload(zero.data(), 500 * 2);  // elements [400, 900)
  auto sink = DeviceParamSink::Create(
      backend_.get(), std::vector<std::vector<DevicePiece>>{
                          {{400, 500, t2}, {0, 300, t1}}},
      DType::kBF16, 256);
  ASSERT_TRUE(sink.ok()) << sink.status();
  for (uint64_t off = 0; off < 1000; off += 256) {
    Subgroup s;
    s.group = 0;
    s.group_offset = off;
    s.numel = std::min<uint64_t>(256, 1000 - off);
    auto* buf = static_cast<uint16_t*>((*sink)->Buffer(s));
    for (uint64_t i = 0; i < s.numel; ++i)
      buf[i] = FloatToBF16(src[off + i]);
    const int k = static_cast<int>(off / 256);
    if (k != 0)  // 1 and 3: every tile; 2: the first tile only
      for (uint64_t t = 0; t < s.numel && (k != 2 || t == 0); t += 100)
        (*sink)->TileDone(s, t, std::min<uint64_t>(100, s.numel - t));
    ASSERT_TRUE((*sink)->Publish(s).ok());
  }
  ASSERT_TRUE((*sink)->Flush().ok());
  EXPECT_EQ((*sink)->bytes_copied(), 800u * 2);
  std::vector<char> a = Download(t1, 600), b = Download(t2, 1000);
  for (int i = 0; i < 300; ++i)
    ASSERT_EQ(reinterpret_cast<uint16_t*>(a.data())[i], FloatToBF16(i));
  for (int i = 0; i < 500; ++i)
    ASSERT_EQ(reinterpret_cast<uint16_t*>(b.data())[i], FloatToBF16(400 + i));
  // Bad input: overlapping pieces, a piece without memory.
  EXPECT_EQ(DeviceParamSink::Create(backend_.get(),
                                    std::vector<std::vector<DevicePiece>>{
                                        {{0, 300, t1}, {299, 10, t2}}},
                                    DType::kBF16, 256)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(DeviceParamSink::Create(backend_.get(),
                                       std::vector<std::vector<DevicePiece>>{
                                           {{0, 300, nullptr}}},
                                       DType::kBF16, 256)
                   .ok());
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceStepTest,
                         ::testing::Values("host", "cuda"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mlpo
