"""The fp8 gemm (feature "fp8") through gemmd.Client and gemmd.aio.Client against a real daemon,
and gemmd.fp8, the converter it needs.

gemm: fresh random e4m3 and e5m2 operands (uniform in [-1, 1) rounded by gemmd.fp8) on odd
shapes, the four transposes, batches and a batch by one b, alpha, beta and the per-tensor scales,
the bias row with ReLU, GELU and its tanh form, out_dtype bf16 and f16, out= (poisoned, C and
Fortran order), shared memory (shm_array operands and out=, and the automatic scratch), resident
operands (put as the format), submit() and asyncio; each result against the float64 product of
the fp8 values within 2^-10 sum |alpha scale_a scale_b a b| + 2^-22 |ref| (what Hopper's fp8
tensor cores keep; the CPU is exact to f32). What the client refuses before sending (TypeError /
ValueError), the daemon answers INVALID_ARGUMENT when sent raw, with the connection still
serving; the header carries the scales only when not 1 and no out_dtype (a fake daemon reads it).

gemmd.fp8: every code round-trips from_* then to_* bit for bit (NaNs aside), midpoints round to
even, overflow saturates, NaN and infinities follow the formats' rules, and the daemon (whose
C converter decodes) reads every code as from_* does.
"""

import asyncio
import math
import subprocess
import sys

import numpy as np
import pytest

import gemmd
import gemmd.aio
import gemmd_harness as h
from gemmd import fp8
from test_i8 import expect_refused_raw, raw_gemm
from test_out_dtype import fake_gemm_server

FORMATS = {"e4m3": (fp8.to_e4m3, fp8.from_e4m3, 448.0),
           "e5m2": (fp8.to_e5m2, fp8.from_e5m2, 57344.0)}
CODES = np.arange(256, dtype=np.uint8)
_erf = np.vectorize(math.erf)


def values_of(codes, dtype):
    return FORMATS[dtype][1](codes).astype(np.float64)


def operands(rng, dtype, m, n, k, trans_a=False, trans_b=False, batch=None, broadcast=False):
    """Random fp8 a and b (uint8 bytes), stored as op() of them asks."""
    to = FORMATS[dtype][0]
    lead = (batch,) if batch else ()
    a = to(rng.uniform(-1, 1, lead + ((k, m) if trans_a else (m, k))))
    b_lead = () if broadcast else lead
    b = to(rng.uniform(-1, 1, b_lead + ((n, k) if trans_b else (k, n))))
    return a, b


def act(x, activation):
    if activation == "relu":
        return np.maximum(x, 0.0)
    if activation == "gelu":
        return 0.5 * x * (1 + _erf(x / math.sqrt(2)))
    if activation == "gelu_tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return x


def reference(a, b, dtype, c=None, alpha=1.0, beta=0.0, trans_a=False, trans_b=False,
              scale_a=1.0, scale_b=1.0, activation=None):
    """(act(alpha scale_a scale_b op(a) op(b) + beta c), the error allowed) in float64."""
    av, bv = values_of(a, dtype), values_of(b, dtype)
    opa = np.swapaxes(av, -1, -2) if trans_a else av
    opb = np.swapaxes(bv, -1, -2) if trans_b else bv
    scaled = alpha * scale_a * scale_b
    x = scaled * np.matmul(opa, opb)
    if beta:
        x = x + beta * np.asarray(c, np.float64)
    bound = 2.0 ** -10 * abs(scaled) * np.matmul(np.abs(opa), np.abs(opb)) + 2.0 ** -22 * abs(x)
    slope = 1.13 if activation in ("gelu", "gelu_tanh") else 1.0
    return act(x, activation), slope * bound + 2.0 ** -126


def assert_within(got, want, bound, what, out="f32"):
    """got (float32, or f16 / bf16 with out) against want within bound (plus an ulp of out)."""
    if out == "f32":
        assert got.dtype == np.float32, "%s: result dtype %s" % (what, got.dtype)
        values = got.astype(np.float64)
    else:
        values = h.half_values(np.ascontiguousarray(got).view(np.uint16), out)
        bound = bound + 4 * (2.0 ** -11 if out == "f16" else 2.0 ** -8) * np.abs(want)
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (what, got.shape, want.shape)
    err = np.abs(values - want)
    bad = np.argwhere(~(err <= bound))
    assert bad.size == 0, "%s: %d of %d elements off, first at %s: %r != %r" % (
        what, len(bad), want.size, tuple(bad[0]), values[tuple(bad[0])], want[tuple(bad[0])])


