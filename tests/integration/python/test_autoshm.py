"""gemm() of plain arrays through the automatic scratch region (gemmd._autoshm) against a real
daemon: every dtype (out_dtype casts included) and layout (C and Fortran order, transposed
views, strided slices, broadcast views), whole and cut into row pieces, checked against the
float64 reference with poisoned outputs at odd sizes; the region made once and reused, grown
when a larger gemm comes; a daemon error on one piece of a pipelined gemm raised cleanly,
the client usable after it; and the copy threads' own checks."""

import numpy as np
import pytest

import gemmd
import gemmd_harness as h
from gemmd import _autoshm, _copier, fp8

# (operand kind, out_dtype, tolerance dtype of the result): the kinds of arrays gemm takes
KINDS = [("f32", None, "f32"), ("f64", None, "f64"), ("f16", None, "f16"),
         ("bf16", None, "bf16"), ("i8", None, "i32"), ("e4m3", None, "fp8"),
         ("f32", "f16", "f16"), ("f64", "bf16", "bf16")]
LAYOUTS = ["c", "f", "t", "s"]
M, N, K = 67, 45, 53


@pytest.fixture
def always_scratch(monkeypatch):
    """The cost model told the socket is slow, so that small gemms take the scratch too."""
    monkeypatch.setattr(_autoshm, "SOCKET_BYTES_PER_S", 1.0)


def values(rng, shape, kind):
    """float64 values the operand kind holds exactly."""
    if kind == "i8":
        return rng.integers(-8, 9, shape).astype(np.float64)
    x = rng.uniform(-1, 1, shape)
    if kind == "e4m3":
        return fp8.from_e4m3(fp8.to_e4m3(x)).astype(np.float64)
    return h.round_to(x, kind)


def typed(x, kind):
    """x (float64, exact in kind) as the array gemm takes for kind."""
    if kind == "bf16":
        return h.f32_to_bf16_bits(x.astype(np.float32))
    if kind == "e4m3":
        return fp8.to_e4m3(x)
    return x.astype({"f32": np.float32, "f64": np.float64, "f16": np.float16,
                     "i8": np.int8, "i32": np.int32}[kind])


def laid_out(x, kind, layout):
    """x typed, in layout: c row-major, f column-major, t a transposed view, s a strided slice."""
    if layout == "c":
        return typed(x, kind)
    if layout == "f":
        return np.asfortranarray(typed(x, kind))
    if layout == "t":
        return typed(np.ascontiguousarray(x.T), kind).T
    big = np.zeros((2 * x.shape[0], 2 * x.shape[1] + 1), typed(x[:1, :1], kind).dtype)
    big[::2, 1::2] = typed(x, kind)
    return big[::2, 1::2]


def result_kind(kind, out_dtype):
    return out_dtype or {"i8": "i32", "e4m3": "f32"}.get(kind, kind)


def as_f64(x, kind):
    """bf16 as bit patterns (uint16), or as ml_dtypes.bfloat16 where that is installed: a fresh
    result of out_dtype "bf16" then comes in it."""
    if kind == "bf16" and x.dtype == np.uint16:
        return h.bf16_bits_to_f32(x).astype(np.float64)
    return x.astype(np.float64)


def check(got, ref_args, kind, tol_kind):
    a, b, c, alpha, beta, trans_a, trans_b = ref_args
    got64 = as_f64(got, tol_kind if tol_kind in ("bf16",) else "x")
    if tol_kind == "i32":
        np.testing.assert_array_equal(got64, h.ref_gemm(*ref_args))
        return
    if tol_kind == "fp8":   # exact products summed in float32
        tol_kind = "f32"
    h.assert_close(got64, a, b, c, alpha, beta, trans_a, trans_b, tol_kind, "scratch")


def poisoned(shape, kind):
    if kind == "i32":
        return np.full(shape, -123456789, np.int32)
    if kind == "bf16":
        return np.full(shape, 0x7fc1, np.uint16)     # a NaN
    return np.full(shape, np.nan, {"f32": np.float32, "f64": np.float64,
                                   "f16": np.float16}[kind])


