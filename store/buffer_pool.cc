#include "store/buffer_pool.h"

namespace mlpo {

AlignedBuffer BufferPool::Get(size_t size) {
  {
    MutexLock l(&mu_);
    auto it = idle_.find(size);
    if (it != idle_.end()) {
      AlignedBuffer b = std::move(it->second);
      idle_.erase(it);
      idle_bytes_ -= size;
      ++reused_;
      return b;
    }
  }
  AlignedBuffer b(size);
  MutexLock l(&mu_);
  if (registrar_ != nullptr) PinLocked(b);
  return b;
}

void BufferPool::Put(AlignedBuffer b) {
  if (b.data() == nullptr) return;
  MutexLock l(&mu_);
  if (idle_bytes_ + b.size() > max_bytes_) {
    UnpinLocked(b);
    return;  // freed on return
  }
  idle_bytes_ += b.size();
  size_t n = b.size();
  idle_.emplace(n, std::move(b));
}

void BufferPool::PinLocked(const AlignedBuffer& b) {
  if (b.size() == 0 || pinned_.count(b.data())) return;
  if (registrar_->RegisterHost(b.data(), b.size()).ok()) {
    pinned_.emplace(b.data(), b.size());
    pinned_bytes_ += b.size();
  } else {
    ++pin_failures_;
  }
}

void BufferPool::UnpinLocked(const AlignedBuffer& b) {
  auto it = pinned_.find(b.data());
  if (it == pinned_.end()) return;
  registrar_->UnregisterHost(b.data());
  pinned_bytes_ -= it->second;
  pinned_.erase(it);
}

absl::Status BufferPool::SetRegistrar(HostRegistrar* r) {
  ClearRegistrar();
  MutexLock l(&mu_);
  if (r == nullptr) return absl::OkStatus();
  for (auto& [size, b] : idle_) {
    absl::Status st = r->RegisterHost(b.data(), b.size());
    if (!st.ok()) {
      for (auto& [p, n] : pinned_) r->UnregisterHost(const_cast<char*>(p));
      pinned_.clear();
      pinned_bytes_ = 0;
      return st;
    }
    pinned_.emplace(b.data(), b.size());
    pinned_bytes_ += b.size();
  }
  registrar_ = r;
  return absl::OkStatus();
}

void BufferPool::ClearRegistrar() {
  MutexLock l(&mu_);
  if (registrar_ == nullptr) return;
  for (auto& [p, n] : pinned_) registrar_->UnregisterHost(const_cast<char*>(p));
  pinned_.clear();
  pinned_bytes_ = 0;
  registrar_ = nullptr;
}

uint64_t BufferPool::idle_bytes() const {
  MutexLock l(&mu_);
  return idle_bytes_;
}

uint64_t BufferPool::reused() const {
  MutexLock l(&mu_);
  return reused_;
}

uint64_t BufferPool::pinned_bytes() const {
  MutexLock l(&mu_);
  return pinned_bytes_;
}

uint64_t BufferPool::pin_failures() const {
  MutexLock l(&mu_);
  return pin_failures_;
}

}  // namespace mlpo
