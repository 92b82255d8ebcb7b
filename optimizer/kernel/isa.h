// Which vector ISA the kernels run (docs/design.md "Kernels"): every kernel
// has a scalar, an AVX2 (+F16C) and an AVX-512 implementation, each in its
// own translation unit compiled for its ISA (*_avx2.cc, *_avx512.cc), and
// all of them round alike bit for bit, so the choice changes only speed.
//
// Thread-safety: BestKernelIsa is computed once (thread-safe static);
// the rest are pure.
#ifndef MLPO_OPTIMIZER_KERNEL_ISA_H_
#define MLPO_OPTIMIZER_KERNEL_ISA_H_

namespace mlpo {

enum class KernelIsa { kScalar, kAvx2, kAvx512 };
const char* KernelIsaName(KernelIsa isa);
// The best ISA this CPU supports (MLPO_KERNEL_ISA=scalar|avx2|avx512 caps it).
KernelIsa BestKernelIsa();
bool KernelIsaSupported(KernelIsa isa);

// Runs its body with the IEEE defaults in MXCSR (round to nearest, no
// flush-to-zero, no denormals-are-zero) whatever the calling thread set
// (torch.set_flush_denormal sets FTZ/DAZ on its threads): every ISA and the
// reference then round alike. Restores the caller's MXCSR.
class IeeeDefaults {
 public:
  IeeeDefaults();
  ~IeeeDefaults();
  IeeeDefaults(const IeeeDefaults&) = delete;
  IeeeDefaults& operator=(const IeeeDefaults&) = delete;

 private:
  unsigned saved_;
};

}  // namespace mlpo

#endif  // MLPO_OPTIMIZER_KERNEL_ISA_H_
