"""Reference implementation of mlpo's state formats in numpy, written from
the specification in optimizer/kernel/state_codec.h and independent of the C++
code (python/tests/test_codecs.py holds the two together bit for bit).

  fp32          m, v float32
  bf16-moments  m, v bfloat16, round to nearest even
  int8-moments  per block of 256 elements (blocks restart at every
                parameter): scale = largest magnitude / largest code value;
                m: sign bit + a 7-bit float code (4 exponent bits, bias 15,
                exponent 0 = subnormal; 3 mantissa bits; largest 1.875);
                v: r = sqrt(v) as an 8-bit float code (4 exponent, 4
                mantissa bits; largest 1.9375); code = round-half-even of
                |x| * (1 / scale) (float32 reciprocal, then float32
                product), value = code value * scale.

The codes' values are computed here in float64 from their definition
(frexp and rint), not by the bit manipulation the kernels use."""
import numpy as np

BLOCK = 256
M_MANTISSA, V_MANTISSA = 3, 4


def code_value(q, mantissa):
    """Value of magnitude codes `q` (float64)."""
    q = np.asarray(q, dtype=np.int64)
    e, f = q >> mantissa, q & ((1 << mantissa) - 1)
    sub = f * 2.0 ** (-14 - mantissa)
    normal = (1 + f / 2.0 ** mantissa) * np.exp2(e.astype(np.float64) - 15)
    return np.where(e == 0, sub, normal)


def max_value(mantissa):
    return float(code_value((1 << (4 + mantissa)) - 1, mantissa))


def encode_magnitude(x, mantissa):
    """Nearest code (ties to even) of float32 values x >= 0; NaN and values
    past the largest code saturate."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    top = (1 << (4 + mantissa)) - 1
    with np.errstate(invalid="ignore", over="ignore"):
        sub = np.rint(x * 2.0 ** (14 + mantissa))
        frac, exp = np.frexp(np.where(np.isfinite(x) & (x > 0), x, 1.0))
        # x = frac * 2^exp, frac in [0.5, 1): binade exp - 1.
        steps = np.rint(frac * 2.0 ** (mantissa + 1))  # 2^M .. 2^(M+1)
        normal = ((exp - 1 + 15) << mantissa) + (steps - 2 ** mantissa)
        q = np.where(x < 2.0 ** -14, sub, normal)
        q = np.where(np.isnan(x) | (x == np.inf), top, q)
    return np.minimum(q, top).astype(np.int64)


def _largest(x):
    """Largest magnitude of float32 values, ordered as their bit patterns
    (so NaN above inf, as the kernels do)."""
    bits = np.abs(np.asarray(x, np.float32)).view(np.uint32)
    return np.array(bits.max() if bits.size else 0, np.uint32).view(np.float32)


def blocks(n, pieces=(0,)):
    """[(start, end)] of the quantization blocks of n elements whose
    parameters start at `pieces`."""
    starts = sorted(set([0] + [int(p) for p in pieces if 0 < p < n]))
    out = []
    for k, a in enumerate(starts):
        b = starts[k + 1] if k + 1 < len(starts) else n
        out += [(s, min(s + BLOCK, b)) for s in range(a, b, BLOCK)]
    return out


def bf16_encode(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where(nan, (u >> 16) | 0x40, r).astype(np.uint16)


def bf16_decode(h):
    return (np.asarray(h, np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode_int8(m, v, pieces=(0,)):
    """(m codes, v codes, m scales, v scales) of float32 m and v."""
    return _encode_int8_root(m, np.sqrt(np.asarray(v, np.float32)), pieces)


def _encode_int8_root(m, r, pieces):
    m = np.asarray(m, np.float32)
    mc = np.zeros(m.size, np.uint8)
    vc = np.zeros(m.size, np.uint8)
    bl = blocks(m.size, pieces)
    ms = np.zeros(len(bl), np.float32)
    vs = np.zeros(len(bl), np.float32)
    mmax = np.float32(max_value(M_MANTISSA))
    vmax = np.float32(max_value(V_MANTISSA))
    for b, (a, e) in enumerate(bl):
        ms[b] = _largest(m[a:e]) / mmax
        vs[b] = _largest(r[a:e]) / vmax
        sign = (m[a:e].view(np.uint32) >> 31).astype(np.int64)
        with np.errstate(invalid="ignore", divide="ignore"):
            qm = (encode_magnitude(np.abs(m[a:e]) * (np.float32(1) / ms[b]),
                                   M_MANTISSA) if ms[b] != 0 else 0)
            qv = (encode_magnitude(r[a:e] * (np.float32(1) / vs[b]),
                                   V_MANTISSA) if vs[b] != 0 else 0)
        mc[a:e] = (sign << 7) | qm
        vc[a:e] = qv
    return mc, vc, ms, vs


def decode_int8(mc, vc, ms, vs, pieces=(0,)):
    """float32 (m, v)."""
    mc = np.asarray(mc, np.uint8)
    m = np.zeros(mc.size, np.float32)
    v = np.zeros(mc.size, np.float32)
    for b, (a, e) in enumerate(blocks(mc.size, pieces)):
        mag = code_value(mc[a:e] & 0x7F, M_MANTISSA).astype(np.float32) * ms[b]
        sign = (mc[a:e].astype(np.uint32) >> 7) << 31
        m[a:e] = (mag.view(np.uint32) | sign).view(np.float32)
        r = code_value(vc[a:e], V_MANTISSA).astype(np.float32) * vs[b]
        v[a:e] = r * r
    return m, v


def step_consts(lr, beta1, beta2, eps, weight_decay, t, grad_scale=1.0,
                mode="adamw"):
    """The kernel's per-step float32 constants (optimizer/kernel/adam.h)."""
    adamw = mode == "adamw"
    f = np.float32
    return dict(decay=f(1.0 - lr * weight_decay if adamw else 1.0),
                l2=f(0.0 if adamw else weight_decay), omb1=f(1.0 - beta1),
                b2=f(beta2), omb2=f(1.0 - beta2),
                bc2=f(np.sqrt(1.0 - beta2 ** t)), eps=f(eps),
                neg_step=f(-(lr / (1.0 - beta1 ** t))), gs=f(grad_scale))


def adam_step(p, m, v, g, c):
    """One AdamW/Adam update in float32, operation by operation as the
    kernel (no fused multiply-add). Returns (p, m, v, sqrt(v))."""
    g = g.astype(np.float32) * c["gs"]
    p = p * c["decay"]
    g = g + c["l2"] * p
    m = m + c["omb1"] * (g - m)
    v = v * c["b2"]
    v = v + (c["omb2"] * g) * g
    root = np.sqrt(v)
    p = p + c["neg_step"] * (m / (root / c["bc2"] + c["eps"]))
    return p, m, v, root


def step(fmt, p, state, g, c, pieces=(0,)):
    """One update of a state held in format `fmt` (state: (m, v) or for
    int8 (mc, vc, ms, vs)); returns (p, new state)."""
    p = np.asarray(p, np.float32)
    if fmt == "fp32":
        p, m, v, _ = adam_step(p, state[0], state[1], g, c)
        return p, (m, v)
    if fmt == "bf16-moments":
        p, m, v, _ = adam_step(p, bf16_decode(state[0]), bf16_decode(state[1]),
                               g, c)
        return p, (bf16_encode(m), bf16_encode(v))
    m, v = decode_int8(*state, pieces)
    p, m, v, root = adam_step(p, m, v, g, c)
    # The kernel encodes the root it computed for the update.
    return p, _encode_int8_root(m, root, pieces)
