// xxh3-64 compiled for avx512 (see checksum.h).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "store/checksum/checksum.h"

namespace mlpo {

uint64_t ChecksumAvx512(const void* data, size_t n) {
  return XXH3_64bits(data, n);
}

}  // namespace mlpo
