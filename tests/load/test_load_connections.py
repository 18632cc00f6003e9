#!/usr/bin/python3
"""Many connections at once. 1,000 concurrent connections each ping and run a checked gemm, all
open together; then 2,000 against limits.max_connections, and after a reload 1,000 against
limits.max_connections_per_peer: those over the cap are refused cleanly (EOF or an error reply,
never a hang and never a result), every one under it is served, and stats counts the
refusals."""
import asyncio
import os
import signal
import socket
import sys

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_util as lu  # noqa: E402
from load_util import h  # noqa: E402

SHAPES = [(7, 5, 3, "f32"), (16, 16, 16, "f64"), (9, 12, 33, "f32"), (4, 20, 8, "f16")]


def _connect_all(path, count):
    """Blocking connects, one after another: a full listen backlog then waits in connect()
    instead of failing with EAGAIN as a non-blocking AF_UNIX connect would."""
    socks = []
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        socks.append(sock)
    return socks


async def _replies(reader, unpacker, want):
    """Reads until `want` replies arrived; returns them (fewer at EOF or reset)."""
    got = []
    while len(got) < want:
        for obj in unpacker:
            got.append(obj)
        if len(got) >= want:
            break
        try:
            data = await reader.read(1 << 16)
        except (ConnectionResetError, BrokenPipeError):
            break
        if not data:
            break
        unpacker.feed(data)
    return got


async def _ping_and_gemm(sock, problem, msgid, writers):
    """'served' (pong and a correct result), 'refused' (EOF, reset or a refusal error before
    any result), or raises. The connection stays open: its writer goes to `writers`, since
    Python 3.12's StreamWriter closes its socket when it is garbage collected."""
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    writers.append(writer)
    try:
        writer.write(lu.PING(msgid) + problem.request(msgid + 1))
        await writer.drain()
    except (ConnectionResetError, BrokenPipeError):
        pass  # a refused connection; the read below sees the EOF
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    got = await _replies(reader, unpacker, 2)  # the socket stays open: the caller closes it
    if not got:
        return "refused"
    for obj in got:
        if obj[0] != 1 or obj[1] not in (msgid, msgid + 1):
            raise h.ProtocolError("msgid %d: not a reply to it: %r" % (msgid, obj))
        if obj[2] is not None:
            if obj[2].get("code") in ("RESOURCE_EXHAUSTED", "UNAVAILABLE") and len(got) == 1:
                return "refused"
            raise AssertionError("msgid %d: error reply %r" % (obj[1], obj[2]))
    if len(got) != 2:
        raise AssertionError("msgid %d: connection closed after %d of 2 replies" %
                             (msgid, len(got)))
    for obj in got:
        if obj[1] == msgid:
            assert obj[3] == "pong", "ping answered %r" % (obj[3],)
        else:
            problem.check(obj[3], "msgid %d" % obj[1])
    return "served"


async def _run_all(socks, problems, timeout, monitor):
    """The outcomes, and the daemon's connection count while every connection is still open."""
    writers = []
    jobs = [_ping_and_gemm(sock, problems[i % len(problems)], lu.msgid_base(i), writers)
            for i, sock in enumerate(socks)]
    try:
        outcomes = await asyncio.wait_for(asyncio.gather(*jobs), timeout)
        return outcomes, monitor.call("stats")["connections"]
    finally:
        for writer in writers:
            writer.close()


def _round(ctx, d, monitor, count, timeout):
    """count connections, all open, each pings and runs a checked gemm; returns the outcomes
    and the daemon's connection count while all were still open."""
    socks = _connect_all(d.unix_path, count)
    try:
        outcomes, open_now = asyncio.run(_run_all(socks, _round.problems, timeout, monitor))
    finally:
        for sock in socks:
            sock.close()
    return outcomes, open_now


# Every connection here comes from one peer (this uid): the per-peer cap is lifted to the
# global one for the first two rounds, then lowered on reload for the third. Every connection's
# gemm may be queued at once (a slow build): max_jobs lets none wait.
CONFIG = {"queue": {"max_jobs": 4096}, "limits": {"max_connections": 1024,
                                                  "max_connections_per_peer": 1024}}
PER_PEER = 500


def _only_monitor(st):
    return st["connections"] == 1


def _against_cap(ctx, d, monitor, count, cap, name):
    """count connections at once against a cap of cap (the monitor holds one slot): cap - 1
    served, the rest refused, each refusal counted by stats. Prints the figures."""
    rss_before = lu.rss_bytes(d.pid)
    refused_before = monitor.call("stats")["connections_refused"]
    outcomes, open_now = _round(ctx, d, monitor, count, 120 * ctx.scale)
    served, refused = outcomes.count("served"), outcomes.count("refused")
    assert served == cap - 1, "%d of %d served under a cap of %d (monitor included)" % (
        served, count, cap)
    assert refused == count - served, "%d served + %d refused of %d" % (served, refused, count)
    assert open_now == cap, "stats connections %d at the cap %d" % (open_now, cap)
    refused_stats = monitor.call("stats")["connections_refused"] - refused_before
    assert refused_stats == refused, "stats connections_refused grew by %d, %d refused" % (
        refused_stats, refused)
    lu.wait_stats(d, _only_monitor, 30 * ctx.scale, "the connections to close", monitor)
    with d.connect() as late:  # slots free again
        h.check_gemm(late, ctx.rng, 11, 13, 17, "f32")
    lu.figures(name, connections=count, cap=cap, served=served, refused=refused, lost=0,
               rss_before_mib=lu.mib(rss_before), rss_after_mib=lu.mib(lu.rss_bytes(d.pid)))


def test_connections(ctx):
    lu.raise_nofile(2 * 2000 + 256)  # both ends of every connection, gemmd inherits it
    _round.problems = lu.problems(ctx.rng, 16, SHAPES)
    with ctx.daemon(config=CONFIG) as d, d.connect() as monitor:
        cap = monitor.call("info")["limits"]["max_connections"]
        # the harness's readiness probe may still count: wait until only the monitor does
        lu.wait_stats(d, _only_monitor, 10 * ctx.scale, "only the monitor connected", monitor)
        rss_before = lu.rss_bytes(d.pid)

        outcomes, open_now = _round(ctx, d, monitor, 1000, 120 * ctx.scale)
        served = outcomes.count("served")
        assert served == 1000, "%d of 1000 concurrent connections served" % served
        assert open_now == 1001, "stats connections %d with 1000 + the monitor open" % open_now
        lu.figures("connections_1000", connections=1000, served=served, lost=1000 - served,
                   rss_before_mib=lu.mib(rss_before), rss_after_mib=lu.mib(lu.rss_bytes(d.pid)))
        lu.wait_stats(d, _only_monitor, 30 * ctx.scale, "the 1000 connections to close", monitor)

        _against_cap(ctx, d, monitor, 2000, cap, "connections_cap")

        d.write_config(h.deep_merge(CONFIG, {"limits": {"max_connections_per_peer": PER_PEER}}))
        d.send_signal(signal.SIGHUP)
        h.wait_until(lambda: "reloaded " in d.log(), 10 * ctx.scale, "the reload")
        _against_cap(ctx, d, monitor, 1000, PER_PEER, "connections_per_peer_cap")


if __name__ == "__main__":
    sys.exit(h.main([test_connections]))
