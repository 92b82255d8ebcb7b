#include "optimizer/kernel/adam.h"

#include <algorithm>
#include <cmath>

namespace mlpo {

AdamStepConsts MakeStepConsts(const RuleHyper& h, uint64_t t,
                              double grad_scale) {
  AdamStepConsts c;
  bool adamw = h.mode == AdamMode::kAdamW;
  c.decay = static_cast<float>(adamw ? 1.0 - h.lr * h.weight_decay : 1.0);
  c.l2 = static_cast<float>(adamw ? 0.0 : h.weight_decay);
  c.one_minus_b1 = static_cast<float>(1.0 - h.beta1);
  c.b2 = static_cast<float>(h.beta2);
  c.one_minus_b2 = static_cast<float>(1.0 - h.beta2);
  double bc1 = 1.0 - std::pow(h.beta1, static_cast<double>(t));
  double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(t));
  c.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  c.eps = static_cast<float>(h.eps);
  c.neg_step = static_cast<float>(-(h.lr / bc1));
  c.grad_scale = static_cast<float>(h.maximize ? -grad_scale : grad_scale);
  return c;
}

void AdamUpdate(const AdamSlice& s, const AdamStepConsts& c, KernelIsa isa) {
  IeeeDefaults ieee;
  switch (isa) {
    case KernelIsa::kAvx512: AdamUpdateAvx512(s, c); break;
    case KernelIsa::kAvx2: AdamUpdateAvx2(s, c); break;
    default: AdamUpdateScalar(s, c); break;
  }
}

namespace {
// The update of one element, m and v in fp32; returns sqrt of the new v.
inline float AdamElement(float g, float* p_io, float* m_io, float* v_io,
                         const AdamStepConsts& c) {
  g = g * c.grad_scale;
  float p = *p_io * c.decay;
  g = g + c.l2 * p;
  float m = *m_io;
  m = m + c.one_minus_b1 * (g - m);
  float v = *v_io * c.b2;
  v = v + (c.one_minus_b2 * g) * g;
  float root = std::sqrt(v);
  float denom = root / c.bc2_sqrt + c.eps;
  *p_io = p + c.neg_step * (m / denom);
  *m_io = m;
  *v_io = v;
  return root;
}
}  // namespace

void Int8PassScalar(const AdamSlice& s, const AdamStepConsts& c, size_t b,
                    size_t b0, size_t from, size_t to, float* mt, float* rt,
                    uint32_t* am, uint32_t* ar) {
  const uint8_t* mc = static_cast<const uint8_t*>(s.m);
  const uint8_t* vc = static_cast<const uint8_t*>(s.v);
  for (size_t i = from; i < to; ++i) {
    float m = DecodeM8(mc[i], s.ms[b]);
    float r = DecodeV8(vc[i], s.vs[b]);
    float v = r * r;
    float root =
        AdamElement(LoadAsFloat(s.grad, s.grad_dtype, i), s.p + i, &m, &v, c);
    if (s.out) StoreFromFloat(s.out, s.out_dtype, i, s.p[i]);
    mt[i - b0] = m;
    rt[i - b0] = root;
    *am = std::max(*am, FloatBits(m) & 0x7fffffffu);
    *ar = std::max(*ar, FloatBits(root) & 0x7fffffffu);
  }
}

void EncodeBlockScalar(const AdamSlice& s, size_t b, size_t b0, size_t from,
                       size_t to, const float* mt, const float* rt) {
  uint8_t* mc = static_cast<uint8_t*>(s.m);
  uint8_t* vc = static_cast<uint8_t*>(s.v);
  for (size_t i = from; i < to; ++i) {
    mc[i] = EncodeM8(mt[i - b0], s.ms[b]);
    vc[i] = EncodeV8(rt[i - b0], s.vs[b]);
  }
}

void AdamUpdateScalar(const AdamSlice& s, const AdamStepConsts& c) {
  switch (s.format) {
    case StateFormat::kF32: {
      float* m = static_cast<float*>(s.m);
      float* v = static_cast<float*>(s.v);
      for (size_t i = 0; i < s.n; ++i) {
        AdamElement(LoadAsFloat(s.grad, s.grad_dtype, i), s.p + i, m + i,
                    v + i, c);
        if (s.out) StoreFromFloat(s.out, s.out_dtype, i, s.p[i]);
      }
      return;
    }
    case StateFormat::kBF16Moments: {
      uint16_t* mh = static_cast<uint16_t*>(s.m);
      uint16_t* vh = static_cast<uint16_t*>(s.v);
      for (size_t i = 0; i < s.n; ++i) {
        float m = BF16ToFloat(mh[i]), v = BF16ToFloat(vh[i]);
        AdamElement(LoadAsFloat(s.grad, s.grad_dtype, i), s.p + i, &m, &v, c);
        mh[i] = FloatToBF16(m);
        vh[i] = FloatToBF16(v);
        if (s.out) StoreFromFloat(s.out, s.out_dtype, i, s.p[i]);
      }
      return;
    }
    case StateFormat::kInt8Moments: {
      float mt[kQuantBlock], rt[kQuantBlock];
      for (size_t b0 = 0, b = 0; b0 < s.n; b0 += kQuantBlock, ++b) {
        size_t end = std::min<size_t>(b0 + kQuantBlock, s.n);
        uint32_t am = 0, ar = 0;
        Int8PassScalar(s, c, b, b0, b0, end, mt, rt, &am, &ar);
        s.ms[b] = BlockScale(am, kM8Max);
        s.vs[b] = BlockScale(ar, kV8Max);
        EncodeBlockScalar(s, b, b0, b0, end, mt, rt);
      }
      return;
    }
  }
}

void AdamUpdateScalarFrom(const AdamSlice& s, const AdamStepConsts& c,
                          size_t from) {
  if (from >= s.n) return;
  AdamSlice tail = s;
  tail.p += from;
  const size_t msize = MomentBytes(s.format);  // not int8: whole blocks
  tail.m = static_cast<char*>(s.m) + from * msize;
  tail.v = static_cast<char*>(s.v) + from * msize;
  tail.grad = static_cast<const char*>(s.grad) + from * DTypeSize(s.grad_dtype);
  if (s.out)
    tail.out = static_cast<char*>(s.out) + from * DTypeSize(s.out_dtype);
  tail.n = s.n - from;
  AdamUpdateScalar(tail, c);
}

}  // namespace mlpo