@pytest.mark.parametrize("pieces", [1, 3])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind,out_dtype,tol_kind", KINDS)
def test_every_dtype_and_layout(daemon, rng, always_scratch, kind, out_dtype, tol_kind, layout,
                                pieces):
    """a in the layout, b in the next one; trans_a with Fortran and transposed a; c with beta
    for the float gemms; out= poisoned (column-major for the transposed layout); whole on one
    copy thread, in pieces on four."""
    trans_a = layout in ("f", "t")
    a64 = values(rng, (K, M) if trans_a else (M, K), kind)
    b64 = values(rng, (K, N), kind)
    out_kind = result_kind(kind, out_dtype)
    beta = 0.0 if kind in ("i8",) else -0.5
    c64 = values(rng, (M, N), "f16" if out_kind in ("f16", "f32", "f64") else out_kind) \
        if kind != "i8" else None
    if kind == "i8":
        c64 = rng.integers(-50, 50, (M, N)).astype(np.float64)
        beta = 2.0
    a = laid_out(a64, kind, layout)
    b = laid_out(b64, kind, LAYOUTS[(LAYOUTS.index(layout) + 1) % len(LAYOUTS)])
    c = typed(c64, out_kind)
    out = poisoned((M, N), out_kind)
    if layout == "t":
        out = np.asfortranarray(out)
    kw = {"dtype": "e4m3"} if kind == "e4m3" else {}
    with gemmd.Client(daemon.address(), timeout=120 * daemon.scale, shm_min_bytes=0,
                      scratch_pieces=pieces, copy_threads=1 if pieces == 1 else 4) as client:
        got = client.gemm(a, b, c, alpha=1.5 if kind != "i8" else 3, beta=beta,
                          trans_a=trans_a, out=out, out_dtype=out_dtype, **kw)
        assert got is out
        assert client._scratch.served == 1, "the gemm did not go through the scratch"
        ref_args = (a64, b64, c64, 1.5 if kind != "i8" else 3, beta, trans_a, False)
        check(out, ref_args, kind, tol_kind)
        fresh = client.gemm(a, b, trans_a=trans_a, out_dtype=out_dtype, **kw)   # a new array
        check(fresh, (a64, b64, None, 1.0, 0.0, trans_a, False), kind, tol_kind)
        assert client._scratch.served == 2


def test_out_in_any_dtype_the_socket_takes(daemon, rng, always_scratch, monkeypatch):
    """out= in any dtype the socket path takes for the result goes through the scratch too:
    with out_dtype "bf16", uint16 bit patterns and (where installed) ml_dtypes.bfloat16. Where
    ml_dtypes is installed "bf16" names ml_dtypes.bfloat16, and the scratch refused a uint16
    out (an H200 run's f64 -> bf16 cases); without it, a stand-in dtype for "bf16" shows the
    same."""
    outs = [poisoned((37, 31), "bf16")]
    try:
        import ml_dtypes
        outs.append(np.full((37, 31), np.nan, ml_dtypes.bfloat16))
    except ImportError:
        monkeypatch.setitem(gemmd._arrays._RESULT_DTYPES, "bf16", np.dtype("V2"))
    a64, b64 = values(rng, (37, 29), "f32"), values(rng, (29, 31), "f32")
    with gemmd.Client(daemon.address(), timeout=120 * daemon.scale, shm_min_bytes=0) as client:
        for out in outs:
            assert client.gemm(typed(a64, "f64"), typed(b64, "f64"), out=out,
                               out_dtype="bf16") is out
            check(out.view(np.uint16), (a64, b64, None, 1.0, 0.0, False, False), "f64", "bf16")
        assert client._scratch.served == len(outs)


@pytest.mark.parametrize("pieces", [1, 2])
def test_batches_and_broadcast(daemon, rng, always_scratch, pieces):
    """3-D batches (one b for all, a broadcast row as b) go through the scratch whole; a 2-D
    gemm of a broadcast b, and big-endian operands, whole or in pieces."""
    a64 = values(rng, (3, 37, 29), "f32")
    b64 = np.broadcast_to(values(rng, (1, 31), "f32"), (29, 31))
    with gemmd.Client(daemon.address(), timeout=120 * daemon.scale, shm_min_bytes=0,
                      scratch_pieces=pieces) as client:
        b = np.broadcast_to(typed(b64[:1], "f32"), (29, 31))
        got = client.gemm(typed(a64, "f32"), b)
        h.assert_close(got, a64, b64, None, 1.0, 0.0, False, False, "f32", "broadcast b")
        bb = np.stack([b64, b64 * 0.5])
        got = client.gemm(np.asfortranarray(typed(a64[:2], "f32")), typed(bb, "f32"))
        h.assert_close(got, a64[:2], bb, None, 1.0, 0.0, False, False, "f32", "batch")
        got = client.gemm(typed(a64[0], "f32"), b)           # 2-D: cut into pieces
        h.assert_close(got, a64[0], b64, None, 1.0, 0.0, False, False, "f32", "2-D broadcast")
        got = client.gemm(typed(a64[1], "f32").astype(">f4"), typed(b64, "f32").astype(">f4"))
        h.assert_close(got, a64[1], b64, None, 1.0, 0.0, False, False, "f32", "big-endian")
        assert client._scratch.served == 4


