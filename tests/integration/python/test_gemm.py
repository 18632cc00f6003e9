"""gemmd.Client.gemm against a real daemon: every dtype, batches, transposes, alpha/beta,
layouts, out=, bf16, array-likes, huge replies; checked element by element against the
float64 reference with a tolerance fitted to the dtype (the harness's assert_close)."""

import array
import itertools

import numpy as np
import pytest

import gemmd
import gemmd_harness as h
from gemmd._arrays import Problem

DTYPES = ["f32", "f64", "f16", "bf16"]
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.uint16}


def to_np(x, dtype):
    """float64 values (representable in dtype) as the array a caller passes."""
    if dtype == "bf16":
        return h.f32_to_bf16_bits(np.asarray(x, np.float32))
    return np.asarray(x).astype(NP[dtype])


def from_np(x, dtype):
    if dtype == "bf16":
        return h.bf16_bits_to_f32(x).astype(np.float64)
    return np.asarray(x, np.float64)


def check(client, rng, m, n, k, dtype, trans_a=False, trans_b=False, alpha=1.0, beta=0.0,
          batch=None, order="C", out_order=None):
    a, b = h.random_operands(rng, m, n, k, dtype, trans_a, trans_b, batch)
    lead = (batch,) if batch else ()
    c = h.round_to(rng.uniform(-1, 1, lead + (m, n)), dtype) if beta else None
    args = [to_np(a, dtype), to_np(b, dtype)]
    if order == "F":
        args = [np.asfortranarray(x) if x.ndim == 2 else x for x in args]
    out = None
    if out_order:   # poisoned: every element must be written
        nan = 0x7FC1 if dtype == "bf16" else np.nan    # bf16: a NaN's bit pattern
        out = np.full(lead + (m, n), nan, dtype=NP[dtype], order=out_order)
    result = client.gemm(args[0], args[1], None if c is None else to_np(c, dtype), alpha=alpha,
                         beta=beta, trans_a=trans_a, trans_b=trans_b, out=out)
    if out is not None:
        assert result is out
    assert result.dtype == np.dtype(NP[dtype]) and result.shape == lead + (m, n)
    assert result.flags.writeable
    what = "%dx%dx%d %s ta=%s tb=%s alpha=%g beta=%g batch=%s order=%s out=%s" % (
        m, n, k, dtype, trans_a, trans_b, alpha, beta, batch, order, out_order)
    h.assert_close(from_np(result, dtype), a, b, c, alpha, beta, trans_a, trans_b, dtype, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_and_transpose(client, rng, dtype):
    for trans_a, trans_b in itertools.product((False, True), repeat=2):
        check(client, rng, 37, 19, 23, dtype, trans_a, trans_b)
        check(client, rng, 1, 1, 1, dtype, trans_a, trans_b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_alpha_beta_and_poisoned_out(client, rng, dtype):
    check(client, rng, 33, 65, 17, dtype, alpha=-1.5, beta=0.25, out_order="C")
    check(client, rng, 33, 65, 17, dtype, True, False, alpha=2.0, beta=0.0, out_order="C")
    check(client, rng, 12, 7, 5, dtype, False, True, alpha=0.5, beta=-2.0, out_order="F")


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch(client, rng, dtype):
    check(client, rng, 9, 11, 13, dtype, batch=5)
    check(client, rng, 9, 11, 13, dtype, True, True, alpha=0.75, beta=1.5, batch=3,
          out_order="C")
    check(client, rng, 4, 3, 2, dtype, batch=1)   # 3-D in, 3-D out even for one matrix


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_fortran_order_is_sent_without_a_copy(client, rng, dtype):
    check(client, rng, 31, 29, 27, dtype, order="F")
    check(client, rng, 31, 29, 27, dtype, True, True, order="F")
    a = np.asfortranarray(rng.standard_normal((6, 4)).astype(NP[dtype]))
    b = rng.standard_normal((4, 5)).astype(NP[dtype])
    p = Problem(a, b, None, 1.0, 0.0, False, False, "exact")
    assert p.hdr["trans_a"] is True and p.hdr["trans_b"] is False
    assert np.shares_memory(np.frombuffer(p.operands[0], np.uint8), a)
    assert np.shares_memory(np.frombuffer(p.operands[1], np.uint8), b)
    # the last two axes of a batch swapped: sent as the underlying block, flag flipped
    base = rng.standard_normal((3, 4, 6)).astype(NP[dtype])
    swapped = base.transpose(0, 2, 1)          # (3, 6, 4), not C-contiguous
    bb = rng.standard_normal((3, 4, 2)).astype(NP[dtype])
    p = Problem(swapped, bb, None, 1.0, 0.0, False, False, "exact")
    assert p.hdr["trans_a"] is True
    assert np.shares_memory(np.frombuffer(p.operands[0], np.uint8), base)
    got = client.gemm(swapped, bb)
    h.assert_close(got, swapped, bb, None, 1.0, 0.0, False, False, dtype, "swapped batch")
    # a strided view is copied (the protocol has no strides) and still right
    big = rng.standard_normal((10, 12)).astype(NP[dtype])
    view = big[::2, ::3]
    got = client.gemm(view, big[:4, :5])
    h.assert_close(got, view, big[:4, :5], None, 1.0, 0.0, False, False, dtype, "strided")


def test_out_receives_in_place(client, rng):
    a = rng.standard_normal((20, 30)).astype(np.float32)
    b = rng.standard_normal((30, 10)).astype(np.float32)
    c = rng.standard_normal((20, 10)).astype(np.float32)
    want = 2.0 * a.astype(np.float64) @ b + 0.5 * c
    got = client.gemm(a, b, c, alpha=2.0, beta=0.5, out=c)     # C = 2AB + 0.5C in place
    assert got is c
    h.assert_close(c, a, b, want - 2.0 * (a.astype(np.float64) @ b), 2.0, 1.0, False, False,
                   "f32", "in place")
    big_endian = a.astype(">f4")
    h.assert_close(client.gemm(big_endian, b), a, b, None, 1.0, 0.0, False, False, "f32",
                   "big-endian a")


def test_bf16(client, rng):
    a, b = h.random_operands(rng, 40, 24, 56, "bf16")
    got = client.gemm(h.f32_to_bf16_bits(a.astype(np.float32)),
                      h.f32_to_bf16_bits(b.astype(np.float32)))
    assert got.dtype == np.uint16     # bit patterns in, bit patterns out
    h.assert_close(h.bf16_bits_to_f32(got), a, b, None, 1.0, 0.0, False, False, "bf16", "bits")
    if gemmd.BFLOAT16 is None:
        pytest.skip("ml_dtypes is not installed: bfloat16 arrays not tested (uint16 was)")
    got = client.gemm(a.astype(gemmd.BFLOAT16), b.astype(gemmd.BFLOAT16))
    assert got.dtype == gemmd.BFLOAT16
    h.assert_close(got.astype(np.float64), a, b, None, 1.0, 0.0, False, False, "bf16", "ml")


class ArrayLike:
    """Only __array__, as other array libraries offer."""

    def __init__(self, arr):
        self._arr = arr

    def __array__(self, dtype=None):
        return self._arr if dtype is None else self._arr.astype(dtype)


def test_array_likes(client, rng):
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((7, 3)).astype(np.float32)
    got = client.gemm(ArrayLike(a), ArrayLike(b))
    h.assert_close(got, a, b, None, 1.0, 0.0, False, False, "f32", "__array__")
    mem_a = memoryview(array.array("f", a.ravel())).cast("B").cast("f", (5, 7))
    mem_b = memoryview(bytearray(b.tobytes())).cast("f", (7, 3))
    got = client.gemm(mem_a, mem_b)
    h.assert_close(got, a, b, None, 1.0, 0.0, False, False, "f32", "buffer protocol")


def test_bad_arguments_are_refused_before_sending(client):
    f32 = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="inner dimensions"):
        client.gemm(f32, f32)
    with pytest.raises(TypeError, match="one dtype"):
        client.gemm(f32, f32.T.astype(np.float64))
    with pytest.raises(TypeError, match="int64"):
        client.gemm(np.ones((2, 2), np.int64), np.ones((2, 2), np.int64))
    with pytest.raises(ValueError, match="c is required"):
        client.gemm(f32, f32.T, beta=1.0)
    with pytest.raises(ValueError, match="2-D"):
        client.gemm(np.ones(4, np.float32), f32)
    with pytest.raises(ValueError, match="shape"):
        client.gemm(f32, f32.T, out=np.empty((4, 4), np.float32))
    with pytest.raises(ValueError, match="read-only"):
        ro = np.empty((3, 3), np.float32)
        ro.flags.writeable = False
        client.gemm(f32, f32.T, out=ro)
    with pytest.raises(TypeError, match="buffer of bytes"):
        client.gemm(b"\0" * 16, b"\0" * 16)
    with pytest.raises(ValueError, match="precision"):
        client.gemm(f32, f32.T, precision="sloppy")
    assert client.in_flight == 0
    client.gemm(f32, f32.T)     # the connection was never touched


def test_huge_reply_straight_into_the_array(client, daemon, quick):
    """6000x1 @ 1x6000 f32: 144 MB back, more than msgpack's default 100 MiB buffer."""
    m = 3000 if quick else 6000
    a = np.arange(m, dtype=np.float32).reshape(m, 1) / m
    b = np.linspace(-1, 1, m, dtype=np.float32).reshape(1, m)
    got = client.gemm(a, b)
    assert got.nbytes == m * m * 4
    np.testing.assert_array_equal(got[::997], (a @ b)[::997])
    np.testing.assert_array_equal(got[-1], (a @ b)[-1])
    out = np.full((m, m), np.nan, np.float32)
    assert client.gemm(a, b, out=out) is out and not np.isnan(out).any()


def test_pipelined_futures(client, rng):
    jobs = []
    for i in range(40):
        m, n, k = 1 + (i * 37) % 90, 1 + (i * 11) % 70, 1 + (i * 5) % 50
        if i % 7 == 0:
            m, n, k = 300, 300, 300     # big ones that smaller ones overtake
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        jobs.append((a, b, client.submit(a, b)))
    assert client.in_flight > 0
    for a, b, future in reversed(jobs):
        h.assert_close(future.result(), a, b, None, 1.0, 0.0, False, False, "f32", "pipelined")
        assert future.done() and future.report["device"]
        h.check_out_hdr(future.report, a.shape[0], b.shape[1], "f32", 1)
    assert client.in_flight == 0


def test_one_client_many_threads(client, rng):
    a = rng.standard_normal((64, 48)).astype(np.float64)
    b = rng.standard_normal((48, 32)).astype(np.float64)

    def body(i):
        for _ in range(10):
            got = client.gemm(a, b, alpha=float(i))
            h.assert_close(got, a, b, None, float(i), 0.0, False, False, "f64", "thread")

    h.run_threads(body, 6)


def test_cancel_keeps_the_stream_in_step(client, rng):
    a = rng.standard_normal((2000, 2000)).astype(np.float32)   # 16 MB each: not all sent yet
    future = client.submit(a, a)
    assert future.cancel()
    with pytest.raises(gemmd.Error) as info:
        future.result()
    assert info.value.code == "CANCELLED"
    small = rng.standard_normal((5, 5)).astype(np.float32)
    h.assert_close(client.gemm(small, small), small, small, None, 1.0, 0.0, False, False, "f32",
                   "after a cancel")


def test_module_level_gemm_and_address_from_environment(daemon, rng, monkeypatch):
    monkeypatch.setenv("GEMMD_ADDRESS", daemon.address("tcp"))
    a = rng.standard_normal((4, 3)).astype(np.float32)
    got = gemmd.gemm(a, a.T)
    h.assert_close(got, a, a.T, None, 1.0, 0.0, False, False, "f32", "gemmd.gemm")
    with gemmd.Client() as c:
        assert c.address == daemon.address("tcp")
        assert c.ping() > 0
    with gemmd.Client(daemon.address("unix")) as c:   # an explicit address wins
        assert c.address.startswith("unix:")
        c.ping()


def test_torch_tensors(client, rng):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (python3-torch)")
    a = torch.from_numpy(rng.standard_normal((17, 9)).astype(np.float32))
    b = torch.from_numpy(rng.standard_normal((13, 9)).astype(np.float32))
    got = client.gemm(a, b.T)                      # b.T: a column-major view, sent as b
    h.assert_close(got, a.numpy(), b.numpy().T, None, 1.0, 0.0, False, False, "f32", "torch")
    p = Problem(a, b.T, None, 1.0, 0.0, False, False, "exact")
    assert p.hdr["trans_b"] is True
    assert np.shares_memory(np.frombuffer(p.operands[1], np.uint8), b.numpy())
    got = client.gemm(a.bfloat16(), b.T.bfloat16())   # no NumPy bfloat16: bits, or ml_dtypes
    bits = got.view(np.uint16)
    want_a = a.bfloat16().float().numpy()
    want_b = b.T.bfloat16().float().numpy()
    h.assert_close(h.bf16_bits_to_f32(bits), want_a, want_b, None, 1.0, 0.0, False, False,
                   "bf16", "torch bf16")


def test_gib_operand_and_result(client, rng, quick):
    """A 1 GiB operand out and a 1 GiB result back (the daemon's default max_operand_bytes),
    both straight from and into the arrays; checked on sampled rows."""
    if quick:
        pytest.skip("quick run (sanitizer build or GEMMD_TEST_QUICK=1): no GiB transfers")
    rows = rng.integers(0, 16384, 6)
    a = rng.standard_normal((16384, 16)).astype(np.float32)
    b = rng.standard_normal((16, 16384)).astype(np.float32)
    c = client.gemm(a, b)                                   # 1 GiB back
    assert c.nbytes == 1 << 30
    h.assert_close(c[rows], a[rows], b, None, 1.0, 0.0, False, False, "f32", "1 GiB result")
    del c
    big = np.empty((8192, 32768), np.float32)               # 1 GiB out
    big[:] = rng.standard_normal(32768).astype(np.float32)
    big[rows % 8192] = rng.standard_normal((6, 32768)).astype(np.float32)
    x = rng.standard_normal((32768, 3)).astype(np.float32)
    y = client.gemm(big, x)
    h.assert_close(y[rows % 8192], big[rows % 8192], x, None, 1.0, 0.0, False, False, "f32",
                   "1 GiB operand")
    h.assert_close(y[:4], big[:4], x, None, 1.0, 0.0, False, False, "f32", "1 GiB operand")
