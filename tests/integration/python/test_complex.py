"""The complex gemm (feature "complex") through gemmd.Client and gemmd.aio.Client against a real
daemon: NumPy complex64 / complex128 operands on odd shapes with every trans / conj combination,
Python complex alpha and beta, C- and Fortran-order operands, out= (poisoned), batches and a
batch by one b, shared memory (shm_array operands and out=, and the automatic scratch), resident
operands (put), asyncio; each against the complex128 product within a bound of
8 (k + 4) u sum |alpha a b| + |beta c|. What the client refuses before sending (a complex alpha
on a real gemm, conj on a real gemm) raises ValueError, and the header carries alpha_im /
beta_im / conj only when set."""

import asyncio
import itertools

import numpy as np
import pytest

import gemmd
import gemmd.aio

U = {np.complex64: 2.0 ** -24, np.complex128: 2.0 ** -53}


def crandom(rng, shape, dtype):
    return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)).astype(dtype)


def op(x, trans, conj):
    x = np.swapaxes(x, -1, -2) if trans else x
    return np.conj(x) if conj else x


def check(got, a, b, c=None, alpha=1, beta=0, ta=False, tb=False, ca=False, cb=False, what=""):
    pa = op(a.astype(np.complex128), ta, ca)
    pb = op(b.astype(np.complex128), tb, cb)
    ref = alpha * np.matmul(pa, pb)
    bound = abs(alpha) * np.matmul(np.abs(pa), np.abs(pb))
    if beta != 0:
        ref = ref + beta * c.astype(np.complex128)
        bound = bound + abs(beta) * np.abs(c)
    assert got.dtype == a.dtype and got.shape == ref.shape, (what, got.dtype, got.shape)
    k = pa.shape[-1]
    tol = 8 * (k + 4) * U[a.dtype.type] * bound + 1e-300
    err = np.abs(got.astype(np.complex128) - ref)
    assert np.all(err <= tol), "%s: error %.3g of the tolerance" % (what, np.max(err / tol))


@pytest.fixture
def complex_client(client):
    if "complex" not in client.features:
        pytest.skip("the daemon has no complex gemm")
    return client


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_forms(complex_client, rng, dtype):
    client = complex_client
    for ta, tb, ca, cb in itertools.product((False, True), repeat=4):
        m, n, k = (int(v) for v in rng.integers(1, 50, 3))
        a = crandom(rng, (k, m) if ta else (m, k), dtype)
        b = crandom(rng, (n, k) if tb else (k, n), dtype)
        c = crandom(rng, (m, n), dtype)
        what = "%s ta %d tb %d ca %d cb %d" % (dtype.__name__, ta, tb, ca, cb)
        alpha, beta = complex(*rng.uniform(-2, 2, 2)), complex(*rng.uniform(-2, 2, 2))
        got = client.gemm(a, b, c, alpha=alpha, beta=beta, trans_a=ta, trans_b=tb, conj_a=ca,
                          conj_b=cb)
        check(got, a, b, c, alpha, beta, ta, tb, ca, cb, what)
        # Fortran-order operands (sent as their transposes), out= poisoned, beta 0
        out = np.full((m, n), np.nan, dtype)
        fa, fb = np.asfortranarray(a), np.asfortranarray(b)
        assert client.gemm(fa, fb, alpha=alpha, trans_a=ta, trans_b=tb, conj_a=ca, conj_b=cb,
                           out=out) is out
        check(out, a, b, None, alpha, 0, ta, tb, ca, cb, what + " fortran out=")


def test_batches(complex_client, rng):
    for dtype in (np.complex64, np.complex128):
        a = crandom(rng, (3, 19, 7), dtype)
        b = crandom(rng, (3, 7, 11), dtype)
        c = crandom(rng, (3, 19, 11), dtype)
        check(complex_client.gemm(a, b, c, alpha=1j, beta=-1), a, b, c, 1j, -1, what="batch")
        check(complex_client.gemm(a, b[0], conj_b=True), a, b[0], cb=True, what="broadcast")


def test_shared_memory_and_resident(complex_client, rng):
    client = complex_client
    m, n, k = 37, 29, 41
    a, b = crandom(rng, (m, k), np.complex64), crandom(rng, (k, n), np.complex64)
    if "shm" in client.features:
        sa, sb = client.shm_array((m, k), np.complex64), client.shm_array((k, n), np.complex64)
        sout = client.shm_array((m, n), np.complex64)
        sa[...], sb[...], sout[...] = a, b, np.nan
        before = client.stats()["bytes_in"]
        assert client.gemm(sa, sb, alpha=2 - 1j, out=sout) is sout
        assert client.stats()["bytes_in"] - before < 1024, "the operands crossed the socket"
        check(sout, a, b, alpha=2 - 1j, what="shm")
        big_a = crandom(rng, (300, 400), np.complex128)
        big_b = crandom(rng, (400, 300), np.complex128)
        check(client.gemm(big_a, big_b, conj_a=True), big_a, big_b, ca=True, what="staged")
    ra, rb = client.put(a), client.put(b)
    assert ra.dtype == np.complex64
    check(client.gemm(ra, rb, alpha=0.5j), a, b, alpha=0.5j, what="resident")
    client.free(ra)
    client.free(rb)


def test_misuse_refused_before_sending(client):
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="complex alpha"):
        client.gemm(a, a.T, alpha=1 + 1j)
    with pytest.raises(ValueError, match="conj_a"):
        client.gemm(a, a.T, conj_a=True)
    # a complex alpha with 0 imaginary part is a real alpha
    got = client.gemm(a, a.T, alpha=2 + 0j)
    assert np.allclose(got, 8.0)


def test_aio(daemon, rng):
    async def main():
        async with gemmd.aio.Client(daemon.address()) as c:
            if "complex" not in await c.features():
                pytest.skip("the daemon has no complex gemm")
            jobs = []
            for i in range(6):
                a = crandom(rng, (9 + i, 5), np.complex128)
                b = crandom(rng, (7, 5), np.complex128)
                jobs.append((a, b, c.gemm(a, b, trans_b=True, conj_b=True, alpha=1 + i * 1j)))
            for i, (a, b, job) in enumerate(jobs):
                check(await job, a, b, alpha=1 + i * 1j, tb=True, cb=True, what="aio %d" % i)
    asyncio.run(main())
