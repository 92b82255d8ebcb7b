// A memcpy of a large blob spread over the machine's cores: the DRAM tier
// hands a dirty version to a checkout by copy, and one core's copy is
// slower than the memory system.
//
// Thread-safety: a pure function of its arguments.
#ifndef MLPO_BASE_PARALLEL_COPY_H_
#define MLPO_BASE_PARALLEL_COPY_H_

#include <cstddef>

namespace mlpo {

// memcpy(dst, src, n), in up to hardware-concurrency pieces of at least
// 4 MiB each on short-lived threads (one piece on the caller's).
void ParallelCopy(void* dst, const void* src, size_t n);

}  // namespace mlpo

#endif  // MLPO_BASE_PARALLEL_COPY_H_
