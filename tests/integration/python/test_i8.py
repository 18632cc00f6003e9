"""The integer gemm (feature "i8") through gemmd.Client and gemmd.aio.Client against a real
daemon: random int8 operands on odd shapes, the four transposes, batches and a batch by one b,
integer alpha and beta (negative, the int32 limits, products and sums that wrap in 32 bits),
the bias row with ReLU (after the wrap), c with beta and out= (prefilled, C and Fortran order),
shared memory (shm_array operands and out=, and the automatic scratch), resident operands (a and
b put as i8, c as i32), submit() and asyncio; every result bit for bit against an exact int64
reference wrapped to int32. What the client refuses before sending (TypeError / ValueError), the
daemon answers INVALID_ARGUMENT when sent raw (non-integer alpha, GELU, out_dtype f32, dtype i32,
a c of the wrong dtype), with the connection still serving; the i8 header carries no out_dtype
key (a fake daemon reads it)."""

import asyncio
import subprocess
import sys

import msgpack
import numpy as np
import pytest

import gemmd
import gemmd.aio
import gemmd_harness as h
from test_out_dtype import fake_gemm_server

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
POISON = 0x7EADBEEF   # what no element of these results is


def operands(rng, m, n, k, trans_a=False, trans_b=False, batch=None, broadcast=False):
    """Random int8 a and b, stored as op() of them asks (a k x m with trans_a, ...)."""
    lead = (batch,) if batch else ()
    a = rng.integers(-128, 128, lead + ((k, m) if trans_a else (m, k)), dtype=np.int8)
    b_lead = () if broadcast else lead
    b = rng.integers(-128, 128, b_lead + ((n, k) if trans_b else (k, n)), dtype=np.int8)
    return a, b


def random_i32(rng, shape):
    return rng.integers(INT32_MIN, INT32_MAX + 1, shape, dtype=np.int64).astype(np.int32)


