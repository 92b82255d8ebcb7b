// xxh3-64 of extents, dispatched at run time to the widest vector unit.
// Debian's libxxhash is built for baseline x86-64 (SSE2, ~6 GB/s here);
// hashing every byte an update moves at that speed costs as much CPU as the
// optimizer itself. The Debian header compiled inline with AVX2 or AVX-512
// computes the same values at ~10-12 GB/s.
//
// Layer store/checksum: may include base/ only.
#ifndef MLPO_STORE_CHECKSUM_CHECKSUM_H_
#define MLPO_STORE_CHECKSUM_CHECKSUM_H_

#include <cstddef>
#include <cstdint>

namespace mlpo {

uint64_t Checksum(const void* data, size_t n);

// Per-ISA implementations (one translation unit each).
uint64_t ChecksumBaseline(const void* data, size_t n);
uint64_t ChecksumAvx2(const void* data, size_t n);
uint64_t ChecksumAvx512(const void* data, size_t n);

}  // namespace mlpo

#endif  // MLPO_STORE_CHECKSUM_CHECKSUM_H_
