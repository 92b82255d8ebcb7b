// AVX-512 implementation of the fused Adam update (16 lanes). Same fp32
// operations in the same order as AdamUpdateScalar; compiled with
// -ffp-contract=off. Tails use the scalar code.
#include <immintrin.h>

#include <algorithm>

#include "optimizer/adam_kernel.h"

namespace mlpo {
namespace {

inline __m512 LoadGrad(const void* base, DType t, size_t i) {
  switch (t) {
    case DType::kF32:
      return _mm512_loadu_ps(static_cast<const float*>(base) + i);
    case DType::kF16:
      return _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i)));
    default: {
      __m256i h = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(base) + i));
      return _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
}

inline void StoreOut(void* base, DType t, size_t i, __m512 x) {
  switch (t) {
    case DType::kF32:
      _mm512_storeu_ps(static_cast<float*>(base) + i, x);
      return;
    case DType::kF16:
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(static_cast<uint16_t*>(base) + i),
          _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      return;
    default: {
      __m512i u = _mm512_castps_si512(x);
      __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16),
                                     _mm512_set1_epi32(1));
      __m512i r = _mm512_srli_epi32(
          _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb),
          16);
      __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16),
                                    _mm512_set1_epi32(0x40));
      __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
      r = _mm512_mask_mov_epi32(r, is_nan, nan);
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(static_cast<uint16_t*>(base) + i),
          _mm512_cvtepi32_epi16(r));
      return;
    }
  }
}

inline __m512 LoadMoment(const void* base, StateFormat f, size_t i) {
  return LoadGrad(base, f == StateFormat::kF32 ? DType::kF32 : DType::kBF16,
                  i);
}
inline void StoreMoment(void* base, StateFormat f, size_t i, __m512 x) {
  StoreOut(base, f == StateFormat::kF32 ? DType::kF32 : DType::kBF16, i, x);
}

// The int8 code map (state_format.h), 16 lanes of int32 codes.
// The code's bits placed as an fp32's exponent and mantissa give its value
// times 2^-112 exactly (exponent 0 is an fp32 subnormal: the code's
// subnormals); one exact product scales it back. Needs subnormals read as
// they are: AdamUpdate runs the kernels with the default MXCSR.
template <int M>
inline __m512 DecodeMag(__m512i q) {
  return _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(q, 23 - M)),
                       _mm512_set1_ps(0x1p112f));
}
template <int M>
inline __m512i EncodeMag(__m512 x) {
  constexpr int k = 23 - M;
  __mmask16 is_sub =
      _mm512_cmp_ps_mask(x, _mm512_set1_ps(0x1p-14f), _CMP_LT_OQ);
  __m512 t = _mm512_add_ps(
      _mm512_mul_ps(x, _mm512_set1_ps(static_cast<float>(1u << (14 + M)))),
      _mm512_set1_ps(8388608.0f));
  __m512i qs = _mm512_sub_epi32(_mm512_castps_si512(t),
                                _mm512_set1_epi32(0x4b000000));
  __m512i u = _mm512_castps_si512(x);
  u = _mm512_add_epi32(
      _mm512_add_epi32(u, _mm512_set1_epi32((1 << (k - 1)) - 1)),
      _mm512_and_si512(_mm512_srli_epi32(u, k), _mm512_set1_epi32(1)));
  __m512i qn = _mm512_sub_epi32(_mm512_srli_epi32(u, k),
                                _mm512_set1_epi32((127 - 15) << M));
  __m512i q = _mm512_mask_mov_epi32(qn, is_sub, qs);
  return _mm512_min_epu32(q, _mm512_set1_epi32((1 << (4 + M)) - 1));
}
inline __m512i LoadCodes(const void* base, size_t i) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(
      reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(base) + i)));
}
inline void StoreCodes(void* base, size_t i, __m512i q) {
  _mm_storeu_si128(
      reinterpret_cast<__m128i*>(static_cast<uint8_t*>(base) + i),
      _mm512_cvtepi32_epi8(q));
}

struct Consts {
  explicit Consts(const AdamStepConsts& c)
      : decay(_mm512_set1_ps(c.decay)),
        l2(_mm512_set1_ps(c.l2)),
        omb1(_mm512_set1_ps(c.one_minus_b1)),
        b2(_mm512_set1_ps(c.b2)),
        omb2(_mm512_set1_ps(c.one_minus_b2)),
        bc2(_mm512_set1_ps(c.bc2_sqrt)),
        eps(_mm512_set1_ps(c.eps)),
        neg_step(_mm512_set1_ps(c.neg_step)),
        gscale(_mm512_set1_ps(c.grad_scale)) {}
  __m512 decay, l2, omb1, b2, omb2, bc2, eps, neg_step, gscale;
};

