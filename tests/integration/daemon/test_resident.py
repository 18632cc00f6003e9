#!/usr/bin/python3
"""Resident operands and the 2-D B broadcast (proto/PROTOCOL.md, "Resident operands"): put
returns a handle, a gemm names it as a, b or c ({"handle": N}), checked against a float64
reference in every dtype with transposes and alpha/beta; a batched gemm with broadcast_b takes
one B for every batch entry (sent as bytes or as a handle); free, stale and foreign handles are
NOT_FOUND; shape and dtype mismatches are INVALID_ARGUMENT; the quotas refuse with
RESOURCE_EXHAUSTED and leak nothing; a connection's handles go with it."""
import os
import sys

import msgpack
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402
from test_shm import Region, expect_error, gemm_refs  # noqa: E402

DTYPES = ("f32", "f64", "f16", "bf16")


def put(client, arr, dtype, batch=None):
    """Uploads arr (2-D, or 3-D with its batch first) as dtype; returns the handle."""
    arr = np.asarray(arr)
    hdr = {"dtype": dtype, "rows": arr.shape[-2], "cols": arr.shape[-1]}
    if arr.ndim == 3:
        hdr["batch"] = arr.shape[0]
    result = client.call("put", [hdr, h.to_wire(arr, dtype)])
    assert isinstance(result, dict) and isinstance(result.get("handle"), int), result
    return result["handle"]


def resident_stats(client):
    stats = client.call("stats")
    return stats["resident_handles"], stats["resident_bytes"]


def checked(ctx, client, m, n, k, dtype, resident, trans_a=False, trans_b=False, alpha=1.0,
            beta=0.0, batch=None, broadcast=False):
    """One gemm with the operands named in `resident` ("a", "bc"...) put first and sent by
    handle, the rest as bytes; checked against float64. Frees its handles."""
    lead = (batch,) if batch else ()
    a, b = h.random_operands(ctx.rng, m, n, k, dtype, trans_a, trans_b, batch)
    if broadcast:
        b = b[0]
    c = h.round_to(ctx.rng.uniform(-1, 1, lead + (m, n)), dtype) if beta else None
    hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "trans_a": trans_a, "trans_b": trans_b,
           "alpha": alpha, "beta": beta}
    if batch:
        hdr["batch"] = batch
    if broadcast:
        hdr["broadcast_b"] = True
    handles = []
    sent = []
    for name, x in (("a", a), ("b", b), ("c", c)):
        if x is not None and name in resident:
            handles.append(put(client, x, dtype))
            sent.append({"handle": handles[-1]})
        else:
            sent.append(x)
    out_hdr, data = gemm_refs(client, hdr, *sent)
    what = "resident %s gemm %dx%dx%d %s ta=%s tb=%s batch=%s bcast=%s" % (
        resident, m, n, k, dtype, trans_a, trans_b, batch, broadcast)
    h.check_out_hdr(out_hdr, m, n, dtype, batch or 1, what)
    out = h.from_wire(data, dtype, lead + (m, n))
    h.assert_close(out, a, b, c, alpha, beta, trans_a, trans_b, dtype, what)
    for handle in handles:
        assert client.call("free", [handle]) is None
    return out


def test_features(ctx):
    with ctx.daemon() as d, d.connect() as client:
        features = client.call("info")["features"]
        assert "resident" in features and "broadcast_b" in features, features


def test_every_operand_every_dtype(ctx):
    with ctx.daemon() as d, d.connect() as client:
        for dtype in DTYPES:
            for resident in ("a", "b", "c", "abc"):
                checked(ctx, client, 33, 17, 29, dtype, resident, alpha=0.75, beta=-0.5)
            checked(ctx, client, 31, 9, 20, dtype, "ab", trans_a=True, trans_b=True)
            checked(ctx, client, 5, 40, 7, dtype, "b", trans_b=True, batch=3, beta=2.0)
        assert resident_stats(client) == (0, 0)


