#!/usr/bin/python3
"""Per-connection limits: limits.max_requests_in_flight and limits.max_buffered_bytes. A client
that pipelines many requests and reads nothing makes the daemon stop reading it (its writes
block), while the daemon stays alive and serves others; once the client reads, every request is
answered."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402

N = 128  # each request: a and b of 64 KiB each; each reply: 64 KiB


def _flood(ctx, d, count):
    """Writes count pipelined gemms from a background thread; returns (client, jobs, sender)."""
    flooder = d.connect()
    jobs, chunks = [], []
    for msgid in range(1, count + 1):
        a, b = h.random_operands(ctx.rng, N, N, N, "f32")
        hdr = {"m": N, "n": N, "k": N, "dtype": "f32"}
        jobs.append((msgid, hdr, a, b))
        chunks.append(h.Client.pack_gemm(msgid, hdr, a, b))
    return flooder, jobs, h.send_in_background(flooder, b"".join(chunks))


def _drain_and_check(flooder, jobs, sender):
    for msgid, hdr, a, b in jobs:
        _, out = flooder.gemm_result(msgid, hdr)
        h.assert_close(out, a, b, None, 1.0, 0.0, False, False, "f32", "flooded msgid %d" % msgid)
    sender.join(30)
    assert not sender.is_alive() and sender.error is None, sender.error
    flooder.close()


def _backpressure_case(ctx, config, what):
    count = 60 if ctx.quick else 150  # 7.5 / 19 MiB of requests
    with ctx.daemon(config=config) as d, d.connect() as bystander:
        flooder, jobs, sender = _flood(ctx, d, count)
        time.sleep(1.0)
        # the daemon must have stopped reading: the flood cannot all be written yet
        stuck = sender.is_alive()
        for _ in range(3):
            h.check_gemm(bystander, ctx.rng, 33, 17, 65, "f32")
        assert d.running()
        _drain_and_check(flooder, jobs, sender)
        h.check_gemm(bystander, ctx.rng, 5, 6, 7, "f64")
        if not stuck:
            raise AssertionError("%s: the daemon read all %d requests of a client that read "
                                 "no reply: no backpressure" % (what, count))


def test_max_requests_in_flight(ctx):
    _backpressure_case(ctx, {"limits": {"max_requests_in_flight": 4}},
                       "max_requests_in_flight 4")


def test_max_buffered_bytes(ctx):
    _backpressure_case(ctx, {"limits": {"max_buffered_bytes": "256KiB",
                                        "max_requests_in_flight": 1024},
                             "queue": {"max_jobs": 4096}},
                       "max_buffered_bytes 256KiB")


def test_in_flight_cap_is_not_an_error(ctx):
    """Pipelining past the cap is legal: the extra requests wait, none is refused."""
    with ctx.daemon(config={"limits": {"max_requests_in_flight": 2}}) as d, d.connect() as c:
        sent = []
        for _ in range(20):
            a, b = h.random_operands(ctx.rng, 9, 8, 7, "f64")
            hdr = {"m": 9, "n": 8, "k": 7, "dtype": "f64"}
            sent.append((c.send_gemm(hdr, a, b), hdr, a, b))
        for msgid, hdr, a, b in sent:
            _, out = c.gemm_result(msgid, hdr)
            h.assert_close(out, a, b, None, 1.0, 0.0, False, False, "f64", "msgid %d" % msgid)


if __name__ == "__main__":
    sys.exit(h.main([test_max_requests_in_flight, test_max_buffered_bytes,
                     test_in_flight_cap_is_not_an_error]))
