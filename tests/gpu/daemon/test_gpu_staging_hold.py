#!/usr/bin/python3
"""A client that does not read its result must not hold the staging other jobs on the device
need: result chunks go to the socket straight from (shared) staging only while the client
keeps up; gpu.staging_hold_ms after a chunk arrived, what the socket has not taken is copied
and the staging buffer given back.

Client A sends a gemm whose C is many staging buffers and reads nothing. Client B then runs
gemms on the same (one) device, each of which needs an output staging buffer: they must all
complete while A still reads nothing (they would wait for A for ever if A's chunks kept their
buffers). Then A reads its whole reply, which must be correct. Meant for gemmd_fake (one fake
device, staging in ordinary memory).

Exits 77 with "SKIP: no CUDA device" where gemmd --backend gpu finds none."""
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_gpu_e2e as e2e  # noqa: E402  (its path set-up, daemon config and probe)

h = e2e.h

# C of A: 1024 x 1024 f32 = 4 MiB, 16 chunks of 256 KiB: far more than a Unix socket buffers.
BIG = {"m": 1024, "n": 1024, "k": 16, "dtype": "f32"}
SMALL = {"m": 67, "n": 45, "k": 33, "dtype": "f32"}
HOLD_MS = 50
CONFIG = {"log_level": "debug", "timeouts": {"request_ms": 60000}}


def test_slow_reader_gives_staging_back(ctx):
    # B's gemms must need output staging: the small-job lane (slots of their own) stays off.
    gpu = {"staging_bytes": "256KiB", "staging_buffers": 2, "staging_hold_ms": HOLD_MS,
           "small_job_bytes": 0}
    with e2e.gpu_daemon(ctx, gpu=gpu, config=CONFIG) as d, \
            d.connect(timeout=120) as slow, d.connect(timeout=60) as other:
        a, b = h.random_operands(ctx.rng, BIG["m"], BIG["n"], BIG["k"], "f32")
        slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.send_raw(h.Client.pack_gemm(1, BIG, a, b))
        slow.sock.settimeout(60)
        slow.sock.recv(1, socket.MSG_PEEK)  # A's result has started; A now reads nothing
        start = time.monotonic()
        for i in range(6):
            sa, sb = h.random_operands(ctx.rng, SMALL["m"], SMALL["n"], SMALL["k"], "f32")
            _, out = other.gemm(SMALL, sa, sb, timeout=60)
            h.assert_close(out, sa, sb, None, 1.0, 0.0, False, False, "f32",
                           "other client's gemm %d while A reads nothing" % i)
        took = time.monotonic() - start
        print("  6 gemms of another client while A read nothing: %.2f s" % took)
        # A has still read nothing: its reply must be whole and correct now.
        _, out = slow.gemm_result(1, BIG, timeout=120)
        h.assert_close(out, a, b, None, 1.0, 0.0, False, False, "f32", "A's big result")
        assert "copied off staging" in d.log(), d.log_tail()


def test_close_while_chunk_in_staging(ctx):
    """A client that closes while a chunk of its result waits in staging (a hold limit far in
    the future) gives that staging back: another client's gemms still complete."""
    gpu = {"staging_bytes": "256KiB", "staging_buffers": 2, "staging_hold_ms": 60000}
    with e2e.gpu_daemon(ctx, gpu=gpu, config=CONFIG) as d:
        for round_ in range(2):
            a, b = h.random_operands(ctx.rng, BIG["m"], BIG["n"], BIG["k"], "f32")
            with d.connect(timeout=60) as slow:
                slow.send_raw(h.Client.pack_gemm(1, BIG, a, b))
                slow.sock.recv(1, socket.MSG_PEEK)  # its result has started: then it closes
            with d.connect(timeout=30) as other:
                for i in range(3):
                    sa, sb = h.random_operands(ctx.rng, SMALL["m"], SMALL["n"], SMALL["k"], "f32")
                    _, out = other.gemm(SMALL, sa, sb, timeout=30)
                    h.assert_close(out, sa, sb, None, 1.0, 0.0, False, False, "f32",
                                   "gemm %d after a client closed mid-result" % i)


def test_reading_client_zero_copy(ctx):
    """A client that reads gets its multi-chunk results (odd sizes too) straight from staging
    through the probe pieces, correct, and with a long hold limit nothing is copied as for a
    slow client."""
    gpu = {"staging_bytes": "256KiB", "staging_buffers": 2, "staging_hold_ms": 60000}
    with e2e.gpu_daemon(ctx, gpu=gpu, config=CONFIG) as d, d.connect(timeout=120) as client:
        for m, n, k in ((1024, 1024, 8), (333, 517, 7), (1, 7, 1)):
            hdr = {"m": m, "n": n, "k": k, "dtype": "f32"}
            a, b = h.random_operands(ctx.rng, m, n, k, "f32")
            _, out = client.gemm(hdr, a, b, timeout=120)
            h.assert_close(out, a, b, None, 1.0, 0.0, False, False, "f32",
                           "reading client %dx%dx%d" % (m, n, k))
        assert "copied off staging" not in d.log(), d.log_tail()


if __name__ == "__main__":
    sys.exit(e2e.gpu_main([test_slow_reader_gives_staging_back, test_close_while_chunk_in_staging,
                           test_reading_client_zero_copy]))
