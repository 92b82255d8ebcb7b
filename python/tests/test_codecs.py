"""The C++ state-format codecs and fused kernel against the independent
numpy reference (mlpo/codecs.py), bit for bit, on random data with
extremes: zeros, subnormals, huge values, a block of one sign, parameters
that cut blocks short."""
import numpy as np
import pytest
import torch

from mlpo import _mlpo, codecs

FORMATS = ["fp32", "bf16-moments", "int8-moments"]
ISAS = ["scalar", "avx2", "avx512"]


def moments(n, seed):
    rng = np.random.default_rng(seed)
    m = (rng.standard_normal(n) * 1e-3).astype(np.float32)
    v = (m.astype(np.float64) ** 2 * 3 + 1e-12).astype(np.float32)
    m[::97] = 0
    v[::97] = 0
    m[5::101] = np.float32(1e-41)          # subnormal
    v[5::101] = np.float32(1e-44)
    m[7::89] = np.float32(-3e33)           # huge
    v[7::89] = np.float32(2e37)
    m[11::83] = -0.0
    if n > 512:
        m[256:512] = np.abs(m[256:512])    # one sign
    if n > 768:
        m[512:768] = 0
        v[512:768] = 0                     # an all-zero block
    return m, v


def bits(a):
    a = np.asarray(a)
    return a.view(np.uint8) if a.dtype != np.uint8 else a


@pytest.mark.parametrize("n,pieces", [(1, [0]), (255, [0]), (257, [0]),
                                      (1000, [0, 300, 301, 900]),
                                      (5000, [0, 17, 4000])])
@pytest.mark.parametrize("seed", [0, 1])
def test_int8_encode_decode_match_the_reference(n, pieces, seed):
    m, v = moments(n, seed)
    got = _mlpo.codec_encode("int8-moments", m, v, pieces)
    want = codecs.encode_int8(m, v, pieces)
    for name, g, w in zip(("m codes", "v codes", "m scales", "v scales"),
                          got, want):
        assert np.array_equal(bits(g), bits(w)), name
    dm, dv = _mlpo.codec_decode("int8-moments", *got, pieces)
    rm, rv = codecs.decode_int8(*want, pieces)
    assert np.array_equal(bits(dm), bits(rm))
    assert np.array_equal(bits(dv), bits(rv))
    # Within half a code step of the block's scale (1/16 of |m|, 1/32 of
    # sqrt(v), or the smallest code).
    for b, (a, e) in enumerate(codecs.blocks(n, pieces)):
        big = np.abs(m[a:e]) < 1e30
        tol = np.abs(m[a:e]) / 16 + want[2][b] * 2.0 ** -17
        assert np.all(np.abs(dm[a:e] - m[a:e])[big] <= tol[big])


def test_bf16_matches_torch_rounding():
    m, v = moments(3000, 4)
    mc, vc, _, _ = _mlpo.codec_encode("bf16-moments", m, v, [0])
    t = torch.from_numpy(m).to(torch.bfloat16).view(torch.int16).numpy()
    assert np.array_equal(mc.view(np.int16), t)
    assert np.array_equal(mc, codecs.bf16_encode(m))
    assert np.array_equal(vc, codecs.bf16_encode(v))


def test_every_code_value_and_ties_to_even():
    for mant in (codecs.M_MANTISSA, codecs.V_MANTISSA):
        q = np.arange(1 << (4 + mant))
        vals = codecs.code_value(q, mant).astype(np.float32)
        assert np.all(np.diff(vals) > 0)
        assert np.array_equal(codecs.encode_magnitude(vals, mant), q)
        mids = ((vals[:-1].astype(np.float64) + vals[1:]) / 2).astype(np.float32)
        even = np.where(q[:-1] % 2 == 0, q[:-1], q[:-1] + 1)
        assert np.array_equal(codecs.encode_magnitude(mids, mant), even)
    # Through the C++ encoder: a block whose largest |m| maps to 1.875 puts
    # every other element on a code value or a midpoint.
    vals = codecs.code_value(np.arange(128), 3).astype(np.float32)
    m = np.concatenate([vals, ((vals[:-1].astype(np.float64) + vals[1:]) / 2)
                        .astype(np.float32)])[:256]
    m[0] = np.float32(1.875)
    got = _mlpo.codec_encode("int8-moments", m, np.zeros_like(m), [0])
    want = codecs.encode_int8(m, np.zeros_like(m), [0])
    assert np.array_equal(got[0], want[0])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("isa", ISAS)
def test_kernel_step_matches_the_reference(fmt, isa):
    n = 1000
    rng = np.random.default_rng(7)
    p = rng.standard_normal(n).astype(np.float32)
    m, v = moments(n, 3)
    m[7::89] = np.float32(-3e3)   # huge but not overflowing g^2 sums
    v[7::89] = np.float32(2e7)
    if fmt == "fp32":
        state = (m.copy(), v.copy())
    elif fmt == "bf16-moments":
        state = (codecs.bf16_encode(m), codecs.bf16_encode(v))
    else:
        state = codecs.encode_int8(m, v)
    hyper = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1,
                 mode="adamw")
    cpp_p = p.copy()
    cpp = [np.array(x, copy=True) for x in state]
    if fmt != "int8-moments":
        cpp += [np.zeros(1, np.float32), np.zeros(1, np.float32)]
    for t in (1, 2, 3):
        g = (rng.standard_normal(n) * 1e-2).astype(np.float32)
        g[::53] = 0
        g[3::59] = np.float32(40.0)
        try:
            _mlpo.kernel_step(fmt, isa, cpp_p, cpp[0], cpp[1], cpp[2], cpp[3],
                              g, hyper, t, 0.5)
        except ValueError as e:
            pytest.skip(str(e))
        c = codecs.step_consts(hyper["lr"], hyper["beta1"], hyper["beta2"],
                               hyper["eps"], hyper["weight_decay"], t, 0.5)
        p, state = codecs.step(fmt, p, state, g, c)
        assert np.array_equal(bits(cpp_p), bits(p)), f"p at step {t}"
        for k, ref in enumerate(state):
            assert np.array_equal(bits(cpp[k]), bits(ref)), \
                f"state part {k} at step {t}"


def test_bad_format_name():
    with pytest.raises(ValueError, match="int8-moments"):
        _mlpo.codec_encode("int8", np.zeros(4, np.float32),
                           np.zeros(4, np.float32), [0])