def check(client, rng, dtype, m, n, k, trans_a=False, trans_b=False, alpha=1.0, beta=0.0,
          batch=None, broadcast=False, bias=False, activation=None, scales=(1.0, 1.0),
          out_order=None, out_dtype=None):
    a, b = operands(rng, dtype, m, n, k, trans_a, trans_b, batch, broadcast)
    lead = (batch,) if batch else ()
    out = out_dtype or "f32"
    c = None
    if bias:
        c = rng.uniform(-2, 2, (n,))
    elif beta:
        c = rng.uniform(-2, 2, lead + (m, n))
    sent_c = None
    if c is not None:   # in the result's dtype: f32, or the cast's
        c = c.astype(np.float32).astype(np.float64) if out == "f32" else h.round_once(c, out)
        sent_c = c.astype(np.float32) if out == "f32" else \
            h.half_bits(c, out).view(np.float16 if out == "f16" else np.uint16)
    dest = None
    if out_order:
        dest = np.full(lead + (m, n), np.nan, np.float32)
        dest = np.asfortranarray(dest) if out_order == "F" else dest
    kw = {"bias": sent_c} if bias else {}
    got = client.gemm(a, b, None if bias else sent_c, alpha=alpha, beta=0.0 if bias else beta,
                      trans_a=trans_a, trans_b=trans_b, out=dest, activation=activation,
                      dtype=dtype, scale_a=scales[0], scale_b=scales[1], out_dtype=out_dtype,
                      **kw)
    if dest is not None:
        assert got is dest
    want, bound = reference(a, b, dtype, c, alpha, 1.0 if bias else beta, trans_a, trans_b,
                            scales[0], scales[1], activation)
    assert_within(got, want, bound, "%s %dx%dx%d ta=%s tb=%s alpha=%g beta=%g scales=%s "
                  "batch=%s broadcast=%s bias=%s act=%s out=%s" % (
                      dtype, m, n, k, trans_a, trans_b, alpha, beta, scales, batch, broadcast,
                      bias, activation, out_order), out)
    return got


# ---------------------------------------------------------------------------------------------
# gemmd.fp8

@pytest.mark.parametrize("dtype", sorted(FORMATS))
def test_codes_round_trip(dtype):
    to, back, largest = FORMATS[dtype]
    values = back(CODES)
    assert values.dtype == np.float32 and values.shape == (256,)
    nan = np.isnan(values)
    assert np.array_equal(to(values)[~nan], CODES[~nan])
    assert np.array_equal(to(values.astype(np.float64))[~nan], CODES[~nan])
    assert np.all(np.isnan(back(to(values[nan]))))
    finite = values[np.isfinite(values)]
    assert finite.max() == largest and finite.min() == -largest
    if dtype == "e4m3":
        assert nan.sum() == 2 and not np.isinf(values).any()
        assert values[1] == 2.0 ** -9 and values[0x7E] == 448.0
    else:
        assert nan.sum() == 6 and np.isinf(values).sum() == 2
        assert values[1] == 2.0 ** -16 and values[0x7B] == 57344.0
    assert values[0x80] == 0.0 and math.copysign(1.0, values[0x80]) == -1.0