def test_region_made_once_and_reused(daemon, rng, always_scratch):
    """Gemms of the size of the first or smaller reuse its region (no new region, nothing but
    framing over the socket); a larger one replaces it by one at least twice as large."""
    with gemmd.Client(daemon.address(), timeout=120 * daemon.scale, shm_min_bytes=0) as client:
        before = client.stats()
        for m, n, k in [(120, 110, 100), (120, 110, 100), (60, 50, 99), (7, 5, 3)]:
            a64, b64 = values(rng, (m, k), "f64"), values(rng, (k, n), "f64")
            got = client.gemm(a64, b64)
            h.assert_close(got, a64, b64, None, 1.0, 0.0, False, False, "f64", "reuse")
        after = client.stats()
        scratch = client._scratch
        assert (scratch.served, scratch.regions_made) == (4, 1)
        assert after["shm_regions"] - before["shm_regions"] == 1
        assert after["bytes_in"] - before["bytes_in"] < 32 * 1024, "operands crossed the socket"
        size = scratch.array.nbytes
        a64, b64 = values(rng, (300, 200), "f64"), values(rng, (200, 250), "f64")
        got = client.gemm(a64, b64)
        h.assert_close(got, a64, b64, None, 1.0, 0.0, False, False, "f64", "grown")
        assert scratch.regions_made == 2 and scratch.array.nbytes >= 2 * size
        assert client.stats()["shm_regions"] - before["shm_regions"] == 1, "old region kept"


def test_over_the_limit_goes_by_socket(daemon, rng, always_scratch):
    with gemmd.Client(daemon.address(), timeout=120 * daemon.scale, shm_min_bytes=0,
                      scratch_max_bytes=4096) as client:
        a64, b64 = values(rng, (64, 64), "f32"), values(rng, (64, 64), "f32")
        got = client.gemm(typed(a64, "f32"), typed(b64, "f32"))
        h.assert_close(got, a64, b64, None, 1.0, 0.0, False, False, "f32", "socket")
        assert client._scratch.served == 0 and client._scratch.regions_made == 0


def test_error_on_one_piece(daemon, rng, always_scratch):
    """The daemon refuses the second of three pieces: gemm raises its error once every piece
    is answered, and the client (and its scratch) serve the next gemm."""
    with gemmd.Client(daemon.address(), timeout=120 * daemon.scale, shm_min_bytes=0,
                      scratch_pieces=3) as client:
        a64, b64 = values(rng, (90, 40), "f32"), values(rng, (40, 30), "f32")
        a, b = typed(a64, "f32"), typed(b64, "f32")
        real_submit, sent = client.submit, []

        def submit(*args, **kw):
            sent.append(kw["out"])
            if len(sent) == 2:
                kw = dict(kw, alpha=float("nan"))
            return real_submit(*args, **kw)
        client.submit = submit
        with pytest.raises(gemmd.Error) as info:
            client.gemm(a, b)
        assert info.value.code == "INVALID_ARGUMENT"
        assert len(sent) == 3
        del client.submit
        got = client.gemm(a, b)
        h.assert_close(got, a64, b64, None, 1.0, 0.0, False, False, "f32", "after the error")
        assert client._scratch.regions_made == 1 and client._scratch.array is not None
        assert client.ping() >= 0