// AdamElement on 16 lanes: updates p, m, v; returns sqrt of the new v.
inline __m512 Adam16(const Consts& k, __m512 g, __m512* p, __m512* m,
                     __m512* v) {
  g = _mm512_mul_ps(g, k.gscale);
  *p = _mm512_mul_ps(*p, k.decay);
  g = _mm512_add_ps(g, _mm512_mul_ps(k.l2, *p));
  *m = _mm512_add_ps(*m, _mm512_mul_ps(k.omb1, _mm512_sub_ps(g, *m)));
  *v = _mm512_mul_ps(*v, k.b2);
  *v = _mm512_add_ps(*v, _mm512_mul_ps(_mm512_mul_ps(k.omb2, g), g));
  __m512 root = _mm512_sqrt_ps(*v);
  __m512 denom = _mm512_add_ps(_mm512_div_ps(root, k.bc2), k.eps);
  *p = _mm512_add_ps(*p, _mm512_mul_ps(k.neg_step, _mm512_div_ps(*m, denom)));
  return root;
}

void Int8Blocks(const AdamSlice& s, const AdamStepConsts& c) {
  const Consts k(c);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  alignas(64) float mt[kQuantBlock], rt[kQuantBlock];
  for (size_t b0 = 0, b = 0; b0 < s.n; b0 += kQuantBlock, ++b) {
    const size_t end = s.n - b0 < kQuantBlock ? s.n : b0 + kQuantBlock;
    const __m512 sm = _mm512_set1_ps(s.ms[b]), sv = _mm512_set1_ps(s.vs[b]);
    __m512i amv = _mm512_setzero_si512(), arv = _mm512_setzero_si512();
    size_t i = b0;
    for (; i + 16 <= end; i += 16) {
      __m512i mq = LoadCodes(s.m, i);
      __m512 m = _mm512_mul_ps(
          DecodeMag<kM8Mantissa>(_mm512_and_si512(mq, _mm512_set1_epi32(0x7f))),
          sm);
      m = _mm512_castsi512_ps(_mm512_or_si512(
          _mm512_castps_si512(m),
          _mm512_slli_epi32(_mm512_srli_epi32(mq, 7), 31)));
      __m512 r = _mm512_mul_ps(DecodeMag<kV8Mantissa>(LoadCodes(s.v, i)), sv);
      __m512 v = _mm512_mul_ps(r, r);
      __m512 p = _mm512_loadu_ps(s.p + i);
      __m512 root = Adam16(k, LoadGrad(s.grad, s.grad_dtype, i), &p, &m, &v);
      _mm512_storeu_ps(s.p + i, p);
      if (s.out) StoreOut(s.out, s.out_dtype, i, p);
      _mm512_store_ps(mt + (i - b0), m);
      _mm512_store_ps(rt + (i - b0), root);
      amv = _mm512_max_epu32(amv,
                             _mm512_and_si512(_mm512_castps_si512(m), abs_mask));
      arv = _mm512_max_epu32(
          arv, _mm512_and_si512(_mm512_castps_si512(root), abs_mask));
    }
    uint32_t am = _mm512_reduce_max_epu32(amv),
             ar = _mm512_reduce_max_epu32(arv);
    Int8PassScalar(s, c, b, b0, i, end, mt, rt, &am, &ar);
    s.ms[b] = BlockScale(am, kM8Max);
    s.vs[b] = BlockScale(ar, kV8Max);
    const __m512 nm = _mm512_set1_ps(InverseScale(s.ms[b])),
                 nv = _mm512_set1_ps(InverseScale(s.vs[b]));
    const bool mzero = s.ms[b] == 0.0f, vzero = s.vs[b] == 0.0f;
    for (i = b0; i + 16 <= end; i += 16) {
      __m512i mi = _mm512_castps_si512(_mm512_load_ps(mt + (i - b0)));
      __m512i mq =
          mzero ? _mm512_setzero_si512()
                : EncodeMag<kM8Mantissa>(_mm512_mul_ps(
                      _mm512_castsi512_ps(_mm512_and_si512(mi, abs_mask)), nm));
      mq = _mm512_or_si512(mq, _mm512_slli_epi32(_mm512_srli_epi32(mi, 31), 7));
      __m512i vq = vzero ? _mm512_setzero_si512()
                         : EncodeMag<kV8Mantissa>(
                               _mm512_mul_ps(_mm512_load_ps(rt + (i - b0)), nv));
      StoreCodes(s.m, i, mq);
      StoreCodes(s.v, i, vq);
    }
    EncodeBlockScalar(s, b, b0, i, end, mt, rt);
  }
}

}  // namespace

