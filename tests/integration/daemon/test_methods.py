#!/usr/bin/python3
"""ping, info and stats through the real daemon: their results, and stats counters that move
with requests (by method, errors by code, bytes in/out, latency histograms)."""
import os
import sys

import msgpack

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402


def test_ping(ctx):
    with ctx.daemon() as d, d.connect() as client:
        assert client.call("ping") == "pong"
        # ids anywhere in uint32 come back as they were sent
        for msgid in (0, 1, 0x7FFFFFFF, 0xFFFFFFFF):
            reply = client.wait(client.request("ping", msgid=msgid))
            assert reply == h.Reply(msgid, None, "pong"), reply


def test_info(ctx):
    with ctx.daemon(config={"limits": {"max_dim": 12345}}) as d, d.connect() as client:
        info = client.call("info")
        assert isinstance(info, dict), info
        for key in ("version", "backend", "devices", "kernels", "dtypes", "limits"):
            assert key in info, "info lacks %r: %r" % (key, info)
        assert isinstance(info["version"], str) and info["version"], info["version"]
        assert info["backend"] == h.TEST_BACKEND, "--backend %s but info.backend = %r" % (
            h.TEST_BACKEND, info["backend"])
        assert isinstance(info["devices"], list), info["devices"]
        for dev in info["devices"]:
            assert isinstance(dev, dict), dev
            for key in ("id", "name", "memory", "sm"):
                if not any(k.lower().startswith(key) for k in dev):
                    raise AssertionError("info.devices entry lacks %r: %r" % (key, dev))
        assert isinstance(info["kernels"], list) and info["kernels"], info["kernels"]
        dtypes = info["dtypes"]
        assert isinstance(dtypes, list) and set(dtypes) >= {"f32", "f64", "f16", "bf16"}, dtypes
        limits = info["limits"]
        assert isinstance(limits, dict), limits
        assert limits.get("max_dim") == 12345, "info.limits.max_dim %r, config said 12345 (%r)" % (
            limits.get("max_dim"), limits)


def _stats(client):
    stats = client.call("stats")
    assert isinstance(stats, dict), stats
    return stats


def _count(stats, path):
    value = h.dig(stats, path)
    if not isinstance(value, int):
        raise AssertionError("stats has no counter %r: %r" % (path, stats))
    return value


def _check_histogram(hist, name):
    assert isinstance(hist, dict), "latency histogram %s is %r" % (name, hist)
    counts, bounds = hist.get("counts"), hist.get("bounds_us")
    assert isinstance(counts, list) and isinstance(bounds, list), hist
    assert len(counts) == len(bounds) + 1, "%s: %d counts for %d bounds" % (name, len(counts),
                                                                             len(bounds))
    assert bounds == sorted(bounds), "%s: bounds not increasing" % name
    assert sum(counts) == hist.get("count"), "%s: buckets sum %d, count %r" % (
        name, sum(counts), hist.get("count"))


def _busy_total(stats):
    """Sum of every per-device busy-time counter ("busy" in its key) anywhere in stats."""
    total, found = 0, False
    stack = [stats]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if "busy" in str(key) and isinstance(value, int) and not isinstance(value, bool):
                    total, found = total + value, True
                else:
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return total if found else None


def test_stats_busy_time(ctx):
    """stats carries per-device busy time, and it grows while a device computes."""
    with ctx.daemon() as d, d.connect() as client:
        before = _busy_total(_stats(client))
        assert before is not None, "stats has no per-device busy time: %r" % _stats(client)
        h.check_gemm(client, ctx.rng, 400, 300, 500, "f64")
        after = _busy_total(_stats(client))
        assert after > before, "device busy time %d -> %d across a 400x300x500 gemm" % (before,
                                                                                      after)


def test_stats_move(ctx):
    with ctx.daemon() as d, d.connect() as client:
        before = _stats(client)
        sent = 0
        for _ in range(3):
            client.call("ping")
        sent += 3 * len(msgpack.packb([0, 1, "ping", []]))
        h.check_gemm(client, ctx.rng, 16, 16, 16, "f32")
        h.check_gemm(client, ctx.rng, 8, 8, 8, "f64")
        sent += (16 * 16 * 4) * 2 + (8 * 8 * 8) * 2
        try:
            client.call("frobnicate")
            raise AssertionError("unknown method answered")
        except h.RpcError as exc:
            assert exc.code == "UNIMPLEMENTED", exc
        for bad in ({"m": 2, "n": 2, "k": 2, "dtype": "f7"}, {"n": 2, "k": 2, "dtype": "f32"}):
            try:
                client.call("gemm", [bad, b"\0" * 16, b"\0" * 16])
                raise AssertionError("bad gemm header answered")
            except h.RpcError as exc:
                assert exc.code == "INVALID_ARGUMENT", exc
        client.notify("ping")
        after = _stats(client)

        def grew(path, by):
            old, new = _count(before, path), _count(after, path)
            if new - old < by:
                raise AssertionError("stats %s went %d -> %d, expected at least +%d" %
                                     (path, old, new, by))

        grew("requests.total", 7)
        grew("requests.ping", 3)
        grew("requests.gemm", 4)
        grew("gemm_ok", 2)
        grew("errors.UNIMPLEMENTED", 1)
        grew("errors.INVALID_ARGUMENT", 2)
        grew("notifications", 1)
        grew("bytes_in", sent)
        grew("bytes_out", 16 * 16 * 4 + 8 * 8 * 8)
        grew("latency_us.total.count", 2)
        grew("latency_us.compute.count", 2)
        grew("latency_us.queued.count", 2)
        assert _count(after, "errors.DEADLINE_EXCEEDED") == _count(before,
                                                                  "errors.DEADLINE_EXCEEDED")
        for name in ("queued", "compute", "total"):
            _check_histogram(h.dig(after, "latency_us." + name), name)


if __name__ == "__main__":
    sys.exit(h.main([test_ping, test_info, test_stats_move, test_stats_busy_time]))
