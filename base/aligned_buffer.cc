#include "base/aligned_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace mlpo {

void* AlignedAlloc(size_t size, bool huge_pages) {
  // Large buffers get 2 MiB alignment and transparent huge pages: a step
  // touches gigabytes of fresh buffers, and 4 KiB page faults would cost
  // seconds of CPU per step.
  constexpr size_t kHuge = size_t{2} << 20;
  size_t align = huge_pages && size >= 2 * kHuge ? kHuge : kIoAlignment;
  size_t rounded = (size + align - 1) / align * align;
  if (rounded == 0) rounded = kIoAlignment;
  void* p = std::aligned_alloc(align, rounded);
  if (p != nullptr && align == kHuge) ::madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

AlignedBuffer::AlignedBuffer(size_t size, bool huge_pages) : size_(size) {
  data_ = static_cast<char*>(AlignedAlloc(size, huge_pages));
  if (data_ == nullptr) throw std::bad_alloc();
}
AlignedBuffer::~AlignedBuffer() { std::free(data_); }
AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}
AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

}  // namespace mlpo
