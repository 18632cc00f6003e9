"""deploy/haproxy/gemmd.cfg with a real HAProxy on loopback: three gemmd (CPU backend, a token
on TCP) behind it, 16 Python clients (retries on, the default) doing gemms checked against the
float64 reference while one gemmd is killed with SIGKILL and another is restarted (SIGTERM,
drain, start again): no request fails and no result is wrong. A client without the token, or
with a wrong one, is refused. The shipped file itself passes `haproxy -c`.

The backend and its health check are the shipped ones; only what a test cannot use is changed
(the global section's user, daemon mode and syslog; the bind port; the server lines)."""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import gemmd
import gemmd_harness as h

HERE = os.path.dirname(os.path.abspath(__file__))
SHIPPED = os.path.join(HERE, "..", "..", "..", "deploy", "haproxy", "gemmd.cfg")
TOKEN = "haproxy-test-token"
CLIENTS = 16

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.access("/usr/sbin/haproxy",
                                                                       os.X_OK) else None)
pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed "
                                "(scripts/install-deps.sh installs it)")


def test_shipped_config_is_valid():
    out = subprocess.run([HAPROXY, "-c", "-f", SHIPPED], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def local_config(port, servers):
    """The shipped file for this machine: no user switch, foreground, no syslog, loopback."""
    text = open(SHIPPED).read()
    text = re.sub(r"(?m)^\s+(user|group|daemon|log)\b.*\n", "", text)
    text = re.sub(r"(?m)^\s+option tcplog\n", "", text)
    text = re.sub(r"(?m)^(\s+)bind .*$", r"\1bind 127.0.0.1:%d" % port, text)
    text = re.sub(r"(?m)^\s+server .*\n", "", text)
    lines = "".join("    server box%d 127.0.0.1:%d check\n" % (i + 1, p)
                    for i, p in enumerate(servers))
    assert "balance leastconn" in text and "tcp-check expect binary 940101" in text
    return text.rstrip("\n") + "\n" + lines


class Proxy:
    def __init__(self, tmp_path, servers):
        self.port = h.free_tcp_port()
        self.path = str(tmp_path / "haproxy.cfg")
        with open(self.path, "w") as f:
            f.write(local_config(self.port, servers))
        self.log = open(str(tmp_path / "haproxy.log"), "wb")
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", self.path], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.address = "tcp:127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def token_daemon(fresh_daemon, tmp_path, i):
    path = tmp_path / ("token%d" % i)
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return fresh_daemon(tcp=True, config={"auth": {"token_file": str(path)},
                                          "cpu": {"threads": 1, "blas_threads": 1}})


def worker(i, address, stop, counts, failures, rng_seed):
    rng = np.random.default_rng(rng_seed + i)
    try:
        with gemmd.Client(address, token=TOKEN, timeout=120) as c:
            while not stop.is_set():
                m, n, k = (int(x) for x in rng.integers(24, 120, 3))
                dtype = ("f64", "f32")[counts[i] % 2]
                a, b = h.random_operands(rng, m, n, k, dtype)
                out = c.gemm(a.astype(np.float64 if dtype == "f64" else np.float32),
                             b.astype(np.float64 if dtype == "f64" else np.float32))
                h.assert_close(np.asarray(out, np.float64), a, b, None, 1.0, 0.0, False,
                               False, dtype, "client %d gemm %d" % (i, counts[i]))
                counts[i] += 1
    except Exception as exc:   # noqa: BLE001 - every failure is the test's failure
        failures.append("client %d after %d gemms: %r" % (i, counts[i], exc))


def test_three_daemons_behind_haproxy(fresh_daemon, tmp_path):
    daemons = [token_daemon(fresh_daemon, tmp_path, i) for i in range(3)]
    proxy = Proxy(tmp_path, [d.tcp_port for d in daemons])
    stop = threading.Event()
    counts = [0] * CLIENTS
    failures = []
    threads = []
    try:
        h.wait_until(lambda: _pings(proxy.address), 20, "HAProxy serving")
        seed = int(h.rng().integers(1 << 30))
        threads = [threading.Thread(target=worker, args=(i, proxy.address, stop, counts,
                                                         failures, seed))
                   for i in range(CLIENTS)]
        for t in threads:
            t.start()
        scale = daemons[0].scale
        h.wait_until(lambda: failures or sum(counts) >= 8 * CLIENTS, 120 * scale, "traffic")
        daemons[0].proc.send_signal(signal.SIGKILL)          # mid-run, requests in flight
        before = sum(counts)
        h.wait_until(lambda: failures or sum(counts) >= before + 8 * CLIENTS, 120 * scale,
                     "traffic after the SIGKILL")
        daemons[1].stop()                                     # drain and exit, then back
        daemons[1].start(wait_addr=daemons[1].address("tcp"))
        before = sum(counts)
        h.wait_until(lambda: failures or sum(counts) >= before + 8 * CLIENTS, 120 * scale,
                     "traffic after the restart")
        snapshot = list(counts)
        h.wait_until(lambda: failures or all(c > s for c, s in zip(counts, snapshot)),
                     120 * scale, "every client going on")
    finally:
        stop.set()
        for t in threads:
            t.join(180)
    try:
        assert not failures, "\n".join(failures)
        assert all(c > 0 for c in counts), counts
        # the token is checked by the box behind the proxy
        with pytest.raises(gemmd.Error) as info:
            gemmd.Client(proxy.address, token="not-the-token")
        assert info.value.code == "UNAUTHENTICATED"
        with gemmd.Client(proxy.address, token=b"") as c:     # empty: no token sent
            with pytest.raises(gemmd.Error) as info:
                c.gemm(np.eye(3), np.eye(3))
            assert info.value.code == "UNAUTHENTICATED"
        # HAProxy spread the clients: every box had TCP connections (the restarted one may be
        # out of service again until its checks pass, so its counters prove nothing)
        assert all(re.search(r"conn \d+: tcp .*: open", d.log()) for d in daemons), \
            "a box never got a connection"
        assert _gemm_ok(daemons[2]) > 0
        readme_client(proxy.address, tmp_path)
    finally:
        proxy.stop()


def readme_client(address, tmp_path):
    """docs/several-boxes.md's client lines: GEMMD_ADDRESS and GEMMD_TOKEN_FILE, then python3 -m gemmd check."""
    token = tmp_path / "client-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    env = dict(os.environ, GEMMD_ADDRESS=address, GEMMD_TOKEN_FILE=str(token))
    env.pop("GEMMD_TOKEN", None)
    out = subprocess.run([sys.executable, "-m", "gemmd", "check"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "PASS" in out.stdout, out.stdout + out.stderr


def _pings(address):
    try:
        with gemmd.Client(address, token=TOKEN, connect_timeout=2, timeout=2) as c:
            return c.ping() >= 0
    except gemmd.Error:
        return False


def _gemm_ok(d):
    with gemmd.Client(d.address("unix")) as c:
        return h.dig(c.stats(), "gemm_ok", 0)
