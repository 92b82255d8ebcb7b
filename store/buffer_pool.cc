#include "store/buffer_pool.h"

namespace mlpo {

AlignedBuffer BufferPool::Get(size_t size) {
  {
    absl::MutexLock l(&mu_);
    auto it = idle_.find(size);
    if (it != idle_.end()) {
      AlignedBuffer b = std::move(it->second);
      idle_.erase(it);
      idle_bytes_ -= size;
      ++reused_;
      return b;
    }
  }
  return AlignedBuffer(size);
}

void BufferPool::Put(AlignedBuffer b) {
  if (b.data() == nullptr) return;
  absl::MutexLock l(&mu_);
  if (idle_bytes_ + b.size() > max_bytes_) return;  // freed on return
  idle_bytes_ += b.size();
  size_t n = b.size();
  idle_.emplace(n, std::move(b));
}

uint64_t BufferPool::idle_bytes() const {
  absl::MutexLock l(&mu_);
  return idle_bytes_;
}

uint64_t BufferPool::reused() const {
  absl::MutexLock l(&mu_);
  return reused_;
}

}  // namespace mlpo
