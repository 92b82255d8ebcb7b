// The device side of an update: where new parameters go after the step
// (H2D copy and cast to the model dtype) and where gradients come from (D2H).
// The host backend stands in when there is no GPU (CI, dev machines); the
// CUDA backend exists when nvcc was found at build time and a device is
// present at run time.
//
// Thread-safety: one backend per optimizer; calls are serialised by it.
#ifndef MLPO_GPU_DEVICE_BACKEND_H_
#define MLPO_GPU_DEVICE_BACKEND_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "base/dtype.h"

namespace mlpo {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual const char* name() const = 0;
  // Casts n fp32 values to `dtype` into dst (host memory for the host
  // backend; device memory for CUDA).
  virtual absl::Status CastParams(const float* src, void* dst, DType dtype,
                                  size_t n) = 0;
};

std::unique_ptr<DeviceBackend> CreateHostBackend();

// True when built with CUDA and a device is visible; `why` says otherwise.
bool CudaDeviceAvailable(std::string* why);

// The CUDA backend, or Unavailable (no toolkit at build time, no device).
absl::StatusOr<std::unique_ptr<DeviceBackend>> CreateCudaBackend(int device);

}  // namespace mlpo

#endif  // MLPO_GPU_DEVICE_BACKEND_H_
