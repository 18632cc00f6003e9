#!/usr/bin/python3
"""The operations listener (metrics.listen): /metrics in the Prometheus text format (checked by
promtool) with counters that move with real requests, /healthz, /readyz turning 503 while a
SIGTERM drain runs, 404/405 for the rest, and the listener off by default."""
import os
import signal
import socket
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402
import metrics_util as mu  # noqa: E402


def _metrics_daemon(ctx, config=None):
    port = h.free_tcp_port()
    cfg = h.deep_merge({"metrics": {"listen": "tcp:127.0.0.1:%d" % port}}, config or {})
    return ctx.daemon(config=cfg), port


def test_scrape_counts_requests(ctx):
    d, port = _metrics_daemon(ctx)
    with d, d.connect() as client:
        status, text, headers = mu.http_get(port, "/metrics")
        assert status == 200, (status, text)
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4"), headers
        before = mu.parse(text)
        sizes = [(17, 9, 33), (64, 48, 5), (3, 70, 21)]
        sent = 0
        for m, n, k in sizes:
            h.check_gemm(client, ctx.rng, m, n, k, "f32")
            sent += (m * k + k * n) * 4
        for _ in range(2):
            assert client.call("ping") == "pong"
        try:
            client.call("gemm", [{"m": 2, "n": 2, "k": 2, "dtype": "f7"}, b"\0" * 16, b"\0" * 16])
            raise AssertionError("a bad gemm header was answered")
        except h.RpcError as exc:
            assert exc.code == "INVALID_ARGUMENT", exc
        status, text, _ = mu.http_get(port, "/metrics")
        assert status == 200
        checked = mu.promtool_check(text)
        after = mu.parse(text)

        def grew(name, by, exact=True, **labels):
            old = before.get((name, frozenset(labels.items())), 0.0)
            new = mu.value(after, name, **labels)
            ok = new - old == by if exact else new - old >= by
            assert ok, "%s%r went %r -> %r, expected +%r" % (name, labels, old, new, by)

        grew("gemmd_requests_total", 3, method="gemm", code="OK")
        grew("gemmd_requests_total", 2, method="ping", code="OK")
        grew("gemmd_requests_total", 1, method="gemm", code="INVALID_ARGUMENT")
        grew("gemmd_request_duration_seconds_count", 3)  # a header refused is no job
        grew("gemmd_compute_seconds_count", 3)
        grew("gemmd_received_bytes_total", sent, exact=False)
        grew("gemmd_sent_bytes_total", sum(m * n * 4 for m, n, _ in sizes), exact=False)
        assert mu.value(after, "gemmd_request_duration_seconds_bucket", le="+Inf") == \
            mu.value(after, "gemmd_request_duration_seconds_count")
        assert mu.value(after, "gemmd_connections") >= 1
        assert mu.value(after, "gemmd_jobs_running") == 0
        assert mu.value(after, "gemmd_queue_depth") == 0
        assert mu.value(after, "gemmd_draining") == 0
        devices = [dict(k[1])["device"] for k in after if k[0] == "gemmd_device_in_service"]
        assert devices, "no gemmd_device_in_service sample"
        for dev in devices:
            assert mu.value(after, "gemmd_device_in_service", device=dev) == 1
        busy = sum(mu.value(after, "gemmd_device_busy_seconds_total", device=dev)
                   for dev in devices)
        assert busy > 0, "three gemms ran and no device was busy"
        if not checked:
            raise h.Skip("promtool is not installed: the format was not checked by it")


def test_health_and_errors(ctx):
    d, port = _metrics_daemon(ctx)
    with d:
        assert mu.http_get(port, "/healthz")[:2] == (200, "ok\n")
        assert mu.http_get(port, "/readyz")[:2] == (200, "ready\n")
        assert mu.http_get(port, "/metrics", method="HEAD")[0] == 200
        assert mu.http_get(port, "/nothing")[0] == 404
        assert mu.http_get(port, "/metrics", method="POST")[0] == 405


def test_off_by_default(ctx):
    with ctx.daemon() as d:
        d.check_log()
        assert "metrics: serving" not in d.log(), d.log_tail()


def test_readyz_503_while_draining(ctx):
    d, port = _metrics_daemon(ctx, {"timeouts": {"drain_ms": 10000}})
    with d, d.connect() as client:
        # A request that never finishes arriving keeps the drain going.
        n = 256
        a = np.ones((n, n), np.float32)
        frame = h.Client.pack_gemm(1, {"m": n, "n": n, "k": n, "dtype": "f32"}, a, a)
        client.send_raw(frame[:len(frame) // 2])
        h.wait_until(lambda: mu.value(mu.parse(mu.http_get(port, "/metrics")[1]),
                                      "gemmd_queue_depth") == 1, 10 * ctx.scale,
                     "the half-sent request to be admitted")
        d.send_signal(signal.SIGTERM)
        h.wait_until(lambda: mu.http_get(port, "/readyz")[0] == 503, 10 * ctx.scale,
                     "/readyz to answer 503 after SIGTERM")
        status, body, _ = mu.http_get(port, "/readyz")
        assert (status, body) == (503, "not ready: draining\n"), (status, body)
        assert mu.http_get(port, "/healthz")[0] == 200
        assert mu.value(mu.parse(mu.http_get(port, "/metrics")[1]), "gemmd_draining") == 1
        client.close()
        assert d.wait_exit(15 * ctx.scale) == 0
    with socket.socket() as s:  # the listener went with the daemon
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_bad_listen_refused(ctx):
    for listen, why in (("unix:/tmp/x.sock", "expected tcp:"), ("tcp:127.0.0.1:99999", "port")):
        d = ctx.daemon(config={"metrics": {"listen": listen}})
        code, out = h.run_gemmd(ctx.gemmd, ["--check-config", "--config", d.config_path])
        assert code != 0 and "listen" in out and why in out, (listen, code, out)


def test_port_in_use_fails_start(ctx):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        d = ctx.daemon(config={"metrics": {"listen": "tcp:127.0.0.1:%d" % port}})
        d.start(wait=False)
        code = d.wait_exit(15 * ctx.scale)
        assert code != 0, "gemmd started although its metrics port was taken"
        assert "metrics.listen: cannot serve HTTP" in d.log(), d.log_tail()


if __name__ == "__main__":
    sys.exit(h.main([test_scrape_counts_requests, test_health_and_errors, test_off_by_default,
                     test_readyz_503_while_draining, test_bad_listen_refused,
                     test_port_in_use_fails_start]))
