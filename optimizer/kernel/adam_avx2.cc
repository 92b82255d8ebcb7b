// AVX2 + F16C implementation of the fused Adam update (8 lanes): the
// loops of adam_simd.inc on this ISA's vector operations (vec_avx2.h).
// Compiled with -ffp-contract=off so no FMA changes a rounding. Tails use
// the scalar code.
#include "optimizer/kernel/adam.h"
#include "optimizer/kernel/vec_avx2.h"
#include "optimizer/kernel/adam_simd.inc"

namespace mlpo {

void AdamUpdateAvx2(const AdamSlice& s, const AdamStepConsts& c) {
  AdamUpdateVector<V>(s, c);
}

}  // namespace mlpo
