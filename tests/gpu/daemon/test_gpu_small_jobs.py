#!/usr/bin/python3
"""The small-job lane (gpu.small_job_bytes, gpu.small_slots) end to end: several connections
pipeline many small gemms of mixed shapes (odd sizes), dtypes, transposes, alpha, beta, with
and without c, beside large ones that take the staging path in many chunks; every result is
checked against the float64 reference and `stats` counts the jobs that took the lane and its
batches by size; the batcher's case (same-shape jobs pipelined from several connections) is
right too, and with gpu.small_passes 1 jobs that come while a batch runs go together as the
next. With the lane off (small_job_bytes 0) the same load is right and no job takes it. SIGTERM with small jobs
in flight answers them and exits cleanly.

Meant for gemmd_fake (label integration) and for real GPUs (label gpu). Exits 77 with
"SKIP: no CUDA device" where gemmd --backend gpu finds none."""
import os
import signal
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_gpu_e2e as e2e  # noqa: E402  (its path set-up, daemon config and probe)

h = e2e.h

# 256 KiB slots, 16 a device: small enough for the fake device's budget, and fewer slots than
# jobs in flight, so some small jobs find none free and take the staging path.
LANE = {"small_job_bytes": "256KiB", "small_slots": 16, "staging_bytes": "64KiB"}
DTYPES = ("f32", "f64", "f16", "bf16")


def _job(rng, i, big, same=False):
    """One gemm: (hdr, a, b, c) with c None or sent, odd sizes, every form; same: 64^3 f32,
    alpha 1, beta 0, no c (the batcher's case)."""
    if same:
        a, b = h.random_operands(rng, 64, 64, 64, "f32")
        return ({"m": 64, "n": 64, "k": 64, "dtype": "f32", "trans_a": False, "trans_b": False,
                 "alpha": 1.0, "beta": 0.0}, a, b, None)
    if big:
        m, n, k = 300 + i % 7, 257, 129  # over 256 KiB: the staging path, many 64 KiB chunks
    else:
        m, n, k = (int(x) for x in rng.integers(1, 90, 3))
    dtype = DTYPES[i % len(DTYPES)] if not big else "f32"
    ta, tb = bool(i & 1), bool(i & 2)
    a, b = h.random_operands(rng, m, n, k, dtype, ta, tb)
    beta = (0.0, 0.5, -1.0)[i % 3]
    c = h.round_to(rng.uniform(-1.0, 1.0, (m, n)), dtype) if beta != 0.0 or i % 4 == 0 \
        else None
    hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "trans_a": ta, "trans_b": tb,
           "alpha": 0.25 + i % 5, "beta": beta}
    return hdr, a, b, c


def _connection(i, d, seed, count, same=False):
    rng = np.random.default_rng(seed + i)  # one per thread: a Generator is not thread-safe
    with d.connect(timeout=120) as client:
        jobs, blob = [], bytearray()
        for j in range(count):
            big = i == 0 and j % 8 == 3 and not same
            hdr, a, b, c = _job(rng, i * 1000 + j, big, same)
            jobs.append((10 + j, hdr, a, b, c))
            blob += h.Client.pack_gemm(10 + j, hdr, a, b, c)
        sender = h.send_in_background(client, bytes(blob))
        for msgid, hdr, a, b, c in jobs:
            _, out = client.gemm_result(msgid, hdr, timeout=120)
            h.assert_close(out, a, b, c, hdr["alpha"], hdr["beta"], hdr["trans_a"],
                           hdr["trans_b"], hdr["dtype"],
                           "connection %d msgid %d %s %dx%dx%d" % (
                               i, msgid, hdr["dtype"], hdr["m"], hdr["n"], hdr["k"]))
        sender.join(60)
        assert sender.error is None, sender.error


def _find(stats, name):
    """The values of every `name` key in a stats reply (one per device)."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == name:
                    found.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(stats)
    return found


def _load(ctx, gpu, same=False):
    with e2e.gpu_daemon(ctx, gpu=gpu) as d:
        h.run_threads(_connection, 4, d, int(ctx.rng.integers(1 << 30)), 24, same)
        with d.connect(timeout=60) as client:
            stats = client.call("stats")
        counts, batches = _find(stats, "small_jobs"), _find(stats, "small_batches")
        assert counts and len(batches) == len(counts), "stats: small_jobs %r, small_batches %r" % (
            counts, batches)
        print("  small_jobs per device %s, batches by size %s" % (counts, batches))
        in_batches = sum(sum(n for n in per_dev.values()) for per_dev in batches)
        assert in_batches <= sum(counts), "more batches than small jobs"
        _load.batches = in_batches
        return sum(counts)


def test_small_jobs_many_connections(ctx):
    small = _load(ctx, LANE)
    print("  lane on: %d jobs took it" % small)
    assert small > 0, "no job took the small-job lane"


def test_same_shape_from_many_connections(ctx):
    """The batcher's case (4 connections pipelining 64^3 f32): every result right; how many
    batches formed depends on timing and is only printed."""
    small = _load(ctx, LANE, same=True)
    assert small > 0, "no job took the small-job lane"


def test_batches_grow_while_the_lane_is_full(ctx):
    """gpu.small_passes 1: while one batch runs, the same-shape jobs that come wait and go
    together as the next, with max_queue_delay_us 0: fewer batches than jobs, results right."""
    small = _load(ctx, dict(LANE, small_passes=1), same=True)
    print("  small_passes 1: %d jobs in %d batches" % (small, _load.batches))
    assert small > 1 and _load.batches < small, \
        "%d small jobs in %d batches: none waited for the busy lane" % (small, _load.batches)


def test_lane_off_is_the_staging_path(ctx):
    small = _load(ctx, dict(LANE, small_job_bytes=0))
    assert small == 0, "lane off, yet %d jobs took it" % small


def test_sigterm_with_small_jobs_in_flight(ctx):
    d = e2e.gpu_daemon(ctx, gpu=LANE)
    d.start()
    try:
        with d.connect(timeout=120) as client:
            jobs, blob = [], bytearray()
            for j in range(48):
                hdr, a, b, c = _job(ctx.rng, j, False)
                jobs.append((10 + j, hdr, a, b, c))
                blob += h.Client.pack_gemm(10 + j, hdr, a, b, c)
            client.send_raw(bytes(blob))
            _, out = client.gemm_result(10, jobs[0][1], timeout=120)  # work is in flight
            d.send_signal(signal.SIGTERM)
            for msgid, hdr, a, b, c in jobs[1:]:
                try:
                    _, out = client.gemm_result(msgid, hdr, timeout=120)
                except h.RpcError as exc:  # refused while draining: an error reply, not a crash
                    assert exc.code == "UNAVAILABLE", exc
                    continue
                h.assert_close(out, a, b, c, hdr["alpha"], hdr["beta"], hdr["trans_a"],
                               hdr["trans_b"], hdr["dtype"], "during drain %d" % msgid)
        d.stop(sig=None, timeout=120)
    finally:
        d.kill()
        d.cleanup()


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(e2e.gpu_main([test_small_jobs_many_connections, test_same_shape_from_many_connections,
                           test_batches_grow_while_the_lane_is_full,
                           test_lane_off_is_the_staging_path,
                           test_sigterm_with_small_jobs_in_flight]))