def test_handle_reused_by_many_gemms(ctx):
    """One B put once, used by several gemms with different A (the point of it)."""
    with ctx.daemon() as d, d.connect() as client:
        rng = ctx.rng
        b = h.round_to(rng.uniform(-1, 1, (48, 24)), "f32")
        handle = put(client, b, "f32")
        for m in (1, 7, 64):
            a = h.round_to(rng.uniform(-1, 1, (m, 48)), "f32")
            out_hdr, data = gemm_refs(client, {"m": m, "n": 24, "k": 48, "dtype": "f32"}, a,
                                     {"handle": handle})
            h.assert_close(h.from_wire(data, "f32", (m, 24)), a, b, None, 1.0, 0.0, False,
                           False, "f32", "reuse m=%d" % m)
        assert resident_stats(client) == (1, 48 * 24 * 4)
        assert client.call("free", [handle]) is None
        assert resident_stats(client) == (0, 0)


def test_broadcast_b(ctx):
    """A batched A with one k x n B: bytes or handle, every dtype, transposes, alpha/beta."""
    with ctx.daemon() as d, d.connect() as client:
        for dtype in DTYPES:
            for trans_a, trans_b in ((False, False), (True, False), (False, True), (True, True)):
                checked(ctx, client, 13, 11, 19, dtype, "", trans_a, trans_b, alpha=1.5,
                        beta=0.5, batch=4, broadcast=True)
                checked(ctx, client, 13, 11, 19, dtype, "b", trans_a, trans_b, batch=5,
                        broadcast=True)
        # batch 1 with broadcast_b is an ordinary gemm
        checked(ctx, client, 8, 8, 8, "f32", "b", batch=1, broadcast=True)
        # the whole B must come: a bin of the batched size is refused
        a = np.ones((3, 4, 5))
        msg = expect_error("INVALID_ARGUMENT", gemm_refs, client,
                           {"m": 4, "n": 6, "k": 5, "dtype": "f32", "batch": 3,
                            "broadcast_b": True}, a, np.ones((3, 5, 6)), what="batched b")
        assert "b: expected %d bytes" % (5 * 6 * 4) in msg, msg
        assert client.call("ping") == "pong"


def test_larger_than_staging(ctx):
    """Resident operands many GPU staging buffers long: their copy into the job pauses while
    staging is full and resumes (as a region's does); results still exact."""
    with ctx.daemon(config={"gpu": {"staging_bytes": "64KiB"}}) as d, d.connect() as client:
        checked(ctx, client, 150, 260, 280, "f32", "b", batch=3, broadcast=True)
        checked(ctx, client, 300, 260, 280, "f64", "abc", beta=0.5)


def test_shape_and_dtype_checked(ctx):
    with ctx.daemon() as d, d.connect() as client:
        handle = put(client, np.ones((4, 6)), "f32")
        hdr = {"m": 3, "n": 6, "k": 4, "dtype": "f32"}
        a = np.ones((3, 4))
        out_hdr, data = gemm_refs(client, hdr, a, {"handle": handle})
        assert np.all(h.from_wire(data, "f32", (3, 6)) == 4.0)
        cases = [
            (dict(hdr, dtype="f64"), "dtype"),
            (dict(hdr, trans_b=True), "transposed"),
            (dict(hdr, k=6, n=4), "other shape"),
            (dict(hdr, batch=2), "batched without broadcast_b"),
        ]
        for bad, what in cases:
            lead = (bad.get("batch", 1),) if bad.get("batch") else ()
            rows, cols = (bad["k"], bad["m"]) if bad.get("trans_a") else (bad["m"], bad["k"])
            msg = expect_error("INVALID_ARGUMENT", gemm_refs, client, bad,
                               np.ones(lead + (rows, cols)), {"handle": handle}, what=what)
            assert "handle %d holds" % handle in msg, msg
            if bad.get("batch"):
                assert "broadcast_b" in msg, msg
        # as a, as c: the shape of those operands
        expect_error("INVALID_ARGUMENT", gemm_refs, client, hdr, {"handle": handle},
                     np.ones((4, 6)), what="as a")
        expect_error("INVALID_ARGUMENT", gemm_refs, client, dict(hdr, beta=1.0), a,
                     np.ones((4, 6)), {"handle": handle}, what="as c")
        # a handle and a region at once, a handle for "out"
        msg = expect_error("INVALID_ARGUMENT", gemm_refs, client, hdr, a,
                           {"handle": handle, "region": 1}, what="both")
        assert "not both" in msg, msg
        msg = expect_error("INVALID_ARGUMENT", gemm_refs, client,
                           dict(hdr, out={"handle": handle}), a, np.ones((4, 6)), what="out")
        assert "not a handle" in msg, msg
        assert resident_stats(client) == (1, 4 * 6 * 4)
        assert client.call("ping") == "pong"


