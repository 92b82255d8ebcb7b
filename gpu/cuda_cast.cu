// CUDA backend: casts fp32 master parameters to the model dtype on the
// device. Proves the toolchain path from day one; the H2D pipeline builds on
// it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "gpu/device_backend.h"

namespace mlpo {
namespace {

__global__ void CastKernel(const float* src, void* dst, int dtype, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (; i < n; i += stride) {
    float v = src[i];
    if (dtype == 0) {
      static_cast<float*>(dst)[i] = v;
    } else if (dtype == 1) {
      static_cast<__half*>(dst)[i] = __float2half_rn(v);
    } else {
      static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v);
    }
  }
}

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(std::string(what) + ": " + cudaGetErrorString(e));
}

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  const char* name() const override { return "cuda"; }
  // src: host fp32; dst: device memory of n elements of dtype.
  absl::Status CastParams(const float* src, void* dst, DType dtype,
                          size_t n) override {
    cudaError_t e = cudaSetDevice(device_);
    if (e != cudaSuccess) return CudaError(e, "cudaSetDevice");
    float* staging = nullptr;
    e = cudaMalloc(&staging, n * sizeof(float));
    if (e != cudaSuccess) return CudaError(e, "cudaMalloc");
    e = cudaMemcpy(staging, src, n * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
      int threads = 256;
      int blocks = static_cast<int>((n + threads - 1) / threads);
      if (blocks > 65535) blocks = 65535;
      CastKernel<<<blocks, threads>>>(staging, dst, static_cast<int>(dtype), n);
      e = cudaDeviceSynchronize();
    }
    cudaFree(staging);
    if (e != cudaSuccess) return CudaError(e, "cast kernel");
    return absl::OkStatus();
  }

 private:
  int device_;
};

}  // namespace

bool CudaDeviceAvailable(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no CUDA device: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device";
    return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<DeviceBackend>> CreateCudaBackend(int device) {
  std::string why;
  if (!CudaDeviceAvailable(&why)) return absl::UnavailableError(why);
  return std::unique_ptr<DeviceBackend>(new CudaBackend(device));
}

}  // namespace mlpo