@pytest.mark.parametrize("dtype", sorted(FORMATS))
def test_rounding(dtype):
    """Midpoints between neighbours round to the even code, anything past them to the nearer;
    beyond the largest, saturation (infinity: e5m2's own); NaN stays NaN; shapes kept."""
    to, back, largest = FORMATS[dtype]
    positive = CODES[:0x7F]
    vals = back(positive).astype(np.float64)
    keep = np.isfinite(vals) & (vals < largest)
    codes = positive[keep]
    lo, hi = vals[keep], back(codes + 1).astype(np.float64)   # neighbours
    mid = (lo + hi) / 2
    even = np.where(codes % 2 == 0, codes, codes + 1).astype(np.uint8)
    assert np.array_equal(to(mid), even)
    assert np.array_equal(to(-mid), even | 0x80)
    assert np.array_equal(to(np.nextafter(mid, -np.inf)), codes)
    assert np.array_equal(to(np.nextafter(mid, np.inf)), codes + 1)
    for over in (largest * 1.01, largest * 1e6, 1e300):
        assert to(over) == to(largest) and to(-over) == to(-largest)
    inf = to(np.array([np.inf, -np.inf]))
    if dtype == "e5m2":
        assert list(inf) == [0x7C, 0xFC]
    else:
        assert list(inf) == [0x7E, 0xFE]
    assert np.isnan(back(to(np.array([np.nan])))).all()
    assert to(2.0 ** -40) == 0 and to(-2.0 ** -40) == 0x80 and to(5e-324) == 0
    x = np.linspace(-3, 3, 24).reshape(2, 3, 4)
    assert to(x).shape == (2, 3, 4) and to(x).dtype == np.uint8
    assert np.array_equal(to(x.astype(np.float32)), to(x))
    with pytest.raises(TypeError, match="uint8"):
        back(np.zeros(3, np.int8))


def test_daemon_reads_every_code(client):
    """The daemon's C converter decodes each of the 256 codes as from_* does: 1.0 times the
    code, through a gemm of k = 1 (exact in f32)."""
    for dtype, (to, back, _) in FORMATS.items():
        one = to(np.ones((1, 1)))
        got = client.gemm(one, CODES.reshape(1, 256), dtype=dtype)
        want = back(CODES).reshape(1, 256)
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        assert same.all(), (dtype, np.argwhere(~same)[:4])


# ---------------------------------------------------------------------------------------------
# gemm

def test_info_lists_it(client):
    assert "fp8" in client.features
    info = client.info()
    assert "e4m3" in info["dtypes"] and "e5m2" in info["dtypes"], info["dtypes"]


