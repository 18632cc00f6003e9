#!/usr/bin/python3
"""Clients that vanish: mid-payload, and with their job running. The daemon keeps serving
everyone else, gives back what those jobs held (queue slots, memory budget), and exits clean
(the ASan build reports any leak at exit, which fails the stop)."""
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402

# One 300^3 f32 job holds a, b and c: 1.08 MB; the budget takes one at a time, and
# max_jobs 2 leaves room for exactly one abandoned job plus the check: a job that is not
# given back when its client vanishes makes every later big request RESOURCE_EXHAUSTED.
N = 300
CONFIG = {"queue": {"memory_budget": "1600KiB", "max_jobs": 2}, "cpu": {"threads": 1}}


def big_request(ctx, msgid=1):
    a, b = h.random_operands(ctx.rng, N, N, N, "f32")
    hdr = {"m": N, "n": N, "k": N, "dtype": "f32"}
    return hdr, a, b, h.Client.pack_gemm(msgid, hdr, a, b)


def check_big_admitted(ctx, d, what):
    """A full-size job must be admitted again (retried while a running abandoned job ends)."""
    hdr, a, b, _ = big_request(ctx)
    deadline = time.monotonic() + 10 * ctx.scale
    with d.connect() as client:
        while True:
            try:
                _, out = client.gemm(hdr, a, b)
                break
            except h.RpcError as exc:
                if exc.code != "RESOURCE_EXHAUSTED" or time.monotonic() > deadline:
                    raise AssertionError("%s: a full-size job is still refused: %s" % (what, exc))
                time.sleep(0.05)
        h.assert_close(out, a, b, None, 1.0, 0.0, False, False, "f32", what)


def check_nothing_held(ctx, d):
    """Once every quitter is gone, stats shows no job, no reserved byte and one connection."""
    def settled():
        with d.connect() as client:
            stats = client.call("stats")
        held = {key: stats[key] for key in ("queue_depth", "jobs_running", "reserved_bytes")
                if key in stats and stats[key] != 0}
        if "connections" in stats and stats["connections"] > 2:  # this one and the bystander
            held["connections"] = stats["connections"]
        return stats if not held else None
    h.wait_until(settled, 10 * ctx.scale, "stats to show no job, byte or connection held")


def test_disconnect_mid_payload(ctx):
    with ctx.daemon(config=CONFIG) as d, d.connect() as bystander:
        for i in range(10):
            _, _, _, packed = big_request(ctx)
            quitter = d.connect()
            quitter.send_raw(packed[:len(packed) // 2 + 17 * i])
            quitter.close()
            assert bystander.call("ping") == "pong"
        check_big_admitted(ctx, d, "after 10 clients left mid-payload")
        # cut inside the header, and right after it
        hdr, a, b, packed = big_request(ctx)
        for cut in (1, 5, 20, packed.index(h.to_wire(a, "f32")[:64])):
            quitter = d.connect()
            quitter.send_raw(packed[:cut])
            quitter.close()
        check_big_admitted(ctx, d, "after clients left inside the header")
        h.check_gemm(bystander, ctx.rng, 17, 5, 9, "f64")
        check_nothing_held(ctx, d)


def test_disconnect_with_job_running(ctx):
    with ctx.daemon(config=CONFIG) as d, d.connect() as bystander:
        for i in range(6):
            _, _, _, packed = big_request(ctx)
            quitter = d.connect()
            quitter.send_raw(packed)
            if i % 2:
                time.sleep(0.05 * ctx.scale)  # let it start computing
            quitter.close()
            assert bystander.call("ping") == "pong"
            check_big_admitted(ctx, d, "after client %d left with its job in flight" % i)
        h.check_gemm(bystander, ctx.rng, 17, 5, 9, "f32")
        check_nothing_held(ctx, d)


def test_disconnect_with_reply_unread(ctx):
    """Pipelined jobs with big replies, none read, then the client leaves."""
    with ctx.daemon(config=CONFIG) as d, d.connect() as bystander:
        quitter = d.connect()
        stream = b"".join(big_request(ctx, msgid=i + 1)[3] for i in range(2))
        h.send_in_background(quitter, stream)
        time.sleep(0.5 * ctx.scale)  # results computed, replies stuck in the socket
        quitter.close()
        check_big_admitted(ctx, d, "after a client left without reading its replies")
        assert bystander.call("ping") == "pong"
        check_nothing_held(ctx, d)


def test_tcp_reset(ctx):
    """TCP clients that abort with a reset (SO_LINGER 0) mid-payload and with jobs in flight."""
    with ctx.daemon(config=CONFIG, tcp=True) as d, d.connect("tcp") as bystander:
        _, _, _, packed = big_request(ctx)
        for i in range(6):
            quitter = d.connect("tcp")
            if i < 3:
                quitter.send_raw(packed[:len(packed) // 2 + i])
            else:
                h.send_in_background(quitter, packed * 2)
                time.sleep(0.05 * i)
            quitter.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            quitter.close()
            assert bystander.call("ping") == "pong"
        check_big_admitted(ctx, d, "after TCP clients reset their connections")
        check_nothing_held(ctx, d)


if __name__ == "__main__":
    sys.exit(h.main([test_disconnect_mid_payload, test_disconnect_with_job_running,
                     test_disconnect_with_reply_unread, test_tcp_reset]))
