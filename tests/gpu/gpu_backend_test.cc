#include <string>
#include <vector>

#include "gpu/device_backend.h"
#include "gtest/gtest.h"

namespace mlpo {
namespace {

TEST(HostBackendTest, CastsMatchScalarConversions) {
  auto b = CreateHostBackend();
  std::vector<float> src = {0.f, -1.5f, 3.14159f, 65504.f, 1e-8f, 1e30f};
  std::vector<uint16_t> bf(src.size()), hf(src.size());
  ASSERT_TRUE(b->CastParams(src.data(), bf.data(), DType::kBF16, src.size()).ok());
  ASSERT_TRUE(b->CastParams(src.data(), hf.data(), DType::kF16, src.size()).ok());
  // Independent expectations: known encodings.
  EXPECT_EQ(bf[1], 0xbfc0);  // -1.5
  EXPECT_EQ(hf[1], 0xbe00);  // -1.5
  EXPECT_EQ(hf[3], 0x7bff);  // 65504 = max half
  EXPECT_EQ(hf[5], 0x7c00);  // overflow -> inf
  EXPECT_EQ(bf[2], 0x4049);  // pi in bf16
}

TEST(CudaBackendTest, CastOnDeviceOrSkip) {
  std::string why;
  if (!CudaDeviceAvailable(&why)) GTEST_SKIP() << "GPU test skipped: " << why;
  auto b = CreateCudaBackend(0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_STREQ((*b)->name(), "cuda");
}

TEST(HostBackendTest, RegistersCopiesAndSynchronizes) {
  auto b = CreateHostBackend();
  EXPECT_FALSE(b->on_device());
  std::vector<char> a(4096, 'x'), c(4096, 0);
  ASSERT_TRUE(b->RegisterHost(a.data(), a.size()).ok());
  EXPECT_FALSE(b->RegisterHost(a.data(), a.size()).ok());  // twice
  EXPECT_EQ(b->registered_bytes(), 4096u);
  ASSERT_TRUE(b->CopyToDevice(c.data(), a.data(), 100, kParamStream).ok());
  ASSERT_TRUE(b->Synchronize(kParamStream).ok());
  EXPECT_EQ(std::string(c.data(), 100), std::string(100, 'x'));
  c.assign(c.size(), 0);
  ASSERT_TRUE(b->CopyToHost(c.data(), a.data(), 50, kGradStream).ok());
  EXPECT_EQ(std::string(c.data(), 51), std::string(50, 'x') + '\0');
  EXPECT_FALSE(b->CopyToHost(nullptr, a.data(), 1, kGradStream).ok());
  b->UnregisterHost(a.data());
  EXPECT_EQ(b->registered_bytes(), 0u);
}

TEST(SelectBackendTest, AutoFallsBackToTheHostWithoutADevice) {
  std::string why;
  if (CudaDeviceAvailable(&why)) GTEST_SKIP() << "a CUDA device is present";
  auto a = SelectBackend(BackendChoice::kAuto);
  ASSERT_TRUE(a.ok());
  EXPECT_STREQ((*a)->name(), "host");
  auto c = SelectBackend(BackendChoice::kCuda);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(c.status().message().empty());
  EXPECT_TRUE(ParseBackendChoice("cuda").ok());
  auto bad = ParseBackendChoice("gpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, host or cuda"),
            std::string::npos);
}

}  // namespace
}  // namespace mlpo
