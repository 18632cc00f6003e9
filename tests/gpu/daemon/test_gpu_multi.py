#!/usr/bin/python3
"""Every GPU of the box (gd_gpu_split.c, gd_gpu_resident.c): one gemm in shared memory split by
rows across every idle device (gpu.split_min_rows, gpu.split_max_parts), its rows shared in
proportion to the devices' speed, the reply naming each part ("cuda:0+1+2+3"); replicas of a
resident operand made once on each device that runs jobs naming it, counted per device, evicted
least recently used past gpu.resident_bytes; and one device failing while it computes its part
of a split: one error answer, the daemon serving on with the others. Every result against the
float64 reference.

Meant for gemmd_fake with FAKE_CUDA_DEVICES=2 and 4 (label integration), where the idle devices
are known; on real GPUs (scripts/gpu-run.sh multi) the counts are checked as far as the number
of devices allows, and the fault test is left out. Exits 77 with "SKIP: no CUDA device" where
gemmd --backend gpu finds none."""
import os
import sys

import msgpack
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration", "daemon"))
import test_gpu_e2e as e2e  # noqa: E402  (its path set-up, daemon config and probe)
import test_resident as resident  # noqa: E402
import test_shm as shm  # noqa: E402
import metrics_util as mu  # noqa: E402

h = e2e.h
FAKE = "FAKE_CUDA_DEVICES" in os.environ
FAULT_LAST = 555.0  # the fake runtime faults the last device's kernel of this alpha (sticky)
SPLIT = {"small_job_bytes": 0, "staging_bytes": "64KiB", "split_min_rows": 64}


def backend_stats(client):
    return client.call("stats")["backend_stats"]


def per_device(client, key):
    return [dev.get(key, 0) for dev in backend_stats(client)["devices"]]


def split_gemm(ctx, client, region, m, n, k, dtype, trans_b=False, alpha=1.0, beta=0.0):
    """A gemm whose a, b, c and result lie in region, checked against float64; its out_hdr."""
    region.used = 0
    a, b = h.random_operands(ctx.rng, m, n, k, dtype, False, trans_b)
    c = h.round_to(ctx.rng.uniform(-1, 1, (m, n)), dtype) if beta else None
    hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "trans_b": trans_b, "alpha": alpha,
           "beta": beta}
    nbytes = m * n * h.DTYPES[dtype]
    dest = region.take(nbytes + 64)
    region.map[dest["offset"]:dest["offset"] + nbytes] = b"\x7f" * nbytes  # poisoned
    hdr["out"] = dest
    sent = [region.put(x, dtype) if x is not None else None for x in (a, b, c)]
    out_hdr, data = shm.gemm_refs(client, hdr, *sent)
    what = "split gemm %dx%dx%d %s tb=%s alpha=%g beta=%g" % (m, n, k, dtype, trans_b, alpha,
                                                              beta)
    assert data is None, what
    h.check_out_hdr(out_hdr, m, n, dtype, 1, what)
    h.assert_close(region.read(dest, dtype, (m, n)), a, b, c, alpha, beta, False, trans_b,
                   dtype, what)
    return out_hdr


def parts_of(out_hdr):
    """The devices a reply names: "cuda:0+2+3" -> [0, 2, 3]."""
    name = out_hdr["device"]
    assert name.startswith("cuda:"), name
    return [int(x) for x in name[len("cuda:"):].split("+")]


