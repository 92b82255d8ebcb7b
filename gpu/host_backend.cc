#include <string>

#include "gpu/device_backend.h"

namespace mlpo {
namespace {

class HostBackend final : public DeviceBackend {
 public:
  const char* name() const override { return "host"; }
  absl::Status CastParams(const float* src, void* dst, DType dtype,
                          size_t n) override {
    for (size_t i = 0; i < n; ++i) StoreFromFloat(dst, dtype, i, src[i]);
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<DeviceBackend> CreateHostBackend() {
  return std::make_unique<HostBackend>();
}

#ifndef MLPO_HAVE_CUDA
bool CudaDeviceAvailable(std::string* why) {
  *why = "mlpo was built without CUDA (no nvcc found at configure time)";
  return false;
}
absl::StatusOr<std::unique_ptr<DeviceBackend>> CreateCudaBackend(int) {
  return absl::UnavailableError(
      "mlpo was built without CUDA (no nvcc found at configure time)");
}
#endif

}  // namespace mlpo