@pytest.mark.parametrize("dtype", sorted(FORMATS))
def test_module_check(daemon, dtype):
    out = subprocess.run([sys.executable, "-m", "gemmd", "--connect", daemon.address(), "check",
                          "--dtype", dtype, "--size", "67"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("PASS 67x68x69 %s" % dtype), out.stdout


@pytest.mark.parametrize("dtype", sorted(FORMATS))
def test_forms(client, rng, dtype):
    for ta in (False, True):
        for tb in (False, True):
            check(client, rng, dtype, 37, 29, 53, ta, tb)
            check(client, rng, dtype, 37, 29, 53, ta, tb, alpha=-1.5, beta=0.5,
                  scales=(0.25, 3.0))
    check(client, rng, dtype, 1, 1, 1, scales=(1e-3, 1e3))
    check(client, rng, dtype, 13, 7, 5, True, False, alpha=2, beta=-1, batch=3,
          scales=(0.5, 0.5))
    check(client, rng, dtype, 9, 11, 64, False, True, alpha=-1, batch=4, broadcast=True)
    check(client, rng, dtype, 5, 3, 4099, scales=(1 / 64, 2.0))
    check(client, rng, dtype, 130, 67, 129, True, True, alpha=0.125, beta=2,
          scales=(448.0, 1 / 448))


@pytest.mark.parametrize("dtype", sorted(FORMATS))
def test_epilogue_and_casts(client, rng, dtype):
    for activation in ("relu", "gelu", "gelu_tanh"):
        check(client, rng, dtype, 37, 29, 53, bias=True, activation=activation, alpha=3,
              scales=(0.5, 2.0))
    check(client, rng, dtype, 19, 23, 11, True, True, bias=True, activation="gelu", batch=3,
          out_dtype="bf16")
    check(client, rng, dtype, 21, 17, 9, beta=-0.5, out_dtype="bf16", scales=(4.0, 0.125))
    check(client, rng, dtype, 21, 17, 9, False, True, out_dtype="f16", activation="relu")
    a, b = operands(rng, dtype, 4, 5, 6)
    for same in (None, "f32", np.float32):    # its own result named: no cast
        assert client.gemm(a, b, dtype=dtype, out_dtype=same).dtype == np.float32


def test_out_buffers(client, rng):
    """out= prefilled with NaN, C and Fortran order, batched; c as the out= of its own gemm."""
    check(client, rng, "e4m3", 33, 65, 17, alpha=2, beta=-3, out_order="C", scales=(0.5, 1.0))
    check(client, rng, "e5m2", 12, 7, 5, False, True, beta=2, out_order="F")
    check(client, rng, "e4m3", 9, 11, 13, True, True, beta=1, batch=3, out_order="C")
    a, b = operands(rng, "e5m2", 20, 30, 10)
    c = rng.uniform(-1, 1, (20, 30)).astype(np.float32)
    want, bound = reference(a, b, "e5m2", c.astype(np.float64), 5, -7, scale_a=0.5)
    assert client.gemm(a, b, c, alpha=5, beta=-7, out=c, dtype="e5m2", scale_a=0.5) is c
    assert_within(c, want, bound, "out=c")
    future = client.submit(a, b, alpha=-2, dtype="e5m2", scale_b=3)
    want, bound = reference(a, b, "e5m2", alpha=-2, scale_b=3)
    assert_within(future.result(), want, bound, "submit")
    assert future.report["dtype"] == "f32" and future.report["m"] == 20, future.report


def test_misuse_refused_before_sending(client):
    a, b = fp8.to_e4m3(np.ones((3, 4))), fp8.to_e4m3(np.ones((4, 5)))
    f32 = np.ones((4, 5), np.float32)
    for kw, exc, match in (
            ({}, TypeError, "uint8 arrays are fp8 bytes"),
            ({"dtype": "f32"}, ValueError, "only the fp8 formats"),
            ({"dtype": "e4m3", "scale_a": float("nan")}, ValueError, "must be finite"),
            ({"dtype": "e4m3", "scale_b": float("inf")}, ValueError, "must be finite"),
            ({"dtype": "e4m3", "scale_a": "x"}, ValueError, "must be finite"),
            ({"dtype": "e4m3", "alpha": 1e300, "scale_a": 1e300}, ValueError, "must be finite"),
            ({"dtype": "e4m3", "out_dtype": "f64"}, TypeError, "e4m3 gemm cannot return f64"),
            ({"dtype": "e4m3", "out_dtype": "e4m3"}, TypeError, "cannot return e4m3"),
            ({"dtype": "e5m2", "out_dtype": "i32"}, TypeError, "cannot return i32"),
            ({"dtype": "e4m3", "c": np.ones((3, 5), np.float64), "beta": 1}, TypeError,
             "c is float64: an e4m3 gemm's c, bias and result are float32"),
            ({"dtype": "e4m3", "bias": np.ones(5, np.uint8)}, TypeError, "bias is uint8"),
            ({"dtype": "e4m3", "out": np.empty((3, 5), np.float64)}, TypeError,
             "out is float64"),
            ({"dtype": "e4m3", "c": np.ones((3, 5), np.float32), "beta": 1,
              "out_dtype": "bf16"}, TypeError, "c is float32")):
        with pytest.raises(exc, match=match):
            client.gemm(a, b, **kw)
    for kw, exc, match in (({"scale_a": 2.0}, ValueError, "only an e4m3 or e5m2 gemm"),
                           ({"scale_b": 0.5}, ValueError, "this one is f32"),
                           ({"dtype": "e4m3"}, TypeError, "uint8 arrays")):
        with pytest.raises(exc, match=match):
            client.gemm(f32.T, f32, **kw)
    with pytest.raises(ValueError, match="only an e4m3 or e5m2 gemm"):
        client.gemm(np.ones((3, 4), np.int8), np.ones((4, 5), np.int8), scale_a=2)
    with pytest.raises(TypeError, match="one dtype for both"):
        client.gemm(a, f32, dtype="e4m3")
    with pytest.raises(ValueError, match="must be finite"):
        client.submit(a, b, dtype="e5m2", scale_a=float("-inf"))
    assert client.in_flight == 0
    with pytest.raises(gemmd.Error, match="alpha"):   # the daemon's to refuse, as for f32
        client.gemm(a, b, dtype="e4m3", alpha=float("inf"), scale_a=2.0)
    got = client.gemm(a, b, dtype="e4m3", scale_a=1.0, scale_b=1)   # 1 is no scale
    assert got.dtype == np.float32 and (got == 4.0).all(), got


def test_shared_memory(client, rng):
    """Operands (uint8 shm arrays), c and out= in shared memory; and the automatic scratch for
    operands of 1 MiB and more."""
    if "shm" not in client.features:
        pytest.skip("no shared memory on this connection")
    m, n, k = 65, 47, 33
    a, b = operands(rng, "e4m3", m, n, k)
    c = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    sa, sb = client.shm_array((m, k), np.uint8), client.shm_array((k, n), np.uint8)
    sc, sout = client.shm_array((m, n), np.float32), client.shm_array((m, n), np.float32)
    sa[...], sb[...], sc[...], sout[...] = a, b, c, np.nan
    before = client.stats()["bytes_in"]
    future = client.submit(sa, sb, sc, alpha=-3, beta=0.5, out=sout, dtype="e4m3", scale_a=0.25)
    assert future.result() is sout
    assert future.report["out"]["bytes"] == m * n * 4
    assert client.stats()["bytes_in"] - before < 1024, "the operands crossed the socket"
    want, bound = reference(a, b, "e4m3", c.astype(np.float64), -3, 0.5, scale_a=0.25)
    assert_within(sout, want, bound, "shm")
    m, n, k = 1100, 300, 1024     # staged: 1.4 MB of operands
    a, b = operands(rng, "e5m2", m, n, k, trans_b=True)
    before = client.stats()["bytes_in"]
    got = client.gemm(a, b, trans_b=True, dtype="e5m2", scale_b=4.0)
    assert client.stats()["bytes_in"] - before < 64 << 10, "the operands crossed the socket"
    want, bound = reference(a, b, "e5m2", trans_b=True, scale_b=4.0)
    assert_within(got, want, bound, "staged")


def test_resident(client, rng):
    """a and b put as the format, c as f32, by handle; the format taken from a resident a; a
    resident of the other format refused before sending."""
    a, b = operands(rng, "e5m2", 23, 17, 31, batch=3, broadcast=True)
    c = rng.uniform(-1, 1, (3, 23, 17)).astype(np.float32)
    ra, rb, rc = client.put(a, dtype="e5m2"), client.put(b, dtype="e5m2"), client.put(c)
    assert (ra.wire, rb.wire, rc.dtype) == ("e5m2", "e5m2", np.float32)
    assert "e5m2" in repr(ra)
    want, bound = reference(a, b, "e5m2", c.astype(np.float64), -5, 3, scale_a=2.0)
    assert_within(client.gemm(ra, rb, rc, alpha=-5, beta=3, scale_a=2.0), want, bound,
                  "all resident")
    assert_within(client.gemm(a, rb, c, alpha=-5, beta=3, dtype="e5m2", scale_a=2.0), want,
                  bound, "b resident")
    other = client.put(b, dtype="e4m3")
    with pytest.raises(TypeError, match="b was put as e4m3, the gemm is e5m2"):
        client.gemm(ra, other)
    with pytest.raises(TypeError, match="uint8 arrays"):
        client.put(a)
    for r in (ra, rb, rc, other):
        client.free(r)


def test_aio(daemon, rng):
    async def main():
        async with gemmd.aio.Client(daemon.address()) as c:
            jobs = []
            for i in range(12):
                dtype = ("e4m3", "e5m2")[i % 2]
                ta, tb = i % 4 >= 2, i % 3 == 0
                a, b = operands(rng, dtype, 17 + i, 13, 11 + 7 * i, ta, tb)
                bias = rng.uniform(-1, 1, 13).astype(np.float32)
                jobs.append((dtype, a, b, bias, ta, tb, 0.5 + i, 2.0 ** -i))
            results = await asyncio.gather(*(
                c.gemm(a, b, trans_a=ta, trans_b=tb, bias=bias, activation="gelu", alpha=alpha,
                       dtype=dtype, scale_b=sb)
                for dtype, a, b, bias, ta, tb, alpha, sb in jobs))
            for (dtype, a, b, bias, ta, tb, alpha, sb), got in zip(jobs, results):
                want, bound = reference(a, b, dtype, bias.astype(np.float64), alpha, 1, ta, tb,
                                        scale_b=sb, activation="gelu")
                assert_within(got, want, bound, "aio")
            with pytest.raises(ValueError, match="only an e4m3 or e5m2 gemm"):
                await c.gemm(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32),
                             scale_a=3)
    asyncio.run(asyncio.wait_for(main(), 300))


# ---------------------------------------------------------------------------------------------
# raw requests: what the client refuses, the daemon refuses too

def test_daemon_refuses_misuse(daemon, rng):
    m, n, k = 3, 5, 4
    a, b = operands(rng, "e4m3", m, n, k)
    ab = (a.tobytes(), b.tobytes())
    c32 = rng.uniform(-1, 1, (m, n)).astype("<f4")
    base = {"m": m, "n": n, "k": k, "dtype": "e4m3"}
    f32 = {"m": m, "n": n, "k": k, "dtype": "f32"}
    f32_ops = (np.ones((m, k), "<f4").tobytes(), np.ones((k, n), "<f4").tobytes())
    cases = [
        (dict(f32, scale_a=2.0), f32_ops, "only an e4m3 or e5m2 gemm takes per-tensor scales"),
        (dict(base, scale_b=float("inf")), ab, "must be finite"),
        (dict(base, alpha=1e300, scale_a=1e300), ab, "must be finite"),
        (dict(base, out_dtype="f64"), ab, "cannot return f64"),
        (dict(base, out_dtype="e4m3"), ab, "cannot return e4m3"),
        # c (a full C, or the bias row) of fp8 bytes, not f32
        (dict(base, beta=1), ab + (bytes(m * n),),
         "c: expected %d bytes, got %d" % (m * n * 4, m * n)),
        (dict(base, beta=1, bias=True), ab + (bytes(n),),
         "c: expected %d bytes, got %d" % (n * 4, n)),
        # operands of f32, not 1 byte an element
        (base, f32_ops, "a: expected %d bytes, got %d" % (m * k, m * k * 4)),
    ]
    with h.Client(daemon.address()) as raw:
        expect_refused_raw(raw, cases)
        # the same connection serves: out_dtype f32 named, the scales as ints
        error, result = raw_gemm(raw, dict(base, out_dtype="f32", alpha=-7, beta=2, scale_a=3),
                                 *ab, c32.tobytes())
        assert error is None, error
        out_hdr, data = result
        assert out_hdr["dtype"] == "f32" and len(data) == m * n * 4, out_hdr
        want, bound = reference(a, b, "e4m3", c32.astype(np.float64), -7, 2, scale_a=3)
        assert_within(np.frombuffer(data, "<f4").reshape(m, n), want, bound, "raw")


def test_header_sent(fake_server):
    """dtype e4m3 / e5m2, no out_dtype key (its f32 named or not), the scales only when not 1;
    the f32 reply lands in a float32 array; a reply naming another dtype is a ProtocolError."""
    seen = []
    a = fp8.to_e4m3(np.ones((2, 3)))
    with gemmd.Client(fake_gemm_server(fake_server, seen).address, timeout=30,
                      auto_shm=False) as client:
        for named, scales, dtype in ((None, (1.0, 1.0), "e4m3"), ("f32", (0.5, 1.0), "e5m2"),
                                     (np.float32, (1.0, 3), "e4m3")):
            got = client.gemm(a, a.T, out_dtype=named, dtype=dtype, scale_a=scales[0],
                              scale_b=scales[1])
            assert got.dtype == np.float32 and got.shape == (2, 2) and (got == 0).all()
    assert [x["dtype"] for x in seen] == ["e4m3", "e5m2", "e4m3"]
    assert all("out_dtype" not in x for x in seen), seen
    assert [(x.get("scale_a"), x.get("scale_b")) for x in seen] == [
        (None, None), (0.5, None), (None, 3.0)], seen
    wrong = fake_gemm_server(fake_server, [], reply_dtype="i32")   # as many bytes as f32
    with gemmd.Client(wrong.address, timeout=30, auto_shm=False) as client:
        with pytest.raises(gemmd.ProtocolError, match="dtype"):
            client.gemm(a, a.T, dtype="e4m3")
