#!/usr/bin/python3
"""timeouts.idle_ms closes a connection with nothing in flight; timeouts.request_ms closes a
connection whose request started arriving and stalled. Busy connections stay open, and the
daemon keeps serving others."""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402


def test_idle_timeout(ctx):
    with ctx.daemon(config={"timeouts": {"idle_ms": 400, "request_ms": 60000}}) as d:
        idle = d.connect()
        start = time.monotonic()
        assert idle.is_closed(5.0 * ctx.scale), "an idle connection stayed open past idle_ms 400"
        took = time.monotonic() - start
        assert took >= 0.3, "closed after %.2fs, before idle_ms 400" % took
        # one that keeps talking is never idle
        with d.connect() as chatty:
            for _ in range(10):
                assert chatty.call("ping") == "pong"
                time.sleep(0.15)
            h.check_gemm(chatty, ctx.rng, 7, 7, 7, "f32")
        # used, then quiet: closed as well
        with d.connect() as used:
            assert used.call("ping") == "pong"
            assert used.is_closed(5.0 * ctx.scale), "a used then idle connection stayed open"


def test_busy_connection_not_idle(ctx):
    """idle_ms counts only while nothing is in flight: jobs that run longer than idle_ms keep
    their connection open and get answered."""
    config = {"timeouts": {"idle_ms": 300, "request_ms": 60000}, "cpu": {"threads": 1}}
    size = 1500  # three of these take about a second on one OpenBLAS thread
    ones = np.ones((size, size))
    # packed before connecting: packing 108 MB on a loaded machine can itself take longer than
    # idle_ms, and a connection that has sent nothing for that long is rightly closed as idle
    sent = [(i + 1, {"m": size, "n": size, "k": size, "dtype": "f64", "alpha": float(i + 1)})
            for i in range(3)]
    packed = [h.Client.pack_gemm(msgid, hdr, ones, ones) for msgid, hdr in sent]
    with ctx.daemon(config=config) as d, d.connect() as client:
        for message in packed:
            client.send_raw(message)
        for msgid, hdr in sent:
            try:
                _, out = client.gemm_result(msgid, hdr)
            except h.ConnectionClosed:
                raise AssertionError("closed as idle with msgid %d still in flight" % msgid)
            assert (out == hdr["alpha"] * size).all(), "msgid %d: wrong result" % msgid


def test_request_timeout(ctx):
    with ctx.daemon(config={"timeouts": {"idle_ms": 60000, "request_ms": 400}}) as d:
        a, b = h.random_operands(ctx.rng, 64, 64, 64, "f32")
        packed = h.Client.pack_gemm(1, {"m": 64, "n": 64, "k": 64, "dtype": "f32"}, a, b)
        with d.connect() as bystander:
            for cut in (3, len(packed) // 2):
                staller = d.connect()
                staller.send_raw(packed[:cut])
                start = time.monotonic()
                assert staller.is_closed(5.0 * ctx.scale), \
                    "a request stalled after %d bytes stayed open past request_ms 400" % cut
                took = time.monotonic() - start
                assert took >= 0.3, "closed after %.2fs, before request_ms 400" % took
                staller.close()
                assert bystander.call("ping") == "pong"
            # a slow request that keeps arriving within request_ms is served
            slow = d.connect()
            third = len(packed) // 3
            for piece in (packed[:third], packed[third:2 * third], packed[2 * third:]):
                slow.send_raw(piece)
                time.sleep(0.1)
            _, out = slow.gemm_result(1, {"m": 64, "n": 64, "k": 64, "dtype": "f32"})
            h.assert_close(out, a, b, None, 1.0, 0.0, False, False, "f32", "a slow request")
            slow.close()
            h.check_gemm(bystander, ctx.rng, 9, 9, 9, "f32")


def test_slow_large_request_closed(ctx):
    """A large request trickled below timeouts.min_receive_rate is closed (it held its memory
    budget meanwhile), and the budget it held serves others; the same request sent at speed
    is answered."""
    n = 256  # a, b, c of 256 KiB each: 768 KiB of payloads, "large" at min_rate_bytes 512KiB
    config = {"timeouts": {"idle_ms": 60000, "request_ms": 60000, "min_receive_rate": "1MiB",
                           "min_rate_bytes": "512KiB", "min_rate_grace_ms": 300},
              "queue": {"memory_budget": "1MiB"}}  # one such request at a time
    hdr = {"m": n, "n": n, "k": n, "dtype": "f32"}
    a, b = h.random_operands(ctx.rng, n, n, n, "f32")
    packed = h.Client.pack_gemm(1, hdr, a, b)
    with ctx.daemon(config=config) as d:
        trickler = d.connect()
        start = time.monotonic()
        sent = 0
        while sent < len(packed):  # 8 KiB every 0.1 s: 80 KiB/s
            try:
                trickler.send_raw(packed[sent:sent + 8192])
            except OSError:
                break
            sent += 8192
            if trickler.is_closed(0.1):
                break
        took = time.monotonic() - start
        assert sent < len(packed), "a request trickled at 80 KiB/s was read to its end"
        assert trickler.is_closed(5 * ctx.scale), "the trickler was not closed"
        print("  trickler closed after %.1f s, %d of %d bytes sent" % (took, sent, len(packed)))
        assert "slower than timeouts.min_receive_rate" in d.log(), d.log_tail()
        with d.connect() as fast:  # the budget the trickler held is free again
            _, out = fast.gemm(hdr, a, b)
            h.assert_close(out, a, b, None, 1.0, 0.0, False, False, "f32", "sent at speed")


if __name__ == "__main__":
    sys.exit(h.main([test_idle_timeout, test_busy_connection_not_idle, test_request_timeout,
                     test_slow_large_request_closed]))