def test_not_found(ctx):
    with ctx.daemon() as d, d.connect() as one, d.connect() as two:
        handle = put(one, np.ones((2, 2)), "f32")
        hdr = {"m": 2, "n": 2, "k": 2, "dtype": "f32"}
        # another connection's handle is not its own
        msg = expect_error("NOT_FOUND", gemm_refs, two, hdr, np.ones((2, 2)), {"handle": handle},
                           what="foreign")
        assert "not held by this connection" in msg, msg
        expect_error("NOT_FOUND", two.call, "free", [handle], what="foreign free")
        out_hdr, data = gemm_refs(one, hdr, np.ones((2, 2)), {"handle": handle})
        assert one.call("free", [handle]) is None
        expect_error("NOT_FOUND", gemm_refs, one, hdr, np.ones((2, 2)), {"handle": handle},
                     what="freed")
        expect_error("NOT_FOUND", one.call, "free", [handle], what="double free")
        expect_error("NOT_FOUND", one.call, "free", [2**64 - 1], what="never given")
        expect_error("INVALID_ARGUMENT", one.call, "free", ["x"], what="not an integer")
        expect_error("INVALID_ARGUMENT", one.call, "free", [], what="no handle")
        assert one.call("ping") == "pong" and two.call("ping") == "pong"
        assert resident_stats(one) == (0, 0)


def test_put_refused(ctx):
    with ctx.daemon() as d, d.connect() as client:
        bad = [
            ([{"dtype": "f32", "rows": 2}, b"\0" * 8], "missing cols"),
            ([{"dtype": "f33", "rows": 2, "cols": 2}, b"\0" * 16], "dtype"),
            ([{"dtype": "f32", "rows": 0, "cols": 2}, b""], "zero rows"),
            ([{"dtype": "f32", "rows": 2, "cols": 2}, b"\0" * 15], "short data"),
            ([{"dtype": "f32", "rows": 2, "cols": 2, "x": 1}, b"\0" * 16], "unknown key"),
            ([{"dtype": "f32", "rows": 2, "cols": 2}], "no data"),
            ([{"dtype": "f32", "rows": 2, "cols": 2}, {"handle": 1}], "data by handle"),
        ]
        for params, what in bad:
            expect_error("INVALID_ARGUMENT", client.call, "put", params, what=what)
        expect_error("RESOURCE_EXHAUSTED", client.call, "put",
                     [{"dtype": "f64", "rows": 65536, "cols": 65536}, b""], what="too large")
        assert resident_stats(client) == (0, 0)
        assert client.call("stats")["reserved_bytes"] == 0
        assert client.call("ping") == "pong"


def test_put_from_a_region(ctx):
    with ctx.daemon() as d, d.connect() as client:
        region = Region(1 << 16).register(client)
        b = h.round_to(ctx.rng.uniform(-1, 1, (16, 8)), "f64")
        ref = region.put(b, "f64")
        handle = client.call("put", [{"dtype": "f64", "rows": 16, "cols": 8}, ref])["handle"]
        region.map[:] = b"\0" * len(region.map)     # the daemon keeps its own copy
        a = h.round_to(ctx.rng.uniform(-1, 1, (3, 16)), "f64")
        out_hdr, data = gemm_refs(client, {"m": 3, "n": 8, "k": 16, "dtype": "f64"}, a,
                                 {"handle": handle})
        h.assert_close(h.from_wire(data, "f64", (3, 8)), a, b, None, 1.0, 0.0, False, False,
                       "f64", "put from a region")
        expect_error("INVALID_ARGUMENT", client.call, "put",
                     [{"dtype": "f64", "rows": 4096, "cols": 4096},
                      {"region": region.id, "offset": 0}], what="past the region")
        expect_error("NOT_FOUND", client.call, "put",
                     [{"dtype": "f64", "rows": 2, "cols": 2},
                      {"region": region.id + 99, "offset": 0}], what="no such region")
        assert resident_stats(client) == (1, 16 * 8 * 8)
        region.close()


