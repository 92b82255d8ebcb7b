#include "store/checksum/checksum.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace mlpo {
namespace {

using Fn = uint64_t (*)(const void*, size_t);

Fn Pick() {
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
    return ChecksumAvx512;
  if (__builtin_cpu_supports("avx2")) return ChecksumAvx2;
  return ChecksumBaseline;
}

const Fn g_fn = Pick();

}  // namespace

uint64_t ChecksumBaseline(const void* data, size_t n) {
  return XXH3_64bits(data, n);
}
uint64_t Checksum(const void* data, size_t n) { return g_fn(data, n); }

}  // namespace mlpo
