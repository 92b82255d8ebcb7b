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

}  // namespace
}  // namespace mlpo