def test_quotas(ctx):
    config = {"resident": {"max_handles_per_connection": 3, "max_bytes_per_connection": 4096,
                           "max_bytes_total": 6144}}
    with ctx.daemon(config=config) as d, d.connect() as one, d.connect() as two:
        small = np.ones((4, 4))    # 64 bytes in f32
        handles = [put(one, small, "f32") for _ in range(3)]
        msg = expect_error("RESOURCE_EXHAUSTED", put, one, small, "f32", what="handles")
        assert "max_handles_per_connection" in msg, msg
        one.call("free", [handles.pop()])
        msg = expect_error("RESOURCE_EXHAUSTED", put, one, np.ones((32, 32)), "f32",
                           what="bytes per connection")   # 4096 more on top of 128
        assert "max_bytes_per_connection" in msg, msg
        big = put(two, np.ones((30, 32)), "f32")            # 3840 bytes
        msg = expect_error("RESOURCE_EXHAUSTED", put, one, np.ones((16, 40)), "f32",
                           what="bytes in all")              # 2560 on top of 3968
        assert "max_bytes_total" in msg, msg
        assert resident_stats(one) == (3, 2 * 64 + 3840)
        assert one.call("ping") == "pong"
        two.call("free", [big])
        for handle in handles:
            one.call("free", [handle])
        assert resident_stats(one) == (0, 0)
        assert one.call("stats")["reserved_bytes"] == 0


def test_counted_against_the_memory_budget(ctx):
    with ctx.daemon(config={"queue": {"memory_budget": 1 << 20}}) as d, d.connect() as client:
        handle = put(client, np.ones((256, 768)), "f32")     # 768 KiB of 1 MiB
        assert client.call("stats")["reserved_bytes"] == 256 * 768 * 4
        expect_error("RESOURCE_EXHAUSTED", put, client, np.ones((256, 512)), "f32",
                     what="over the budget")
        client.call("free", [handle])
        assert client.call("stats")["reserved_bytes"] == 0
        handle = put(client, np.ones((256, 512)), "f32")
        client.call("free", [handle])


