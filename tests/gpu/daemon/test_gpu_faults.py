#!/usr/bin/python3
"""Device faults and failed launches over gemmd_fake, at the moments that matter: the fake CUDA
runtime faults the device (the sticky cudaErrorIllegalAddress) on a kernel whose alpha is 666
and fails the launch (not sticky) of one whose alpha is 777. Every request gets an answer or
its connection is closed (when half of its result had already gone out), the daemon keeps
serving its other clients, and it exits cleanly on SIGTERM afterwards. Only for gemmd_fake
(FAKE_CUDA_DEVICES=1): a real GPU computes these alphas like any others."""
import os
import sys

import msgpack
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "integration", "daemon"))
import test_gpu_e2e as e2e  # noqa: E402
import test_shm as shm  # noqa: E402

h = e2e.h
FAULT, LAUNCH_FAILS = 666.0, 777.0
STAGING = {"small_job_bytes": 0, "staging_bytes": "64KiB"}


def answers(client, msgids):
    """{outcome: count} for msgids: "OK", an error code, or "closed" for the rest once the
    connection was closed."""
    out = {}
    for msgid in msgids:
        try:
            reply = client.wait(msgid, 60)
            key = reply.error["code"] if reply.error else "OK"
        except h.ConnectionClosed:
            key = "closed"
        out[key] = out.get(key, 0) + 1
        if key == "closed":
            out[key] += len(msgids) - sum(out.values())
            break
    return out


def fault(client):
    s = np.ones((8, 8), np.float32)
    try:
        client.gemm({"m": 8, "n": 8, "k": 8, "dtype": "f32", "alpha": FAULT}, s, s)
        raise AssertionError("a faulting kernel returned a result")
    except h.RpcError as exc:
        assert exc.code in ("UNAVAILABLE", "INTERNAL"), exc


def blocked_gemm(ctx, alpha):
    """A gemm in row blocks (A and its result in a registered region, 2 x 2048 rows or more)
    whose first block faults or fails to launch: answered with an error, the region let go."""
    with e2e.gpu_daemon(ctx, gpu={"small_job_bytes": 0}) as d, d.connect(timeout=60) as c:
        region = shm.Region(16 << 20).register(c)
        shm.wait_registered(d, c, 1, 16 << 20)
        a, b = h.random_operands(ctx.rng, 4200, 8, 8, "f32")
        hdr = {"m": 4200, "n": 8, "k": 8, "dtype": "f32", "alpha": alpha,
               "out": region.take(4200 * 8 * 4)}
        want = "UNAVAILABLE" if alpha == FAULT else "INTERNAL"
        shm.expect_error(want, shm.gemm_refs, c, hdr, region.put(a, "f32"),
                         region.put(b, "f32"), what="a blocked gemm, alpha %g" % alpha)
        assert c.call("shm_unregister", [region.id]) is None
        shm.wait_registered(d, c, 0, 0)
        assert c.call("ping") == "pong"


def test_blocked_gemm_faults(ctx):
    blocked_gemm(ctx, FAULT)


def test_blocked_gemm_launch_fails(ctx):
    blocked_gemm(ctx, LAUNCH_FAILS)


def small_lane(ctx, alpha, every):
    """64 pipelined small-lane jobs, some with alpha: the others right or UNAVAILABLE (after a
    fault), each answered once."""
    with e2e.gpu_daemon(ctx, gpu={"small_job_bytes": "256KiB"}) as d, \
            d.connect(timeout=60) as c:
        a = np.ones((16, 16), np.float32)
        msgids = [c.send_gemm({"m": 16, "n": 16, "k": 16, "dtype": "f32",
                               "alpha": alpha if i % every == every // 2 else 1.0}, a, a)
                  for i in range(64)]
        got = answers(c, msgids)
        print("  alpha %g every %d: %s" % (alpha, every, got))
        assert sum(got.values()) == 64 and "closed" not in got, got
        return got


def test_small_batch_with_a_fault(ctx):
    got = small_lane(ctx, FAULT, 64)
    assert got.get("UNAVAILABLE", 0) + got.get("INTERNAL", 0) >= 1, got


def test_small_batches_with_failed_launches(ctx):
    got = small_lane(ctx, LAUNCH_FAILS, 7)
    assert got.get("OK", 0) >= 64 - 10 and got.get("INTERNAL", 0) >= 1, got


def test_fault_with_results_streaming(ctx):
    """A fault while another connection's results leave in 64 KiB chunks: that connection gets
    whole answers, or is closed if one was half out; others are served, and SIGTERM then
    stops the daemon cleanly."""
    with e2e.gpu_daemon(ctx, gpu=STAGING) as d, d.connect(timeout=60) as x, \
            d.connect(timeout=60) as y:
        a = np.ones((256, 256), np.float32)
        hdr = {"m": 256, "n": 256, "k": 256, "dtype": "f32"}
        msgids = [x.send_gemm(hdr, a, a) for _ in range(6)]
        fault(y)
        got = answers(x, msgids)
        print("  6 streaming results: %s" % got)
        assert sum(got.values()) == 6, got
        assert y.call("ping") == "pong"
        d.proc.send_signal(15)
        assert d.proc.wait(30 * ctx.scale) == 0


def test_unregister_refused_while_a_fault_fails_its_writer(ctx):
    """A region unregistered while blocked gemms write their results into it is refused (in
    use); a fault fails what is left; the region stays registered, usable for reading
    back, and goes with the connection."""
    with e2e.gpu_daemon(ctx, gpu={"small_job_bytes": 0}) as d, d.connect(timeout=60) as x, \
            d.connect(timeout=60) as y:
        region = shm.Region(16 << 20).register(x)
        shm.wait_registered(d, y, 1, 16 << 20)
        a, b = h.random_operands(ctx.rng, 4200, 32, 32, "f32")
        hdr = {"m": 4200, "n": 32, "k": 32, "dtype": "f32", "out": region.take(4200 * 32 * 4)}
        refs = [region.put(a, "f32"), region.put(b, "f32")]
        msgids = []
        for i in range(4):
            msgids.append(900 + i)
            x.send_raw(msgpack.packb([0, 900 + i, "gemm", [hdr] + refs], use_bin_type=True))
        x.send_raw(msgpack.packb([0, 999, "shm_unregister", [region.id]], use_bin_type=True))
        fault(y)
        got = answers(x, msgids + [999])
        print("  4 blocked gemms and an unregister: %s" % got)
        assert sum(got.values()) == 5 and "closed" not in got, got
        x.close()
        h.wait_until(lambda: y.call("stats")["shm_regions"] == 0, 10 * ctx.scale,
                     "the closed connection's region to go")
        assert y.call("ping") == "pong"


if __name__ == "__main__":
    sys.exit(e2e.gpu_main([test_blocked_gemm_faults, test_blocked_gemm_launch_fails,
                           test_small_batch_with_a_fault, test_small_batches_with_failed_launches,
                           test_fault_with_results_streaming,
                           test_unregister_refused_while_a_fault_fails_its_writer]))