def test_model_chooses():
    """The cost model: scratch over the socket when its copies are faster; row pieces only
    where B is small beside what is copied by rows (never for a square gemm on a GPU)."""
    class Fake:
        def info(self):
            return {"backend": "gpu"}
    scratch = _autoshm.Scratch(Fake(), _copier.Copier(4), 0, 1 << 30)
    _copier._bandwidth[4] = 40e9
    assert scratch.worth_it(64 << 20) and not scratch.worth_it(1 << 10)
    f32 = 4
    assert scratch.piece_count(4096, 2 * 4096 * 4096 * f32, 4096 * 4096 * f32) == 1
    assert scratch.piece_count(8192, 2 * 8192 * 8192 * f32, 8192 * 8192 * f32) == 1
    assert scratch.piece_count(1 << 16, 2 * (1 << 16) * 1024 * f32, 1024 * 1024 * f32) > 1
    _copier._bandwidth[4] = 2e9        # a slow copy slows the socket's two copies too
    assert scratch.worth_it(64 << 20) and not scratch.worth_it(16 << 10)
    # however low the bandwidth estimate, a square gemm on a GPU stays whole
    for n in (1024, 2048, 4096):
        assert scratch.piece_count(n, 2 * n * n * f32, n * n * f32) == 1, n
    del _copier._bandwidth[4]


def test_copier_pieces_and_env(monkeypatch):
    """Copies of every shape and layout land whole; GEMMD_COPY_THREADS sizes the pool."""
    monkeypatch.setenv("GEMMD_COPY_THREADS", "3")
    assert _copier.Copier().threads == 3
    monkeypatch.setattr(_copier, "_MIN_PIECE", 64)
    src = np.arange(5 * 301 * 17, dtype=np.float64).reshape(5, 301, 17)
    for threads in (3, 1):      # one thread: no pool at all
        copier = _copier.Copier(threads)
        for s in (src, src[:2], src[:, ::3, 1:], np.swapaxes(src, 1, 2), src[0].T):
            dst, dst2 = np.full(s.shape, np.nan), np.full(s.shape, np.nan)
            copier.copy([(dst, s), (dst2, s)])
            np.testing.assert_array_equal(dst, s)
            np.testing.assert_array_equal(dst2, s)
        buf = np.ones(3 << 20, np.uint8)
        copier.touch(buf)
        assert not buf[::4096].any()
        copier.close()
    for bad in ("0", "x"):
        monkeypatch.setenv("GEMMD_COPY_THREADS", bad)
        with pytest.raises(ValueError):
            _copier.Copier()


def test_timeout_retires_the_scratch(daemon, rng, always_scratch):
    """A gemm given up on (timeout 0) may still have its result written into the scratch
    later: the next gemm takes a new region, right, and the old one goes once it may."""
    with gemmd.Client(daemon.address(), timeout=120 * daemon.scale, shm_min_bytes=0) as client:
        a64, b64 = values(rng, (200, 150), "f64"), values(rng, (150, 170), "f64")
        before = client.stats()["shm_regions"]
        with pytest.raises(gemmd.Timeout):
            client.gemm(a64, b64, timeout=0)
        scratch = client._scratch
        assert scratch.array is None and len(scratch.retired) == 1
        for _ in range(2):
            got = client.gemm(a64, b64)
            h.assert_close(got, a64, b64, None, 1.0, 0.0, False, False, "f64", "after timeout")
        assert scratch.regions_made == 2 and scratch.served == 3
        h.wait_until(lambda: scratch.tidy() or not scratch.retired, 10 * daemon.scale,
                     "the old scratch unregistered")
        assert client.stats()["shm_regions"] - before <= 1, "the old scratch still registered"


def test_threads_share_one_client(daemon, rng, always_scratch):
    """gemms of several threads on one client: one at a time takes the scratch, the others
    the socket, every result right."""
    import threading
    with gemmd.Client(daemon.address(), timeout=120 * daemon.scale, shm_min_bytes=0) as client:
        problems = [(values(rng, (90 + i, 70), "f32"), values(rng, (70, 50 + i), "f32"))
                    for i in range(4)]
        errors = []

        def work(a64, b64):
            try:
                for _ in range(5):
                    got = client.gemm(typed(a64, "f32"), np.asfortranarray(typed(b64, "f32")))
                    h.assert_close(got, a64, b64, None, 1.0, 0.0, False, False, "f32", "thread")
            except BaseException as exc:   # noqa: B902 - reported below
                errors.append(exc)
        threads = [threading.Thread(target=work, args=p) for p in problems]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert client._scratch.served >= 1
