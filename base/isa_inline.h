// MLPO_ISA_INLINE: for helpers in headers that the ISA units (files compiled
// with -mavx2 or -mavx512f: *_avx2.cc, *_avx512.cc) call. An inline function
// those units emit out of line (at -O0, or where the compiler declines to
// inline) is a weak symbol compiled for that ISA, and the linker keeps one
// copy of it for every caller: a CPU without the ISA could run the AVX-512
// copy from the scalar code. Always inlined, no such copy is emitted.
// tests/isa_symbols_check.py fails if an ISA unit defines any weak symbol
// that is not its own ISA's instantiation.
#ifndef MLPO_BASE_ISA_INLINE_H_
#define MLPO_BASE_ISA_INLINE_H_

#define MLPO_ISA_INLINE inline __attribute__((always_inline))

#endif  // MLPO_BASE_ISA_INLINE_H_
