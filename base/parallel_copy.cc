#include "base/parallel_copy.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

namespace mlpo {

void ParallelCopy(void* dst, const void* src, size_t n) {
  if (n == 0) return;  // (memcpy of 0 bytes from a null pointer is UB)
  constexpr size_t kMinPiece = size_t{4} << 20;
  size_t cores = std::max(1u, std::thread::hardware_concurrency());
  size_t pieces = std::min(cores, std::max<size_t>(1, n / kMinPiece));
  if (pieces <= 1) {
    std::memcpy(dst, src, n);
    return;
  }
  // Piece boundaries on 4 KiB multiples (whole pages per thread).
  size_t step = ((n / pieces) + 4095) & ~size_t{4095};
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  std::vector<std::thread> threads;
  for (size_t at = step; at < n; at += step)
    threads.emplace_back([=] { std::memcpy(d + at, s + at, std::min(step, n - at)); });
  std::memcpy(d, s, std::min(step, n));
  for (auto& t : threads) t.join();
}

}  // namespace mlpo
