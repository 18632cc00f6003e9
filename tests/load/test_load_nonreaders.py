#!/usr/bin/python3
"""Clients that pipeline large gemms and never read a reply. While 4 of them hold their
connections open (timeouts.request_ms is set far beyond the test, so the daemon does not cut
them), gemmd's memory stays bounded by its limits and another client is served: each of its
checked gemms, as large as theirs, completes within a bounded time (a RESOURCE_EXHAUSTED answer
is retried until then).

The memory bound: gemmd stops reading a connection between requests once the results its
replies still owe pass limits.max_buffered_bytes (computed or not: on the GPU a result waits on
the device or in staging, and is copied into host memory when its client does not read), so a
non-reader gets at most max_buffered_bytes / result + 1 requests admitted (the check below; a
request whose header was read may wait for admission beside them). What a non-reader holds is
then those results plus the jobs admitted (its queue.connection_memory_share of the budget). RSS
must stay under the baseline + the budget (the reader's jobs) + that per non-reader + 64 MiB of
slack."""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_util as lu  # noqa: E402
from load_util import h  # noqa: E402

NONREADERS = 4
MIB = 1 << 20
BUDGET = 96 * MIB
BUFFERED = 16 * MIB
SHARE = 0.25
CONFIG = {"cpu": {"threads": 2},
          "queue": {"memory_budget": "96MiB", "connection_memory_share": SHARE},
          "limits": {"max_buffered_bytes": "16MiB"},
          "timeouts": {"request_ms": 3600000, "idle_ms": 3600000}}
# f32 1024 x 1024 results (4 MiB) from small operands: the replies are what piles up. Each
# non-reader gets several admitted before its unread replies pass max_buffered_bytes, so 4 of
# them could hold the whole budget if their unread results counted against it.
BIG = {"m": 1024, "n": 1024, "k": 32, "dtype": "f32"}
JOB = (1024 * 32 + 32 * 1024 + 1024 * 1024) * 4  # a + b + c of one BIG request
RESULT = 1024 * 1024 * 4
# requests gemmd reads from one non-reader: those whose results fit max_buffered_bytes, the one
# that crosses it, and one whose header was read (waiting for admission, or refused)
READ_PER_NONREADER = BUFFERED // RESULT + 2
SLACK = 64 * MIB  # code, libraries, connection buffers, malloc's own
PER_NONREADER = BUFFERED + JOB + int(SHARE * BUDGET)


def _start_nonreaders(ctx, d, count):
    """count connections, each sending `count` large gemms from a background thread and never
    reading; returns [(client, sender)]."""
    a, b = h.random_operands(ctx.rng, BIG["m"], BIG["n"], BIG["k"], "f32")
    per_client = lu.scaled(ctx, 100, minimum=20)
    batch = b"".join(h.Client.pack_gemm(msgid, BIG, a, b) for msgid in range(1, per_client + 1))
    out = []
    for _ in range(count):
        client = d.connect()
        out.append((client, h.send_in_background(client, batch)))
    return out


def _requests_read(monitor):
    return monitor.call("stats")["requests"]["gemm"]


def _served(ctx, d, deadline_s):
    """One checked gemm as large as a non-reader's on a fresh connection, retried on
    RESOURCE_EXHAUSTED until deadline_s; returns (seconds it took or None, refusals, the last
    refusal)."""
    start = time.monotonic()
    refusals, last = 0, None
    with d.connect() as client:
        while time.monotonic() - start <= deadline_s:
            try:
                h.check_gemm(client, ctx.rng, BIG["m"], BIG["n"], BIG["k"], "f32")
                return time.monotonic() - start, refusals, last
            except h.RpcError as exc:
                if exc.code != "RESOURCE_EXHAUSTED":
                    raise
                refusals, last = refusals + 1, exc
                time.sleep(0.1)
    return None, refusals, last


def test_nonreaders(ctx):
    with ctx.daemon(config=CONFIG) as d, d.connect() as monitor:
        h.check_gemm(monitor, ctx.rng, 96, 80, 64, "f32")
        baseline = lu.rss_bytes(d.pid)
        bound = baseline + BUDGET + NONREADERS * PER_NONREADER + SLACK
        nonreaders = _start_nonreaders(ctx, d, NONREADERS)
        # wait until the daemon has stopped reading them (the count of requests read is still)
        last_read, still_since = -1, time.monotonic()
        deadline = time.monotonic() + 60 * ctx.scale
        while time.monotonic() - still_since < 1.0 and time.monotonic() < deadline:
            now = _requests_read(monitor)
            if now != last_read:
                last_read, still_since = now, time.monotonic()
            time.sleep(0.1)
        peak = lu.rss_bytes(d.pid)
        served, waits, refusals, starved = 0, [], 0, None
        for _ in range(lu.scaled(ctx, 20, minimum=5)):
            took, refused, last = _served(ctx, d, 30 * ctx.scale)
            refusals += refused
            peak = max(peak, lu.rss_bytes(d.pid))
            if took is None:
                starved = last
                break
            served += 1
            waits.append(took)
        st = monitor.call("stats")
        for client, _ in nonreaders:  # (this reads what is waiting: after the stats)
            assert not client.is_closed(0.05), "gemmd closed a non-reader within the test"
        lu.figures("nonreaders", nonreaders=NONREADERS, nonreader_requests_read=last_read - 1,
                   served=served, starved=int(starved is not None), refusals=refusals,
                   max_wait_s="%.2f" % max(waits or [0]), lost=0,
                   reserved_mib=lu.mib(st["reserved_bytes"]), rss_before_mib=lu.mib(baseline),
                   rss_peak_mib=lu.mib(peak), rss_bound_mib=lu.mib(bound))
        assert starved is None, (
            "a reading client was refused for %.0f s (%d times) while %d clients that never "
            "read held their connections: %s" % (30 * ctx.scale, refusals, NONREADERS, starved))
        assert last_read - 1 <= NONREADERS * READ_PER_NONREADER, (
            "gemmd read %d requests from %d clients that never read (at most %d each: "
            "limits.max_buffered_bytes of results owed)" % (last_read - 1, NONREADERS,
                                                          READ_PER_NONREADER))
        assert peak <= bound, "gemmd RSS %s MiB with %d non-readers, over the bound %s MiB" % (
            lu.mib(peak), NONREADERS, lu.mib(bound))
        for client, sender in nonreaders:
            client.sock.shutdown(socket.SHUT_RDWR)  # ends the sender's blocked sendall too
            client.close()
            sender.join(10 * ctx.scale)


if __name__ == "__main__":
    sys.exit(h.main([test_nonreaders]))
