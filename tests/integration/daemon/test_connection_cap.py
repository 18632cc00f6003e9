#!/usr/bin/python3
"""limits.max_connections: past the cap a connection is refused cleanly (EOF or an error
reply, never a result), the connections already open keep working, and a slot that frees is
taken by the next client."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402


def _refused(d, ctx):
    """Connects one client over the cap; True when it is refused cleanly."""
    try:
        extra = d.connect(timeout=5 * ctx.scale)
    except OSError:
        return True
    with extra:
        try:
            extra.request("ping")
            reply = extra.read_reply(3 * ctx.scale)
        except (h.ConnectionClosed, OSError):
            return True
        if reply.error is not None and reply.error["code"] in ("RESOURCE_EXHAUSTED",
                                                               "UNAVAILABLE"):
            return True
        raise AssertionError("a connection over max_connections was answered %r" % (reply,))


def test_connection_cap(ctx):
    with ctx.daemon(config={"limits": {"max_connections": 4}}) as d:
        # the harness's readiness probe has closed; wait until the daemon has noticed
        first = h.wait_until(lambda: _four(d), 5 * ctx.scale, "4 connections to be served")
        assert _refused(d, ctx), "a 5th connection was not refused"
        assert _refused(d, ctx), "a 6th connection was not refused"
        for client in first:
            h.check_gemm(client, ctx.rng, 5, 4, 3, "f32")
        first.pop().close()
        replacement = h.wait_until(lambda: _served(d), 5 * ctx.scale,
                                   "a new connection once one of 4 closed")
        h.check_gemm(replacement, ctx.rng, 6, 6, 6, "f64")
        assert _refused(d, ctx), "a 5th connection was not refused after the swap"
        for client in first + [replacement]:
            assert client.call("ping") == "pong"
        stats = first[0].call("stats")
        refused = h.dig(stats, "connections_refused")
        assert refused is None or refused >= 3, "stats connections_refused %r" % refused
        for client in first + [replacement]:
            client.close()


def _served(d):
    try:
        client = d.connect(timeout=2)
        if client.call("ping", timeout=2) == "pong":
            return client
    except (OSError, EOFError, TimeoutError, h.RpcError):
        pass
    return None


def _four(d):
    clients = []
    for _ in range(4):
        client = _served(d)
        if client is None:
            for c in clients:
                c.close()
            return None
        clients.append(client)
    return clients


if __name__ == "__main__":
    sys.exit(h.main([test_connection_cap]))
