// Recycles large aligned buffers by size, so that steady-state checkouts do
// not map and fault in fresh memory for every object. Buffers come back when
// the last copy of a lease is dropped. Keeps at most `max_bytes` idle.
//
// With a registrar (a GPU backend), every buffer the pool hands out is
// pinned for DMA once, when it is made, and unpinned before the pool frees
// it: the same pages then serve O_DIRECT I/O and device copies. Buffers
// freed elsewhere (the DRAM tier's, at close) must be unpinned first:
// ClearRegistrar() unpins every buffer the pool pinned, and the store calls
// it while they are all still alive.
//
// Thread-safe.
#ifndef MLPO_STORE_BUFFER_POOL_H_
#define MLPO_STORE_BUFFER_POOL_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "base/mutex.h"
#include "base/host_registrar.h"
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

  // Pins the idle buffers now and every buffer made from now on. Not
  // owned; must outlive the pool or ClearRegistrar(). A buffer that cannot
  // be pinned still serves I/O (counted in pin_failures()); an error here
  // means an idle buffer could not be pinned and nothing stays registered.
  absl::Status SetRegistrar(HostRegistrar* r);
  void ClearRegistrar();  // unpins everything the pool pinned
  uint64_t pinned_bytes() const;
  uint64_t pin_failures() const;

 private:
  void PinLocked(const AlignedBuffer& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnpinLocked(const AlignedBuffer& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const uint64_t max_bytes_;
  mutable Mutex mu_;
  std::multimap<size_t, AlignedBuffer> idle_ ABSL_GUARDED_BY(mu_);
  uint64_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reused_ ABSL_GUARDED_BY(mu_) = 0;
  HostRegistrar* registrar_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::map<const char*, size_t> pinned_ ABSL_GUARDED_BY(mu_);
  uint64_t pinned_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pin_failures_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace mlpo

#endif  // MLPO_STORE_BUFFER_POOL_H_
