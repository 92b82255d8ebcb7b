// Recycles large aligned buffers by size, so that steady-state checkouts do
// not map and fault in fresh memory for every object. Buffers come back when
// the last copy of a lease is dropped. Keeps at most `max_bytes` idle.
//
// Thread-safe.
#ifndef MLPO_STORE_BUFFER_POOL_H_
#define MLPO_STORE_BUFFER_POOL_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "store/io/io_engine.h"

namespace mlpo {

class BufferPool {
 public:
  explicit BufferPool(uint64_t max_bytes) : max_bytes_(max_bytes) {}
  // A buffer of exactly `size` bytes: a recycled one when available.
  AlignedBuffer Get(size_t size);
  // Keeps `b` for reuse while the idle total stays within max_bytes.
  void Put(AlignedBuffer b);
  uint64_t idle_bytes() const;
  uint64_t reused() const;

 private:
  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, AlignedBuffer> idle_ ABSL_GUARDED_BY(mu_);
  uint64_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mlpo

#endif  // MLPO_STORE_BUFFER_POOL_H_
