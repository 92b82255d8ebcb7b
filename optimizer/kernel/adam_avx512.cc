// AVX-512 implementation of the fused Adam update (16 lanes): the loops of
// adam_simd.inc on this ISA's vector operations (vec_avx512.h). Compiled
// with -ffp-contract=off. Tails use the scalar code.
#include "optimizer/kernel/adam.h"
#include "optimizer/kernel/vec_avx512.h"
#include "optimizer/kernel/adam_simd.inc"

namespace mlpo {

void AdamUpdateAvx512(const AdamSlice& s, const AdamStepConsts& c) {
  AdamUpdateVector<V>(s, c);
}

}  // namespace mlpo
