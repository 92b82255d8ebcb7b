// Something that pins host memory for DMA (a GPU backend: cudaHostRegister).
// In base/ so that the store's buffer pool can have its buffers pinned
// without depending on gpu/.
//
// Layer base/: includes absl status only.
#ifndef MLPO_BASE_HOST_REGISTRAR_H_
#define MLPO_BASE_HOST_REGISTRAR_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace mlpo {

class HostRegistrar {
 public:
  virtual ~HostRegistrar() = default;
  // Pins [p, p + bytes). AlreadyExists when p is registered already.
  virtual absl::Status RegisterHost(void* p, size_t bytes) = 0;
  // Unpins p (registered by RegisterHost); must come before p is freed.
  virtual void UnregisterHost(void* p) = 0;
  virtual uint64_t registered_bytes() const = 0;
};

}  // namespace mlpo

#endif  // MLPO_BASE_HOST_REGISTRAR_H_