def wrap(x):
    """int64 values to int32, two's complement: the low 32 bits."""
    return (np.asarray(x, np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def reference(a, b, c=None, alpha=1, beta=0, trans_a=False, trans_b=False, relu=False):
    """act(alpha op(a) op(b) + beta c) in int64 (numpy's int64 arithmetic wraps mod 2^64, which
    keeps the low 32 bits right), wrapped to int32, then ReLU on the int32; c may be a bias
    row."""
    opa = np.swapaxes(a, -1, -2) if trans_a else a
    opb = np.swapaxes(b, -1, -2) if trans_b else b
    acc = np.matmul(opa.astype(np.int64), opb.astype(np.int64))
    acc = np.int64(alpha) * acc
    if beta:
        acc = acc + np.int64(beta) * np.asarray(c, np.int64)
    out = wrap(acc)
    return np.maximum(out, 0) if relu else out


def assert_exact(got, want, what):
    assert got.dtype == np.int32, "%s: result dtype %s" % (what, got.dtype)
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (what, got.shape, want.shape)
    bad = np.argwhere(got != want)
    assert bad.size == 0, "%s: %d of %d elements differ, first at %s: %d != %d" % (
        what, len(bad), want.size, tuple(bad[0]), got[tuple(bad[0])], want[tuple(bad[0])])


def check(client, rng, m, n, k, trans_a=False, trans_b=False, alpha=1, beta=0, batch=None,
          broadcast=False, bias=False, relu=False, out_order=None):
    a, b = operands(rng, m, n, k, trans_a, trans_b, batch, broadcast)
    lead = (batch,) if batch else ()
    c = None
    if bias:
        c = random_i32(rng, (n,)) >> 8   # so that ReLU cuts some and keeps some
    elif beta:
        c = random_i32(rng, lead + (m, n))
    dest = None
    if out_order:
        dest = np.full(lead + (m, n), POISON, np.int32)
        dest = np.asfortranarray(dest) if out_order == "F" else dest
    kw = {"bias": c} if bias else {}
    got = client.gemm(a, b, None if bias else c, alpha=alpha, beta=0 if bias else beta,
                      trans_a=trans_a, trans_b=trans_b, out=dest,
                      activation="relu" if relu else None, **kw)
    if dest is not None:
        assert got is dest
    want = reference(a, b, c, alpha, 1 if bias else beta, trans_a, trans_b, relu)
    assert_exact(got, want, "%dx%dx%d ta=%s tb=%s alpha=%d beta=%d batch=%s broadcast=%s "
                 "bias=%s relu=%s out=%s" % (m, n, k, trans_a, trans_b, alpha, beta, batch,
                                             broadcast, bias, relu, out_order))
    return got


def test_info_lists_it(client):
    assert "i8" in client.features
    info = client.info()
    assert "i8" in info["dtypes"] and "i32" in info["dtypes"], info["dtypes"]


def test_module_check(daemon):
    """python3 -m gemmd check --dtype i8: bit for bit against NumPy."""
    out = subprocess.run([sys.executable, "-m", "gemmd", "--connect", daemon.address(), "check",
                          "--dtype", "i8", "--size", "67"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("PASS 67x68x69 i8") and "max error 0" in out.stdout, out.stdout


def test_forms(client, rng):
    for ta in (False, True):
        for tb in (False, True):
            check(client, rng, 37, 29, 53, ta, tb)
            check(client, rng, 37, 29, 53, ta, tb, alpha=-3, beta=5)
    check(client, rng, 1, 1, 1)
    check(client, rng, 13, 7, 5, True, False, alpha=7, beta=-2, batch=3)
    check(client, rng, 9, 11, 64, False, True, alpha=-1, batch=4, broadcast=True)
    check(client, rng, 17, 19, 23, beta=1, batch=2, broadcast=True)


def test_wrapping(client, rng):
    """Results beyond int32 wrap: alpha times the product, beta times c, their sum; the limits
    of int32 as alpha and beta."""
    m, n, k = 5, 7, 4099
    a = np.full((m, k), -128, np.int8)
    b = np.full((k, n), -128, np.int8)
    for alpha in (INT32_MAX, INT32_MIN, 1 << 20, -977):
        want = reference(a, b, alpha=alpha)
        assert abs(alpha * 16384 * k) > INT32_MAX or alpha == -977
        assert_exact(client.gemm(a, b, alpha=alpha), want, "alpha %d" % alpha)
    c = np.full((m, n), INT32_MAX, np.int32)
    c[0, 0], c[1, 1] = INT32_MIN, -1
    for beta in (2, INT32_MIN, INT32_MAX, -1):
        assert_exact(client.gemm(a, b, c, alpha=3, beta=beta),
                     reference(a, b, c, 3, beta), "beta %d" % beta)
    # random ones, large k: most elements wrap
    for _ in range(3):
        check(client, rng, 37, 29, 1031, alpha=int(rng.integers(1 << 20, INT32_MAX)),
              beta=int(rng.integers(INT32_MIN, -(1 << 20))))
    # ReLU sees the wrapped value: a product that wraps negative becomes 0
    one = np.ones((1, 1), np.int8)
    assert client.gemm(one, one, alpha=INT32_MAX, activation="relu")[0, 0] == INT32_MAX
    got = client.gemm(one, one, np.full((1, 1), 1, np.int32), alpha=INT32_MAX, beta=1,
                      activation="relu")
    assert got[0, 0] == 0, got   # INT32_MAX + 1 wraps to INT32_MIN, then ReLU


def test_bias_relu(client, rng):
    check(client, rng, 37, 29, 53, bias=True, relu=True, alpha=3)
    check(client, rng, 19, 23, 11, True, True, bias=True, batch=3)
    check(client, rng, 19, 23, 11, bias=True, relu=True, batch=2, broadcast=True)
    check(client, rng, 21, 17, 9, beta=-4, relu=True)
    check(client, rng, 21, 17, 9, alpha=-1, relu=True)


def test_out_buffers(client, rng):
    """out= prefilled with a poison pattern, C and Fortran order, batched; c with beta, and c
    as the out= of its own gemm (read before the result lands)."""
    check(client, rng, 33, 65, 17, alpha=2, beta=-3, out_order="C")
    check(client, rng, 12, 7, 5, False, True, beta=2, out_order="F")
    check(client, rng, 9, 11, 13, True, True, beta=1, batch=3, out_order="C")
    a, b = operands(rng, 20, 30, 10)
    c = random_i32(rng, (20, 30))
    want = reference(a, b, c, 5, -7)
    assert client.gemm(a, b, c, alpha=5, beta=-7, out=c) is c
    assert_exact(c, want, "out=c")
    future = client.submit(a, b, alpha=-2)
    assert_exact(future.result(), reference(a, b, alpha=-2), "submit")
    assert future.report["dtype"] == "i32" and future.report["m"] == 20, future.report


def test_misuse_refused_before_sending(client):
    a, b = np.ones((3, 4), np.int8), np.ones((4, 5), np.int8)
    c32 = np.ones((3, 5), np.int32)
    for kw, match in (({"alpha": 1.5}, "alpha is 1.5"), ({"alpha": 2.0 ** 31}, "within int32"),
                      ({"beta": -0.5, "c": c32}, "beta is -0.5"),
                      ({"beta": float(INT32_MIN) - 1, "c": c32}, "within int32"),
                      ({"alpha": float("nan")}, "integers"),
                      ({"activation": "gelu"}, "'relu' or None"),
                      ({"activation": "gelu_tanh"}, "'relu' or None")):
        with pytest.raises(ValueError, match=match):
            client.gemm(a, b, **kw)
    for kw, match in (({"out_dtype": "f32"}, "i8 gemm cannot return f32"),
                      ({"out_dtype": np.int8}, "cannot return i8"),
                      ({"out_dtype": "bf16"}, "cannot return bf16"),
                      ({"c": np.ones((3, 5), np.float32), "beta": 1}, "c is float32"),
                      ({"c": np.ones((3, 5), np.int8), "beta": 1}, "c is int8"),
                      ({"c": np.ones((3, 5), np.int64), "beta": 1}, "c is int64"),
                      ({"bias": np.ones(5, np.float32)}, "bias is float32"),
                      ({"out": np.empty((3, 5), np.float32)}, "out is float32"),
                      ({"out": np.empty((3, 5), np.int8)}, "out is int8"),
                      ({"out": np.empty((3, 5), ">i4")}, "out is >i4")):
        with pytest.raises(TypeError, match=match):
            client.gemm(a, b, **kw)
    with pytest.raises(TypeError, match="no gemm takes int32 operands"):
        client.gemm(a.astype(np.int32), b.astype(np.int32))
    with pytest.raises(TypeError, match="one dtype for both"):
        client.gemm(a, b.astype(np.float32))
    with pytest.raises(ValueError, match="shape"):
        client.gemm(a, b, out=np.empty((5, 3), np.int32))
    with pytest.raises(ValueError, match="alpha"):
        client.submit(a, b, alpha=0.25)
    assert client.in_flight == 0
    # the names of its own result are no cast: the same gemm
    for same in ("i32", np.int32, "int32"):
        got = client.gemm(a, b, out_dtype=same, alpha=np.int64(-2), precision="fast")
        assert got.dtype == np.int32 and (got == -8).all(), (same, got)


def test_shared_memory(client, rng):
    """Operands, c and out= in shm arrays (nothing but framing crosses the socket); and the
    automatic scratch for operands of 1 MiB and more."""
    if "shm" not in client.features:
        pytest.skip("no shared memory on this connection")
    m, n, k = 65, 47, 33
    a, b = operands(rng, m, n, k)
    c = random_i32(rng, (m, n))
    sa, sb = client.shm_array((m, k), np.int8), client.shm_array((k, n), np.int8)
    sc, sout = client.shm_array((m, n), np.int32), client.shm_array((m, n), np.int32)
    sa[...], sb[...], sc[...], sout[...] = a, b, c, POISON
    before = client.stats()["bytes_in"]
    future = client.submit(sa, sb, sc, alpha=-3, beta=9, out=sout)
    assert future.result() is sout
    assert future.report["out"]["bytes"] == m * n * 4
    assert client.stats()["bytes_in"] - before < 1024, "the operands crossed the socket"
    assert_exact(sout, reference(a, b, c, -3, 9), "shm")
    m, n, k = 1100, 300, 1024     # staged: 1.4 MB of operands
    a, b = operands(rng, m, n, k, trans_b=True)
    before = client.stats()["bytes_in"]
    got = client.gemm(a, b, trans_b=True, alpha=1 << 16)
    assert client.stats()["bytes_in"] - before < 64 << 10, "the operands crossed the socket"
    assert_exact(got, reference(a, b, alpha=1 << 16, trans_b=True), "staged")


def test_resident(client, rng):
    """a and b put as i8, c as i32, each named by handle; a batch by one resident b; a c put
    as i8 refused before sending."""
    a, b = operands(rng, 23, 17, 31, batch=3, broadcast=True)
    c = random_i32(rng, (3, 23, 17))
    ra, rb, rc = client.put(a), client.put(b), client.put(c)
    assert (ra.dtype, rb.dtype, rc.dtype) == (np.int8, np.int8, np.int32)
    want = reference(a, b, c, -5, 3)
    assert_exact(client.gemm(ra, rb, rc, alpha=-5, beta=3), want, "all resident")
    assert_exact(client.gemm(a, rb, c, alpha=-5, beta=3), want, "b resident")
    wrong = client.put(np.ones((3, 23, 17), np.int8))
    with pytest.raises(TypeError, match="c is int8"):
        client.gemm(ra, rb, wrong, beta=1)
    for r in (ra, rb, rc, wrong):
        client.free(r)


def test_aio(daemon, rng):
    async def main():
        async with gemmd.aio.Client(daemon.address()) as c:
            jobs = []
            for i in range(12):
                ta, tb = i % 2 == 1, i % 4 >= 2
                a, b = operands(rng, 17 + i, 13, 11 + 7 * i, ta, tb)
                bias = random_i32(rng, (13,)) >> 4
                jobs.append((a, b, bias, ta, tb, -(1 << 24) + i))
            results = await asyncio.gather(*(
                c.gemm(a, b, trans_a=ta, trans_b=tb, bias=bias, activation="relu", alpha=alpha)
                for a, b, bias, ta, tb, alpha in jobs))
            for (a, b, bias, ta, tb, alpha), got in zip(jobs, results):
                assert_exact(got, reference(a, b, bias, alpha, 1, ta, tb, relu=True), "aio")
            with pytest.raises(ValueError, match="'relu' or None"):
                await c.gemm(jobs[0][0], jobs[0][1], activation="gelu")
    asyncio.run(asyncio.wait_for(main(), 300))


# ---------------------------------------------------------------------------------------------
# raw requests: what the client refuses, the daemon refuses too

def raw_gemm(raw, hdr, *operands):
    """The daemon's reply to [hdr, *operands] (each bytes or a dict), as (error, result)."""
    msgid = raw._take_msgid(None)
    raw.send_raw(msgpack.packb([0, msgid, "gemm", [hdr] + list(operands)], use_bin_type=True))
    reply = raw.wait(msgid)
    return reply.error, reply.result


def expect_refused_raw(raw, cases):
    """Each (hdr, operands, words) sent raw is answered INVALID_ARGUMENT with the words in its
    message, and the connection still serves. test_fp8 uses it too."""
    for hdr, ops, word in cases:
        error, _ = raw_gemm(raw, hdr, *ops)
        assert error is not None and error["code"] == "INVALID_ARGUMENT", (hdr, error)
        assert word in error["message"], (hdr, error)
    assert raw.call("ping") == "pong"


def test_daemon_refuses_misuse(daemon, rng):
    m, n, k = 3, 5, 4
    a, b = operands(rng, m, n, k)
    ab = (a.tobytes(), b.tobytes())
    c32 = random_i32(rng, (m, n))
    base = {"m": m, "n": n, "k": k, "dtype": "i8"}
    cases = [
        (dict(base, alpha=1.5), ab, "integers within int32"),
        (dict(base, alpha=float(1 << 31)), ab, "integers within int32"),
        (dict(base, beta=-0.5), ab + (c32.tobytes(),), "integers within int32"),
        (dict(base, activation="gelu"), ab, "none or relu"),
        (dict(base, activation="gelu_tanh"), ab, "none or relu"),
        (dict(base, out_dtype="f32"), ab, "cannot return f32"),
        (dict(base, out_dtype="i8"), ab, "cannot return i8"),
        (dict(base, dtype="i32"), (a.astype("<i4").tobytes(), b.astype("<i4").tobytes()),
         "i32 is a result dtype only"),
        # c (a full C, or the bias row) of int8 elements, not int32
        (dict(base, beta=1), ab + (c32.astype(np.int8).tobytes(),),
         "c: expected %d bytes, got %d" % (m * n * 4, m * n)),
        (dict(base, beta=1, bias=True), ab + (c32.astype(np.int8)[0].tobytes(),),
         "c: expected %d bytes, got %d" % (n * 4, n)),
    ]
    with h.Client(daemon.address()) as raw:
        expect_refused_raw(raw, cases)
        # the same connection serves: out_dtype i32 named, alpha and beta as ints, c sent with
        # beta 0 (poisoned: ignored)
        error, result = raw_gemm(raw, dict(base, out_dtype="i32", alpha=-7, beta=2), *ab,
                                 c32.tobytes())
        assert error is None, error
        out_hdr, data = result
        assert out_hdr["dtype"] == "i32" and len(data) == m * n * 4, out_hdr
        assert_exact(np.frombuffer(data, "<i4").reshape(m, n), reference(a, b, c32, -7, 2),
                     "raw")
        poison = np.full((m, n), POISON, "<i4")
        error, result = raw_gemm(raw, dict(base, alpha=3), *ab, poison.tobytes())
        assert error is None, error
        assert_exact(np.frombuffer(result[1], "<i4").reshape(m, n), reference(a, b, alpha=3),
                     "c ignored with beta 0")
        # a resident c put as i8 is not an i8 gemm's c
        handle = raw.call("put", [{"dtype": "i8", "rows": m, "cols": n},
                                  c32.astype(np.int8).tobytes()])["handle"]
        error, _ = raw_gemm(raw, dict(base, beta=1), *ab, {"handle": handle})
        assert error is not None and error["code"] == "INVALID_ARGUMENT", error
        assert "i32" in error["message"], error
        raw.call("free", [handle])


def test_header_sent(fake_server):
    """dtype i8, no out_dtype key (however the result is named), alpha and beta as numbers;
    the i32 reply lands in an int32 array; a reply naming another dtype is a ProtocolError."""
    seen = []
    a = np.ones((2, 3), np.int8)
    with gemmd.Client(fake_gemm_server(fake_server, seen).address, timeout=30,
                      auto_shm=False) as client:
        for named in (None, "i32", np.int32):
            got = client.gemm(a, a.T, out_dtype=named, alpha=-4)
            assert got.dtype == np.int32 and got.shape == (2, 2) and (got == 0).all()
    assert [x["dtype"] for x in seen] == ["i8"] * 3
    assert all("out_dtype" not in x for x in seen), seen
    assert [x["alpha"] for x in seen] == [-4, -4, -4]
    wrong = fake_gemm_server(fake_server, [], reply_dtype="f32")   # as many bytes as i32
    with gemmd.Client(wrong.address, timeout=30, auto_shm=False) as client:
        with pytest.raises(gemmd.ProtocolError, match="dtype"):
            client.gemm(a, a.T)
