#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/aligned_buffer.h"
#include "base/parallel_copy.h"
#include "gpu/device_backend.h"

namespace mlpo {
namespace {

class HostBackend final : public DeviceBackend {
 public:
  const char* name() const override { return "host"; }
  bool on_device() const override { return false; }
  absl::Status RegisterHost(void* p, size_t bytes) override {
    std::lock_guard<std::mutex> l(mu_);
    if (!regions_.emplace(p, bytes).second)
      return absl::AlreadyExistsError("host memory registered twice");
    registered_ += bytes;
    return absl::OkStatus();
  }
  void UnregisterHost(void* p) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = regions_.find(p);
    if (it == regions_.end()) return;
    registered_ -= it->second;
    regions_.erase(it);
  }
  uint64_t registered_bytes() const override {
    std::lock_guard<std::mutex> l(mu_);
    return registered_;
  }
  absl::StatusOr<void*> AllocDevice(size_t bytes) override {
    return Alloc(bytes, "device memory");
  }
  void FreeDevice(void* p) override { std::free(p); }
  absl::StatusOr<void*> AllocPinnedHost(size_t bytes) override {
    return Alloc(bytes, "pinned host memory");
  }
  void FreePinnedHost(void* p) override { std::free(p); }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes,
                          int) override {
    if (bytes && (dst == nullptr || src == nullptr))
      return absl::InvalidArgumentError("copy to host: null pointer");
    ParallelCopy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes,
                            int) override {
    if (bytes && (dst == nullptr || src == nullptr))
      return absl::InvalidArgumentError("copy to device: null pointer");
    ParallelCopy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize(int) override { return absl::OkStatus(); }
  absl::Status CastParams(const float* src, void* dst, DType dtype,
                          size_t n) override {
    for (size_t i = 0; i < n; ++i) StoreFromFloat(dst, dtype, i, src[i]);
    return absl::OkStatus();
  }

 private:
  // Large allocations on transparent huge pages, as AlignedBuffer's: the
  // stand-in's "device" memory should not cost TLB misses a GPU's does not.
  static absl::StatusOr<void*> Alloc(size_t bytes, const char* what) {
    void* p = AlignedAlloc(bytes);
    if (p == nullptr)
      return absl::ResourceExhaustedError(
          absl::StrCat("host backend: cannot allocate ", bytes, " bytes of ",
                       what));
    return p;
  }
  mutable std::mutex mu_;
  std::map<void*, size_t> regions_;
  uint64_t registered_ = 0;
};

}  // namespace

std::unique_ptr<DeviceBackend> CreateHostBackend() {
  return std::make_unique<HostBackend>();
}

absl::StatusOr<BackendChoice> ParseBackendChoice(const std::string& s) {
  if (s == "auto") return BackendChoice::kAuto;
  if (s == "host") return BackendChoice::kHost;
  if (s == "cuda") return BackendChoice::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("device backend '", s, "': expected auto, host or cuda"));
}

absl::StatusOr<std::unique_ptr<DeviceBackend>> SelectBackend(
    BackendChoice choice, int device) {
  if (choice == BackendChoice::kHost) return CreateHostBackend();
  auto cuda = CreateCudaBackend(device);
  if (cuda.ok() || choice == BackendChoice::kCuda) return cuda;
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    std::fprintf(stderr, "mlpo: %s; using the host backend (memcpy)\n",
                 std::string(cuda.status().message()).c_str());
  return CreateHostBackend();
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
