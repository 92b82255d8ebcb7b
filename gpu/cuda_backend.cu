// The CUDA backend: the only source that includes CUDA headers. Two streams
// (gradients down, parameters up), host memory pinned in place with
// cudaHostRegister, and the cast kernel (fp32 master weights to the model
// dtype on the device). Compiled when nvcc is found at configure time.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
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

absl::Status CudaError(cudaError_t e, const std::string& what) {
  std::string m = what + ": " + cudaGetErrorString(e);
  if (e == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(m);
  if (e == cudaErrorHostMemoryAlreadyRegistered)
    return absl::AlreadyExistsError(m);
  if (e == cudaErrorInvalidValue) return absl::InvalidArgumentError(m);
  return absl::InternalError(m);
}

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}
  ~CudaBackend() override {
    cudaSetDevice(device_);
    for (auto& [p, n] : regions_) cudaHostUnregister(p);
    for (cudaStream_t s : streams_)
      if (s) cudaStreamDestroy(s);
  }
  absl::Status Init() {
    cudaError_t e = cudaSetDevice(device_);
    if (e != cudaSuccess) return CudaError(e, "cudaSetDevice");
    for (cudaStream_t& s : streams_) {
      e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      if (e != cudaSuccess) return CudaError(e, "cudaStreamCreate");
    }
    return absl::OkStatus();
  }
  const char* name() const override { return "cuda"; }
  bool on_device() const override { return true; }
  absl::Status RegisterHost(void* p, size_t bytes) override {
    std::lock_guard<std::mutex> l(mu_);
    cudaSetDevice(device_);
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    if (e != cudaSuccess) return CudaError(e, "cudaHostRegister");
    regions_[p] = bytes;
    registered_ += bytes;
    return absl::OkStatus();
  }
  void UnregisterHost(void* p) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = regions_.find(p);
    if (it == regions_.end()) return;
    cudaHostUnregister(p);
    registered_ -= it->second;
    regions_.erase(it);
  }
  uint64_t registered_bytes() const override {
    std::lock_guard<std::mutex> l(mu_);
    return registered_;
  }
  absl::StatusOr<void*> AllocDevice(size_t bytes) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess)
      return CudaError(e, "cudaMalloc of " + std::to_string(bytes) + " bytes");
    return p;
  }
  void FreeDevice(void* p) override {
    cudaSetDevice(device_);
    cudaFree(p);
  }
  absl::StatusOr<void*> AllocPinnedHost(size_t bytes) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess)
      return CudaError(e,
                       "cudaHostAlloc of " + std::to_string(bytes) + " bytes");
    return p;
  }
  void FreePinnedHost(void* p) override { cudaFreeHost(p); }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes,
                          int stream) override {
    cudaSetDevice(device_);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                    streams_[stream & 1]);
    if (e != cudaSuccess) return CudaError(e, "device-to-host copy");
    return absl::OkStatus();
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes,
                            int stream) override {
    cudaSetDevice(device_);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                    streams_[stream & 1]);
    if (e != cudaSuccess) return CudaError(e, "host-to-device copy");
    return absl::OkStatus();
  }
  absl::Status Synchronize(int stream) override {
    cudaSetDevice(device_);
    cudaError_t e = cudaStreamSynchronize(streams_[stream & 1]);
    if (e != cudaSuccess) return CudaError(e, "stream synchronize");
    return absl::OkStatus();
  }
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
  cudaStream_t streams_[2] = {nullptr, nullptr};
  mutable std::mutex mu_;
  std::map<void*, size_t> regions_;
  uint64_t registered_ = 0;
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
  int n = 0;
  cudaGetDeviceCount(&n);
  if (device < 0 || device >= n)
    return absl::InvalidArgumentError("CUDA device " + std::to_string(device) +
                                      ": this machine has " +
                                      std::to_string(n));
  auto b = std::make_unique<CudaBackend>(device);
  if (absl::Status st = b->Init(); !st.ok()) return st;
  return std::unique_ptr<DeviceBackend>(std::move(b));
}

}  // namespace mlpo