def test_released_with_the_connection(ctx):
    with ctx.daemon() as d, d.connect() as watcher:
        with d.connect() as client:
            for _ in range(5):
                put(client, np.ones((64, 64)), "f64")
            assert resident_stats(watcher) == (5, 5 * 64 * 64 * 8)
        h.wait_until(lambda: resident_stats(watcher) == (0, 0), 10 * d.scale,
                     "the handles to go with their connection")
        assert watcher.call("stats")["reserved_bytes"] == 0
        # a put cut off half-way through its data holds nothing either
        client = d.connect()
        data = msgpack.packb([0, 1, "put", [{"dtype": "f32", "rows": 512, "cols": 512},
                                            b"\0" * (512 * 512 * 4)]], use_bin_type=True)
        client.send_raw(data[:len(data) // 2])
        h.wait_until(lambda: resident_stats(watcher)[1] == 512 * 512 * 4, 10 * d.scale,
                     "the half-sent put to be counted")
        client.close()
        h.wait_until(lambda: resident_stats(watcher) == (0, 0), 10 * d.scale,
                     "the half-sent put to be dropped")
        assert watcher.call("stats")["reserved_bytes"] == 0


def gpu_devices(client):
    return client.call("stats").get("backend_stats", {}).get("devices", [])


def test_device_copy_once(ctx):
    """GPU backend: a resident B crosses to each device once, not with every gemm; a freed one's
    copies go. (On the CPU backend it is simply used, and only the results are checked.)"""
    config = {"gpu": {"small_job_bytes": 0}}   # every job through the staging path
    with ctx.daemon(config=config) as d, d.connect() as client:
        rng = ctx.rng
        b = h.round_to(rng.uniform(-1, 1, (96, 80)), "f32")
        handle = put(client, b, "f32")
        before = gpu_devices(client)
        h2d = sum(dev.get("bytes_h2d", 0) for dev in before)
        runs = 12
        for i in range(runs):
            a = h.round_to(rng.uniform(-1, 1, (40 + i, 96)), "f32")
            out_hdr, data = gemm_refs(client, {"m": 40 + i, "n": 80, "k": 96, "dtype": "f32"}, a,
                                      {"handle": handle})
            h.assert_close(h.from_wire(data, "f32", (40 + i, 80)), a, b, None, 1.0, 0.0, False,
                           False, "f32", "run %d by a resident B" % i)
        after = gpu_devices(client)
        if not after or "resident_uploads" not in after[0]:
            return                                    # the CPU backend: nothing to count
        uploads = sum(dev["resident_uploads"] for dev in after)
        used = sum(1 for x, y in zip(before, after) if y["jobs"] > x["jobs"])
        assert 1 <= uploads <= used, (uploads, used, after)
        a_bytes = sum((40 + i) * 96 * 4 for i in range(runs))
        sent = sum(dev["bytes_h2d"] for dev in after) - h2d
        assert sent == a_bytes + uploads * 96 * 80 * 4, (sent, a_bytes, uploads)
        assert sum(dev["resident_bytes"] for dev in after) == uploads * 96 * 80 * 4
        assert client.call("free", [handle]) is None
        client.call("ping")                             # a command for the workers to sweep on
        h.wait_until(lambda: sum(dev["resident_bytes"] for dev in gpu_devices(client)) == 0,
                     10 * d.scale, "the device copies of a freed handle to go")


def test_jobs_follow_their_resident_b(ctx):
    """Two GPUs: while device 0 is busy, a connection's first gemm by its resident B goes to
    device 1 and its copy of B is made there; once both are idle again, its later gemms by B
    stay on device 1 (the least-loaded pick alone would take device 0), and B was copied to a
    device once."""
    config = {"gpu": {"small_job_bytes": 0}}
    with ctx.daemon(config=config) as d, d.connect() as client, d.connect() as other:
        if len(gpu_devices(client)) != 2 or "resident_uploads" not in gpu_devices(client)[0]:
            return                                   # needs two (fake) GPUs
        rng = ctx.rng
        b = h.round_to(rng.uniform(-1, 1, (64, 48)), "f32")
        handle = put(client, b, "f32")
        big = np.ones((700, 700))
        busy = other.send_gemm({"m": 700, "n": 700, "k": 700, "dtype": "f32"}, big, big)
        h.wait_until(lambda: gpu_devices(client)[0]["active"] > 0, 10 * d.scale,
                     "device 0 to be busy")
        devices = []
        for i in range(6):
            a = h.round_to(rng.uniform(-1, 1, (32, 64)), "f32")
            out_hdr, data = gemm_refs(client, {"m": 32, "n": 48, "k": 64, "dtype": "f32"}, a,
                                      {"handle": handle})
            h.assert_close(h.from_wire(data, "f32", (32, 48)), a, b, None, 1.0, 0.0, False,
                           False, "f32", "gemm %d by a resident B" % i)
            devices.append(out_hdr["device"])
            if i == 0:
                other.gemm_result(busy, {"m": 700, "n": 700, "dtype": "f32"}, timeout=120)
        assert devices == ["cuda:1"] * 6, devices
        assert sum(dev["resident_uploads"] for dev in gpu_devices(client)) == 1
        client.call("free", [handle])


TESTS = [test_features, test_device_copy_once, test_jobs_follow_their_resident_b, test_every_operand_every_dtype,
         test_handle_reused_by_many_gemms, test_broadcast_b, test_larger_than_staging,
         test_shape_and_dtype_checked, test_not_found, test_put_refused,
         test_put_from_a_region, test_quotas, test_counted_against_the_memory_budget,
         test_released_with_the_connection]

if __name__ == "__main__":
    sys.exit(h.main(TESTS))
