// Aligned heap buffers for O_DIRECT I/O, and the alignment every transfer
// keeps. In base/ because the optimizer and the store both need buffers
// without needing the I/O engine.
//
// Layer base/: includes the standard library only.
#ifndef MLPO_BASE_ALIGNED_BUFFER_H_
#define MLPO_BASE_ALIGNED_BUFFER_H_

#include <cstddef>

namespace mlpo {

// O_DIRECT offsets, lengths and buffer addresses are multiples of this.
inline constexpr size_t kIoAlignment = 4096;

// `size` bytes (at least one page) aligned as AlignedBuffer's are: 2 MiB
// and on transparent huge pages from 4 MiB on when `huge_pages`, else
// kIoAlignment. Null when memory is short; std::free releases it.
void* AlignedAlloc(size_t size, bool huge_pages = true);

// An aligned heap buffer (kIoAlignment) for O_DIRECT I/O. Move-only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Buffers of 4 MiB and more are 2 MiB aligned and backed by transparent
  // huge pages unless `huge_pages` is false: a request then spans a few
  // physical segments instead of one per 4 KiB page, which virtual disks
  // with a small segment limit (254 here) otherwise split.
  explicit AlignedBuffer(size_t size, bool huge_pages = true);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mlpo

#endif  // MLPO_BASE_ALIGNED_BUFFER_H_
