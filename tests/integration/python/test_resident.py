"""gemmd.Client's resident operands against a real daemon: put() then gemm with the Resident as
a, b or c in every dtype, checked against the float64 reference; a batch of a by one b (sent
as an array or as a Resident); free(), a freed Resident, one of a connection that is gone; the
daemon's counts back to zero."""

import numpy as np
import pytest

import gemmd
import gemmd_harness as h

DTYPES = ["f32", "f64", "f16", "bf16"]
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.uint16}


def native(x, dtype):
    """x (float64, representable in dtype) as the array the client sends for dtype."""
    return h.f32_to_bf16_bits(x.astype(np.float32)) if dtype == "bf16" else x.astype(NP[dtype])


def as_f64(x, dtype):
    return h.bf16_bits_to_f32(x).astype(np.float64) if dtype == "bf16" else x.astype(np.float64)


def held(client):
    stats = client.stats()
    return stats["resident_handles"], stats["resident_bytes"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("resident", ["a", "b", "c", "abc"])
def test_gemm_with_resident_operands(client, rng, dtype, resident):
    m, n, k = 29, 18, 41
    a, b = h.random_operands(rng, m, n, k, dtype, trans_b=True)
    c = h.round_to(rng.uniform(-1, 1, (m, n)), dtype)
    sent, puts = [], []
    for name, x in (("a", a), ("b", b), ("c", c)):
        x = native(x, dtype)
        if name in resident:
            puts.append(client.put(x))
            x = puts[-1]
        sent.append(x)
    assert all(isinstance(r, gemmd.Resident) for r in puts)
    result = client.gemm(*sent, alpha=0.5, beta=-1.5, trans_b=True)
    h.assert_close(as_f64(result, dtype), a, b, c, 0.5, -1.5, False, True, dtype,
                   "%s resident %r" % (dtype, resident))
    for r in puts:
        client.free(r)
    assert held(client)[0] == 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("as_resident", [False, True])
@pytest.mark.parametrize("trans_a", [False, True])
def test_batch_by_one_b(client, rng, dtype, as_resident, trans_a):
    """A 3-D a by a 2-D b: one b for every batch entry (broadcast_b)."""
    batch, m, n, k = 4, 12, 10, 16
    a, b = h.random_operands(rng, m, n, k, dtype, trans_a=trans_a, batch=batch)
    b = b[0]
    w = client.put(native(b, dtype)) if as_resident else native(b, dtype)
    future = client.submit(native(a, dtype), w, trans_a=trans_a)
    result = future.result(60)
    assert result.shape == (batch, m, n)
    assert future.report["batch"] == batch
    h.assert_close(as_f64(result, dtype), a, b, None, 1.0, 0.0, trans_a, False, dtype,
                   "%s batch by one b (resident %s)" % (dtype, as_resident))
    if as_resident:
        client.free(w)


def test_one_put_many_gemms(client, rng):
    w = rng.standard_normal((64, 32)).astype(np.float32)
    handle = client.put(w)
    assert handle.shape == (64, 32) and handle.dtype == np.float32
    assert held(client) == (1, 64 * 32 * 4)
    for rows in (1, 5, 100):
        x = rng.standard_normal((rows, 64)).astype(np.float32)
        np.testing.assert_allclose(client.gemm(x, handle), x @ w, rtol=1e-4, atol=1e-4)
    client.free(handle)
    assert held(client) == (0, 0)


def test_free_and_misuse(client, daemon):
    handle = client.put(np.ones((4, 4), np.float64))
    with pytest.raises(TypeError):
        client.gemm(np.ones((3, 4), np.float32), handle)      # dtypes differ
    with pytest.raises(ValueError):
        client.gemm(np.ones((3, 5)), handle)                  # inner dimensions differ
    client.free(handle)
    with pytest.raises(ValueError):
        client.gemm(np.ones((3, 4)), handle)                  # freed: refused before sending
    handle.freed = False                                      # pretend: the daemon says so
    with pytest.raises(gemmd.Error) as exc:
        client.gemm(np.ones((3, 4)), handle)
    assert exc.value.code == "NOT_FOUND"
    with pytest.raises(gemmd.Error) as exc:
        client.free(handle)
    assert exc.value.code == "NOT_FOUND"
    with pytest.raises(TypeError):
        client.free(3)
    # another client's handle is not this one's
    with gemmd.Client(daemon.address()) as other:
        theirs = other.put(np.ones((4, 4)))
        with pytest.raises(gemmd.Error) as exc:
            client.gemm(np.ones((3, 4)), theirs)
        assert exc.value.code == "NOT_FOUND"
        other.free(theirs)
    assert client.ping() > 0


def test_gone_with_the_connection(fresh_daemon):
    d = fresh_daemon()
    with gemmd.Client(d.address()) as watcher:
        with gemmd.Client(d.address()) as c:
            handles = [c.put(np.ones((32, 32))) for _ in range(3)]
            assert held(watcher) == (3, 3 * 32 * 32 * 8)
            c._fail(gemmd.ConnectionLost("test: connection dropped"))   # as if it broke
            h.wait_until(lambda: held(watcher) == (0, 0), 10 * d.scale,
                         "the handles to go with their connection")
            with pytest.raises(gemmd.Error) as exc:
                c.gemm(np.ones((3, 32)), handles[0])    # reconnects; the handle stayed behind
            assert exc.value.code == "NOT_FOUND"
            c.free(handles[1])                          # nothing to do: gone already
            assert handles[1].freed


def test_quota(fresh_daemon):
    d = fresh_daemon(config={"resident": {"max_handles_per_connection": 1}})
    with gemmd.Client(d.address()) as c:
        first = c.put(np.ones((2, 2)))
        with pytest.raises(gemmd.Error) as exc:
            c.put(np.ones((2, 2)))
        assert exc.value.code == "RESOURCE_EXHAUSTED"
        c.free(first)
        c.free(c.put(np.ones((2, 2))))
        assert held(c) == (0, 0)