def test_split_across_every_device(ctx):
    """With every device idle, a gemm of at least ndev x split_min_rows rows runs on all of
    them, each part once, the parts and the rows of each counted per device; fewer rows, or
    gpu.split_max_parts, make fewer parts; /metrics counts them. Odd row counts, a transposed
    B, alpha and beta, and every dtype against float64."""
    for max_parts in (8, 2):
        gpu = dict(SPLIT, split_max_parts=max_parts)
        port = h.free_tcp_port()
        config = {"metrics": {"listen": "tcp:127.0.0.1:%d" % port}}
        with e2e.gpu_daemon(ctx, gpu=gpu, config=config) as d, \
                d.connect(timeout=120) as client:
            ndev = len(backend_stats(client)["devices"])
            if ndev < 2 or "shm" not in client.call("info")["features"]:
                print("  one GPU, or no shared memory: nothing to split")
                return
            region = shm.Region(16 << 20).register(client)
            shm.wait_registered(d, client, 1, 16 << 20)
            cases = [(1001, 40, 56, "f32", False, 1.0, 0.0),
                     (777, 33, 17, "f64", True, -0.5, 0.25),
                     (515, 24, 40, "f16", False, 2.0, 0.0),
                     (1003, 16, 24, "bf16", True, 1.0, -1.0),
                     (199, 9, 13, "f32", False, 1.0, 0.5)]  # 3 x 64 rows at most
            for m, n, k, dtype, tb, alpha, beta in cases:
                before = backend_stats(client)
                out_hdr = split_gemm(ctx, client, region, m, n, k, dtype, tb, alpha, beta)
                after = backend_stats(client)
                want = min(ndev, max_parts, m // 64)
                parts = parts_of(out_hdr)
                assert len(parts) == want and len(set(parts)) == want, (m, max_parts, out_hdr)
                grew = [y["split_parts"] - x["split_parts"]
                        for x, y in zip(before["devices"], after["devices"])]
                rows = [y["split_rows"] - x["split_rows"]
                        for x, y in zip(before["devices"], after["devices"])]
                assert sorted(grew) == [0] * (ndev - want) + [1] * want, (m, grew)
                assert sum(rows) == m and all(r > 0 for r, g in zip(rows, grew) if g), rows
                assert after["shm_split_jobs"] - before["shm_split_jobs"] == 1
            print("  max_parts %d: %d devices, last split %s" % (max_parts, ndev,
                                                                 out_hdr["device"]))
            samples = mu.parse(mu.http_get(port, "/metrics")[1])
            for i, parts in enumerate(per_device(client, "split_parts")):
                got = mu.value(samples, "gemmd_device_split_parts_total", device="cuda:%d" % i)
                assert got == parts, (i, got, parts)
            region.close()


def test_split_by_a_resident_b(ctx):
    """A and the result in a region, B resident: the gemm still splits across every idle device,
    each part reading its device's replica of B (made once per device: a second gemm by the
    same B copies nothing more), against float64 with beta."""
    with e2e.gpu_daemon(ctx, gpu=SPLIT) as d, d.connect(timeout=120) as client:
        ndev = len(backend_stats(client)["devices"])
        if ndev < 2 or "shm" not in client.call("info")["features"]:
            return
        region = shm.Region(16 << 20).register(client)
        shm.wait_registered(d, client, 1, 16 << 20)
        m, n, k = 64 * ndev + 11, 48, 40
        b = h.round_to(ctx.rng.uniform(-1, 1, (k, n)), "f32")
        handle = resident.put(client, b, "f32")
        for rnd in range(2):
            region.used = 0
            a = h.round_to(ctx.rng.uniform(-1, 1, (m, k)), "f32")
            c = h.round_to(ctx.rng.uniform(-1, 1, (m, n)), "f32")
            hdr = {"m": m, "n": n, "k": k, "dtype": "f32", "alpha": 1.5, "beta": -0.5,
                   "out": region.take(m * n * 4)}
            out_hdr, data = shm.gemm_refs(client, hdr, region.put(a, "f32"), {"handle": handle},
                                          region.put(c, "f32"))
            assert data is None and len(parts_of(out_hdr)) == ndev, out_hdr
            h.assert_close(region.read(hdr["out"], "f32", (m, n)), a, b, c, 1.5, -0.5, False,
                           False, "f32", "split gemm %d by a resident B" % rnd)
            assert per_device(client, "resident_replicas") == [1] * ndev
            assert per_device(client, "resident_uploads") == [1] * ndev
        assert client.call("free", [handle]) is None
        region.close()


def test_split_rows_follow_speed(ctx):
    """gemmd_fake only: devices of 132, 132, 66 and 66 SMs (FAKE_CUDA_SMS) split a gemm's rows
    2:2:1:1, cut at multiples of 128 rows."""
    if not FAKE:
        return
    env = {"FAKE_CUDA_SMS": "132,132,66,66,66,66,66,66"}
    with e2e.gpu_daemon(ctx, gpu=SPLIT, env=env) as d, d.connect(timeout=120) as client:
        sms = [dev["sms"] for dev in e2e.devices_of(client.call("info"))]
        region = shm.Region(16 << 20).register(client)
        shm.wait_registered(d, client, 1, 16 << 20)
        m = 6144
        before = per_device(client, "split_rows")
        split_gemm(ctx, client, region, m, 16, 16, "f32")
        rows = [y - x for x, y in zip(before, per_device(client, "split_rows"))]
        total = float(sum(sms))
        for r, s in zip(rows, sms):
            assert r % 128 == 0 and abs(r - m * s / total) <= 128, (rows, sms)
        print("  rows by device %s for SMs %s" % (rows, sms))
        region.close()


def pipelined_by_resident_b(ctx, client, handle, b, count, k, n):
    """count gemms by the resident B pipelined on one connection, each checked; the devices
    that answered."""
    jobs, blob = [], bytearray()
    for i in range(count):
        m = int(ctx.rng.integers(40, 200))
        a = h.round_to(ctx.rng.uniform(-1, 1, (m, k)), "f32")
        hdr = {"m": m, "n": n, "k": k, "dtype": "f32", "alpha": 1.0 + i % 3}
        msgid = 500 + i
        jobs.append((msgid, hdr, a))
        blob += msgpack.packb([0, msgid, "gemm", [hdr, h.to_wire(a, "f32"), {"handle": handle}]],
                              use_bin_type=True)
    sender = h.send_in_background(client, bytes(blob))
    seen = set()
    for msgid, hdr, a in jobs:
        out_hdr, out = client.gemm_result(msgid, hdr, timeout=120)
        h.assert_close(out, a, b, None, hdr["alpha"], 0.0, False, False, "f32",
                       "gemm %d by a resident B" % msgid)
        seen.add(out_hdr["device"])
    sender.join(60)
    assert sender.error is None, sender.error
    return seen


def test_replicas_on_every_device(ctx):
    """One pipelining connection by a resident B: its jobs spread over the devices, and B is
    copied once to each device that ran one (replicas = uploads = devices used), shown per
    device in stats and /metrics; freed, every replica goes."""
    port = h.free_tcp_port()
    config = {"metrics": {"listen": "tcp:127.0.0.1:%d" % port}}
    with e2e.gpu_daemon(ctx, gpu={"small_job_bytes": 0}, config=config) as d, \
            d.connect(timeout=120) as client:
        k, n = 96, 80
        b = h.round_to(ctx.rng.uniform(-1, 1, (k, n)), "f32")
        handle = resident.put(client, b, "f32")
        seen = pipelined_by_resident_b(ctx, client, handle, b, 32, k, n)
        replicas = per_device(client, "resident_replicas")
        uploads = per_device(client, "resident_uploads")
        used = ["cuda:%d" % i for i, r in enumerate(replicas) if r]
        print("  answered by %s; replicas per device %s" % (sorted(seen), replicas))
        assert sorted(used) == sorted(seen), (seen, replicas)
        assert replicas == uploads and max(replicas) == 1, (replicas, uploads)
        if len(replicas) > 1 and FAKE:
            assert len(seen) > 1, "a pipelining client stayed on %s" % sorted(seen)
        text = mu.http_get(port, "/metrics")[1]
        for i, r in enumerate(replicas):
            line = 'gemmd_device_resident_replicas{device="cuda:%d"} %d' % (i, r)
            assert line in text, line
        # the devices holding B are preferred again: no new copy for more of the same
        seen2 = pipelined_by_resident_b(ctx, client, handle, b, 16, k, n)
        assert per_device(client, "resident_uploads") == uploads or \
            not seen2 <= seen, (seen, seen2, uploads)
        assert client.call("free", [handle]) is None
        client.call("ping")
        h.wait_until(lambda: sum(per_device(client, "resident_replicas")) == 0, 10 * d.scale,
                     "every replica of a freed handle to go")


def test_eviction(ctx):
    """gpu.resident_bytes room for two copies of B: four Bs used in turn evict the least
    recently used copy, never past the limit; results stay right (one evicted is copied
    again when used again) and evictions are counted."""
    k, n = 64, 64
    size = k * n * 4
    gpu = {"small_job_bytes": 0, "resident_bytes": 2 * size + size // 2}
    with e2e.gpu_daemon(ctx, gpu=gpu) as d, d.connect(timeout=120) as client:
        bs = [h.round_to(ctx.rng.uniform(-1, 1, (k, n)), "f32") for _ in range(4)]
        handles = [resident.put(client, b, "f32") for b in bs]
        for rnd in range(3):
            for b, handle in zip(bs, handles):
                a = h.round_to(ctx.rng.uniform(-1, 1, (33, k)), "f32")
                out_hdr, data = shm.gemm_refs(client, {"m": 33, "n": n, "k": k, "dtype": "f32"},
                                              a, {"handle": handle})
                h.assert_close(h.from_wire(data, "f32", (33, n)), a, b, None, 1.0, 0.0, False,
                               False, "f32", "round %d by a resident B" % rnd)
                held = per_device(client, "resident_bytes")
                assert max(held) <= gpu["resident_bytes"], held
                assert all(r <= 2 for r in per_device(client, "resident_replicas"))
        evictions = sum(per_device(client, "resident_evictions"))
        print("  evictions %d, replicas %s" % (evictions, per_device(client, "resident_replicas")))
        assert evictions > 0
        for handle in handles:
            client.call("free", [handle])
        client.call("ping")
        h.wait_until(lambda: sum(per_device(client, "resident_bytes")) == 0, 10 * d.scale,
                     "the copies of freed handles to go")


def test_device_fails_mid_split(ctx):
    """gemmd_fake only: the last device faults on its part of a split gemm (alpha 555): the
    gemm is answered with one error, the other parts' devices serve on, the next split gemm
    runs on them and is right, and the daemon exits cleanly."""
    if not FAKE:
        return
    with e2e.gpu_daemon(ctx, gpu=SPLIT) as d, d.connect(timeout=120) as client:
        ndev = len(backend_stats(client)["devices"])
        if ndev < 2:
            return
        region = shm.Region(16 << 20).register(client)
        shm.wait_registered(d, client, 1, 16 << 20)
        m = 64 * ndev + 37
        region.used = 0
        a, b = h.random_operands(ctx.rng, m, 24, 24, "f32")
        hdr = {"m": m, "n": 24, "k": 24, "dtype": "f32", "alpha": FAULT_LAST,
               "out": region.take(m * 24 * 4)}
        shm.expect_error("UNAVAILABLE", shm.gemm_refs, client, hdr, region.put(a, "f32"),
                         region.put(b, "f32"), what="a split gemm whose last part faults")
        assert client.call("ping") == "pong"
        in_service = [dev["in_service"] for dev in backend_stats(client)["devices"]]
        assert in_service == [True] * (ndev - 1) + [False], in_service
        if ndev > 2:
            out_hdr = split_gemm(ctx, client, region, m, 24, 24, "f32", alpha=1.5, beta=0.5)
            assert sorted(parts_of(out_hdr)) == list(range(ndev - 1)), out_hdr
        else:
            split_gemm(ctx, client, region, m, 24, 24, "f32")  # whole, on the one left
        def another(i):
            with d.connect(timeout=120) as c:
                own = shm.Region(4 << 20).register(c)
                for _ in range(4):
                    split_gemm(ctx, c, own, 300, 16, 24, "f64", beta=0.5)

        h.run_threads(another, 3)
        st = client.call("stats")
        assert (st["queue_depth"], st["jobs_running"]) == (0, 0), st
        region.close()


TESTS = [test_split_across_every_device, test_split_by_a_resident_b, test_split_rows_follow_speed,
         test_replicas_on_every_device, test_eviction, test_device_fails_mid_split]

if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(e2e.gpu_main(TESTS))
