// The device ends of an update step: gradients come down from the GPU
// (device-to-host copies into the gradient stage) and new parameters go up
// (host-to-device copies from a staging buffer the kernel writes). One
// interface, two implementations chosen at run time:
//
//   cuda  compiled when nvcc was found at configure time (cuda_backend.cu is
//         the only source that includes CUDA headers); needs a device.
//   host  memcpy, the stand-in without a GPU (CI, dev machines); every
//         pipeline test runs through it, so the code paths above the
//         backend are the same with and without a device. A copy of 8 MiB
//         or more is spread over the cores (ParallelCopy), as a GPU's copy
//         engines do not queue behind one CPU core either.
//
// SelectBackend(kAuto) tries CUDA and falls back to the host backend, saying
// why once on stderr (KvikIO's compat mode is the model).
//
// Host memory the device copies from or into is registered once
// (cudaHostRegister): the buffer pool's and the gradient stage's pages then
// serve O_DIRECT I/O and DMA alike, with no bounce copies.
//
// Thread-safety: one backend per optimizer; calls on one stream are
// serialised by the caller.
#ifndef MLPO_GPU_DEVICE_BACKEND_H_
#define MLPO_GPU_DEVICE_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "base/dtype.h"
#include "base/host_registrar.h"

namespace mlpo {

// Streams: gradients come down on one, parameters go up on the other, so
// the two directions overlap.
inline constexpr int kGradStream = 0;
inline constexpr int kParamStream = 1;

class DeviceBackend : public HostRegistrar {
 public:
  virtual ~DeviceBackend() = default;
  virtual const char* name() const = 0;
  // True when "device" pointers are GPU memory (false: host memory).
  virtual bool on_device() const = 0;

  // Pins [p, p + bytes) for DMA (cudaHostRegister); the host backend only
  // counts it. Unregister before freeing.
  absl::Status RegisterHost(void* p, size_t bytes) override = 0;
  void UnregisterHost(void* p) override = 0;
  uint64_t registered_bytes() const override = 0;

  // Device memory (cudaMalloc; the host backend: aligned host memory).
  // ResourceExhausted when the device is full.
  virtual absl::StatusOr<void*> AllocDevice(size_t bytes) = 0;
  virtual void FreeDevice(void* p) = 0;
  // Page-locked host memory allocated as such (cudaHostAlloc): the
  // reference the registered pool buffers are measured against.
  virtual absl::StatusOr<void*> AllocPinnedHost(size_t bytes) = 0;
  virtual void FreePinnedHost(void* p) = 0;

  // Asynchronous copies on `stream` (kGradStream, kParamStream); done when
  // Synchronize(stream) returns. The host backend copies at once.
  virtual absl::Status CopyToHost(void* host_dst, const void* dev_src,
                                  size_t bytes, int stream) = 0;
  virtual absl::Status CopyToDevice(void* dev_dst, const void* host_src,
                                    size_t bytes, int stream) = 0;
  virtual absl::Status Synchronize(int stream) = 0;

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

enum class BackendChoice { kAuto, kHost, kCuda };
// "auto" | "host" | "cuda"; InvalidArgument otherwise.
absl::StatusOr<BackendChoice> ParseBackendChoice(const std::string& s);

// kAuto: CUDA when available, else the host backend (with one line on
// stderr saying why, once per process). kCuda: Unavailable without a
// device. kHost: always the host backend.
absl::StatusOr<std::unique_ptr<DeviceBackend>> SelectBackend(
    BackendChoice choice, int device = 0);

}  // namespace mlpo

#endif  // MLPO_GPU_DEVICE_BACKEND_H_
