"""gemmd.Client's shared memory against a real daemon: shm_array regions as operands and as
out=, alone and mixed with ordinary arrays, in every dtype, checked against the float64
reference; slices of one region; shm_free; and what happens where the daemon offers none (TCP,
shm.enabled false)."""

import time

import numpy as np
import pytest

import gemmd
import gemmd_harness as h

DTYPES = ["f32", "f64", "f16", "bf16"]
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.uint16}


def fill(client, x, dtype):
    """x (float64, representable in dtype) copied into a new shm array of dtype."""
    arr = client.shm_array(x.shape, NP[dtype])
    arr[...] = h.f32_to_bf16_bits(x.astype(np.float32)) if dtype == "bf16" else x
    return arr


def as_f64(x, dtype):
    return h.bf16_bits_to_f32(x).astype(np.float64) if dtype == "bf16" else x.astype(np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_shm", ["ab", "a", "b", "", "abc"])
@pytest.mark.parametrize("out_shm", [True, False])
def test_gemm_in_shared_memory(client, rng, dtype, in_shm, out_shm):
    m, n, k = 37, 21, 53
    a, b = h.random_operands(rng, m, n, k, dtype)
    c = h.round_to(rng.uniform(-1, 1, (m, n)), dtype) if "c" in in_shm else None
    beta = 0.5 if c is not None else 0.0
    ops = []
    for name, x in (("a", a), ("b", b), ("c", c)):
        if x is None:
            continue
        ops.append(fill(client, x, dtype) if name in in_shm else
                   (h.f32_to_bf16_bits(x.astype(np.float32)) if dtype == "bf16"
                    else x.astype(NP[dtype])))
    out = client.shm_array((m, n), NP[dtype]) if out_shm else None
    before = client.stats()["bytes_in"]
    result = client.gemm(*ops, alpha=1.5, beta=beta, out=out)
    if out_shm:
        assert result is out
        future = client.submit(*ops, alpha=1.5, beta=beta, out=out)
        assert future.result() is out
        assert future.report["out"]["bytes"] == m * n * np.dtype(NP[dtype]).itemsize
    h.assert_close(as_f64(result, dtype), a, b, c, 1.5, beta, False, False, dtype,
                   "%s in shm %r out %s" % (dtype, in_shm, out_shm))
    if in_shm == "abc":   # nothing but the requests' framing came over the socket
        assert client.stats()["bytes_in"] - before < 1024


def test_slices_of_one_region_and_batches(client, rng):
    block = client.shm_array((3, 40, 40), np.float64)
    a, b = h.random_operands(rng, 40, 40, 40, "f64", batch=2)
    block[0], block[1] = a[0], b[0]
    got = client.gemm(block[0], block[1], out=block[2])
    h.assert_close(got, a[0], b[0], None, 1.0, 0.0, False, False, "f64")
    batch = client.shm_array((2, 2, 40, 40), np.float64)
    batch[0], batch[1] = a, b
    out = client.shm_array((2, 40, 40), np.float64)
    client.gemm(batch[0], batch[1], out=out, trans_b=True)
    h.assert_close(out, a, b, None, 1.0, 0.0, False, True, "f64")
    # a transposed view (column-major) goes by reference too, with the flag flipped
    client.gemm(block[0].T, block[1], out=block[2])
    h.assert_close(block[2], a[0], b[0], None, 1.0, 0.0, True, False, "f64")


def test_output_overlapping_an_input_is_refused(client):
    block = client.shm_array((2, 8, 8), np.float32)
    block[...] = 1.0
    with pytest.raises(gemmd.Error) as err:
        client.gemm(block[0], block[1], out=block[0])
    assert err.value.code == "INVALID_ARGUMENT" and "overlap" in err.value.message


def test_shm_free(client, rng):
    a = client.shm_array((16, 16), np.float32)
    a[...] = rng.uniform(-1, 1, (16, 16))
    regions = client.stats()["shm_regions"]
    client.shm_free(a)
    assert client.stats()["shm_regions"] == regions - 1
    got = client.gemm(a, a)         # sent as bytes now
    h.assert_close(got, a, a, None, 1.0, 0.0, False, False, "f32")
    with pytest.raises(ValueError):
        client.shm_free(a)
    with pytest.raises(ValueError):
        client.shm_free(np.ones(4))


def test_regions_go_with_the_client(daemon):
    with gemmd.Client(daemon.address()) as watcher:
        with gemmd.Client(daemon.address()) as c:
            c.shm_array(1000, np.float32)
            c.shm_array((10, 10), np.float64)
            assert watcher.stats()["shm_regions"] >= 2
        h.wait_until(lambda: watcher.stats()["shm_regions"] == 0, 10 * daemon.scale,
                     "the regions to go with the connection")


def test_no_shm_over_tcp(daemon):
    with gemmd.Client(daemon.address("tcp")) as c:
        assert "shm" not in c.features
        with pytest.raises(gemmd.Error) as err:
            c.shm_array((4, 4))
        assert err.value.code == "UNIMPLEMENTED"
        assert c.ping() >= 0


def test_no_shm_when_disabled(fresh_daemon):
    d = fresh_daemon(config={"shm": {"enabled": False}})
    with gemmd.Client(d.address()) as c:
        assert "shm" not in c.features
        with pytest.raises(gemmd.Error):
            c.shm_array((4, 4))
    d.stop()


def test_quota_refusal_leaves_the_client_usable(fresh_daemon):
    d = fresh_daemon(config={"shm": {"max_regions_per_connection": 1}})
    with gemmd.Client(d.address()) as c:
        a = c.shm_array((8, 8), np.float32)
        with pytest.raises(gemmd.Error) as err:
            c.shm_array((8, 8), np.float32)
        assert err.value.code == "RESOURCE_EXHAUSTED"
        a[...] = 2.0
        assert np.all(c.gemm(a, a) == 32.0)
    d.stop()


def test_regions_after_an_idle_close(fresh_daemon, rng):
    """The daemon closes an idle connection and its regions with it: the client reconnects, the
    arrays are plain memory again (sent as bytes, results still right), and shm_free of such
    an array is a no-op; new arrays are registered on the new connection."""
    d = fresh_daemon(config={"timeouts": {"idle_ms": 200}})
    with gemmd.Client(d.address()) as c:
        a = fill(c, h.round_to(rng.uniform(-1, 1, (30, 20)), "f32"), "f32")
        b = fill(c, h.round_to(rng.uniform(-1, 1, (20, 10)), "f32"), "f32")
        out = c.shm_array((30, 10), np.float32)
        time.sleep(0.6)                      # past idle_ms: the daemon closed the connection
        got = c.gemm(a, b, out=out)
        h.assert_close(got.astype(np.float64), a.astype(np.float64), b.astype(np.float64), None,
                       1.0, 0.0, False, False, "f32", "after the idle close")
        assert c.stats()["shm_regions"] == 0  # the new connection has none
        c.shm_free(a)                          # went with the old connection: nothing to do
        fresh = c.shm_array((4, 4), np.float32)
        assert c.stats()["shm_regions"] == 1
        c.shm_free(fresh)
    d.stop()


@pytest.mark.parametrize("dtype", DTYPES)
def test_auto_shm(daemon, rng, dtype):
    """gemm() of plain arrays of 1 MiB or more goes through a scratch region by itself: the
    result is right (transposed views, c and beta, out= included), nothing but framing crosses
    the socket, and the scratch is registered once; auto_shm=False sends the bytes."""
    m, n, k = 400, 360, 700          # a and b: over 1 MiB together in every dtype
    a, b = h.random_operands(rng, m, n, k, dtype, True, False)   # a as k x m: op(a) = a.T
    c = h.round_to(rng.uniform(-1, 1, (m, n)), dtype)
    typed = [h.f32_to_bf16_bits(x.astype(np.float32)) if dtype == "bf16" else x.astype(NP[dtype])
             for x in (a, b, c)]
    with gemmd.Client(daemon.address(), timeout=120 * daemon.scale) as client:
        before = client.stats()
        got = client.gemm(typed[0], typed[1], typed[2], alpha=0.5, beta=-1.0, trans_a=True)
        h.assert_close(as_f64(got, dtype), a, b, c, 0.5, -1.0, True, False, dtype, "auto shm")
        out = np.zeros((m, n), NP[dtype])
        again = client.gemm(typed[0], typed[1], trans_a=True, out=out)
        assert again is out
        h.assert_close(as_f64(out, dtype), a, b, None, 1.0, 0.0, True, False, dtype,
                       "auto shm, out=")
        after = client.stats()
        assert after["bytes_in"] - before["bytes_in"] < 64 * 1024, "operands went over the socket"
        assert after["shm_regions"] - before["shm_regions"] == 1, "one scratch region"
    with gemmd.Client(daemon.address(), timeout=120 * daemon.scale, auto_shm=False) as plain:
        before = plain.stats()["bytes_in"]
        got = plain.gemm(typed[0], typed[1], trans_a=True)
        h.assert_close(as_f64(got, dtype), a, b, None, 1.0, 0.0, True, False, dtype, "no shm")
        assert plain.stats()["bytes_in"] - before >= typed[0].nbytes + typed[1].nbytes