namespace {

// Adds g's 16 values to the statistics: lane j to accumulator j (lo_acc
// holds 0..7, hi_acc 8..15); non-finite values are counted, not summed
// (rare: a branch, not work on every group). Each square is exact in
// double, so the fused multiply-add rounds as a multiply then an add would
// (the other ISAs' order, bit for bit).
inline void AddStats(__m512 g, __m512d* lo_acc, __m512d* hi_acc,
                     uint64_t* nonfinite) {
  const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
  __mmask16 bad = _mm512_cmpeq_epi32_mask(
      _mm512_and_si512(_mm512_castps_si512(g), exp_mask), exp_mask);
  if (__builtin_expect(bad != 0, 0)) {
    *nonfinite += static_cast<uint64_t>(__builtin_popcount(bad));
    g = _mm512_maskz_mov_ps(static_cast<__mmask16>(~bad), g);
  }
  __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(g));
  __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(
      _mm512_extractf64x4_pd(_mm512_castps_pd(g), 1)));
  *lo_acc = _mm512_fmadd_pd(lo, lo, *lo_acc);
  *hi_acc = _mm512_fmadd_pd(hi, hi, *hi_acc);
}

// The copying form: each group of 16 is loaded once, stored to dst and
// added to the statistics from the register. (Streaming stores measured
// slower here: the loop is bound by the statistics' arithmetic.)
template <DType T>
size_t CopyStatsLoop(char* dst, const char* src, size_t n, __m512d* lo_acc,
                     __m512d* hi_acc, uint64_t* nonfinite) {
  constexpr size_t kBytes = T == DType::kF32 ? 64 : 32;  // per 16 values
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const char* s = src + i / 16 * kBytes;
    char* d = dst + i / 16 * kBytes;
    __m512 g;
    if constexpr (T == DType::kF32) {
      __m512i raw = _mm512_loadu_si512(s);
      _mm512_storeu_si512(d, raw);
      g = _mm512_castsi512_ps(raw);
    } else {
      __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), raw);
      if constexpr (T == DType::kF16) {
        g = _mm512_cvtph_ps(raw);
      } else {
        g = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
      }
    }
    AddStats(g, lo_acc, hi_acc, nonfinite);
  }
  return i;
}

}  // namespace

size_t AccumulateGradStatsAvx512(const void* grad, DType dtype, size_t n,
                                 double lanes[16], uint64_t* nonfinite_out) {
  // Lanes 0..7 and 8..15 of the 16 accumulators (element i -> i % 16).
  __m512d lo_acc = _mm512_loadu_pd(lanes), hi_acc = _mm512_loadu_pd(lanes + 8);
  uint64_t nonfinite = 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    AddStats(LoadGrad(grad, dtype, i), &lo_acc, &hi_acc, &nonfinite);
  _mm512_storeu_pd(lanes, lo_acc);
  _mm512_storeu_pd(lanes + 8, hi_acc);
  *nonfinite_out += nonfinite;
  return i;
}

size_t CopyAccumulateGradStatsAvx512(void* dst, const void* src, DType dtype,
                                     size_t n, double lanes[16],
                                     uint64_t* nonfinite_out) {
  __m512d lo_acc = _mm512_loadu_pd(lanes), hi_acc = _mm512_loadu_pd(lanes + 8);
  uint64_t nonfinite = 0;
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  size_t i;
  switch (dtype) {
    case DType::kF32:
      i = CopyStatsLoop<DType::kF32>(d, s, n, &lo_acc, &hi_acc, &nonfinite);
      break;
    case DType::kF16:
      i = CopyStatsLoop<DType::kF16>(d, s, n, &lo_acc, &hi_acc, &nonfinite);
      break;
    default:
      i = CopyStatsLoop<DType::kBF16>(d, s, n, &lo_acc, &hi_acc, &nonfinite);
      break;
  }
  _mm512_storeu_pd(lanes, lo_acc);
  _mm512_storeu_pd(lanes + 8, hi_acc);
  *nonfinite_out += nonfinite;
  return i;
}

void AdamUpdateAvx512(const AdamSlice& s, const AdamStepConsts& c) {
  if (s.format == StateFormat::kInt8Moments) return Int8Blocks(s, c);
  const Consts k(c);
  size_t i = 0;
  for (; i + 16 <= s.n; i += 16) {
    __m512 p = _mm512_loadu_ps(s.p + i);
    __m512 m = LoadMoment(s.m, s.format, i);
    __m512 v = LoadMoment(s.v, s.format, i);
    Adam16(k, LoadGrad(s.grad, s.grad_dtype, i), &p, &m, &v);
    _mm512_storeu_ps(s.p + i, p);
    StoreMoment(s.m, s.format, i, m);
    StoreMoment(s.v, s.format, i, v);
    if (s.out) StoreOut(s.out, s.out_dtype, i, p);
  }
  AdamUpdateScalarFrom(s, c, i);
}

}  // namespace mlpo
