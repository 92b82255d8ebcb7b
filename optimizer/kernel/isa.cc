#include "optimizer/kernel/isa.h"

#include <cpuid.h>
#include <xmmintrin.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace mlpo {

const char* KernelIsaName(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512: return "avx512";
    case KernelIsa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

namespace {
// CPUID.1:ECX bit 29 (clang 14's __builtin_cpu_supports does not know f16c).
bool HasF16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
}  // namespace

bool KernelIsaSupported(KernelIsa isa) {
  switch (isa) {
    case KernelIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
    case KernelIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && HasF16c();
    default:
      return true;
  }
}

KernelIsa BestKernelIsa() {
  static const KernelIsa best = [] {
    KernelIsa cap = KernelIsa::kAvx512;
    if (const char* e = std::getenv("MLPO_KERNEL_ISA")) {
      if (std::strcmp(e, "scalar") == 0) cap = KernelIsa::kScalar;
      else if (std::strcmp(e, "avx2") == 0) cap = KernelIsa::kAvx2;
    }
    for (KernelIsa k : {KernelIsa::kAvx512, KernelIsa::kAvx2})
      if (static_cast<int>(k) <= static_cast<int>(cap) && KernelIsaSupported(k))
        return k;
    return KernelIsa::kScalar;
  }();
  return best;
}

IeeeDefaults::IeeeDefaults() : saved_(_mm_getcsr()) { _mm_setcsr(0x1f80); }
IeeeDefaults::~IeeeDefaults() { _mm_setcsr(saved_); }

}  // namespace mlpo
