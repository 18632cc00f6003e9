#!/usr/bin/python3
"""sd_notify from gemmd, observed on a NOTIFY_SOCKET of our own.

A Python AF_UNIX datagram socket stands in for systemd: gemmd is started with NOTIFY_SOCKET
naming it, and the test checks what a Type=notify service with WatchdogSec= relies on:
  - READY=1 arrives, and once it has the daemon answers on its socket at the first attempt;
  - with WATCHDOG_USEC=200000, WATCHDOG=1 arrives again and again, about every 100 ms
    (half the interval), from the daemon's own process (NotifyAccess=main);
  - WATCHDOG_PID naming another process turns the pings off, naming gemmd's keeps them on,
    and without WATCHDOG_USEC there are none;
  - SIGHUP brings RELOADING=1 and then READY=1 again, for a good and for a broken config
    (systemd leaves a Type=notify unit "reloading" until READY=1 follows);
  - SIGTERM brings STOPPING=1 before the exit, and the exit code is 0.
The sender of every datagram is checked with SO_PASSCRED.

Run: test_notify.py --gemmd PATH (PYTHONPATH must hold tests/integration).
"""

import os
import signal
import socket
import statistics
import struct
import sys
import tempfile
import time

import gemmd_harness as h

WATCHDOG_USEC = 200000


class NotifyListener:
    """The systemd side of sd_notify: a datagram socket that records (time, pid, fields)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="gemmd-notify-", dir="/tmp")
        self.path = os.path.join(self.dir, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        # Ask the kernel for each sender's credentials, as systemd does.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.messages = []  # (monotonic time, sender pid, {field: value})

    def receive(self, timeout):
        """Reads datagrams for up to timeout seconds; returns those that arrived."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return got
            self.sock.settimeout(left)
            try:
                data, ancdata, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
            except socket.timeout:
                return got
            pid = None
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid, _, _ = struct.unpack("iII", payload[:12])
            fields = {}
            for line in data.decode("utf-8", "replace").split("\n"):
                if "=" in line:
                    key, _, value = line.partition("=")
                    fields[key] = value
            message = (time.monotonic(), pid, fields)
            self.messages.append(message)
            got.append(message)

    def wait_for(self, key, value, timeout):
        """Receives until a message with key=value arrives; returns it or None."""
        deadline = time.monotonic() + timeout
        for message in self.messages:
            if message[2].get(key) == value:
                return message
        while time.monotonic() < deadline:
            for message in self.receive(min(0.05, max(0.0, deadline - time.monotonic()))):
                if message[2].get(key) == value:
                    return message
        return None

    def with_field(self, key, value, since=0.0):
        return [m for m in self.messages if m[2].get(key) == value and m[0] >= since]

    def close(self):
        self.sock.close()
        try:
            os.unlink(self.path)
            os.rmdir(self.dir)
        except OSError:
            pass


class WrappedDaemon(h.Daemon):
    """A daemon started through `sh -c 'export WATCHDOG_PID=$$; exec gemmd ...'`, so that
    WATCHDOG_PID names gemmd's own process, as systemd sets it."""

    def command(self):
        return ["/bin/sh", "-c", 'WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$@"', "sh"] + \
            super().command()


def notify_env(listener, **extra):
    env = {"NOTIFY_SOCKET": listener.path}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start_with(ctx, listener, cls=h.Daemon, **env):
    # The harness copies os.environ: a WATCHDOG_PID of our own caller must not leak in.
    os.environ.pop("WATCHDOG_PID", None)
    os.environ.pop("WATCHDOG_USEC", None)
    daemon = cls(ctx.gemmd, env=notify_env(listener, **env))
    daemon.start(wait=False)
    return daemon


def expect_ready(daemon, listener, scale):
    ready = listener.wait_for("READY", "1", 20.0 * scale)
    if ready is None:
        raise AssertionError("no READY=1 on NOTIFY_SOCKET within %.0fs; got %r\n%s" %
                             (20.0 * scale, [m[2] for m in listener.messages], daemon.log_tail()))
    assert ready[1] == daemon.pid, "READY=1 came from pid %r, not gemmd's %d" % (ready[1],
                                                                                 daemon.pid)
    # READY=1 promises a daemon that serves: the first connection must work.
    with h.Client("unix:" + daemon.unix_path, timeout=10.0 * scale) as client:
        assert client.call("ping") == "pong"
    return ready


def expect_stopping(daemon, listener, scale):
    daemon.send_signal(signal.SIGTERM)
    # One SIGTERM only: wait for the exit here, so that stop() (which asserts exit 0 and a
    # clean log) finds the process gone and signals nothing more.
    daemon.wait_exit(25.0 * scale)
    stopping = listener.wait_for("STOPPING", "1", 0.5)
    code = daemon.stop()
    assert stopping is not None, "no STOPPING=1 after SIGTERM; got %r" % (
        [m[2] for m in listener.messages[-5:]],)
    assert stopping[1] == daemon.pid, "STOPPING=1 came from pid %r" % (stopping[1],)
    return code


def watchdog_intervals(listener, since):
    times = [m[0] for m in listener.with_field("WATCHDOG", "1", since)]
    return [b - a for a, b in zip(times, times[1:])]


def check_pings(daemon, listener, scale, window=1.5):
    since = time.monotonic()
    listener.receive(window)
    pings = listener.with_field("WATCHDOG", "1", since)
    senders = {m[1] for m in pings}
    assert senders <= {daemon.pid}, "WATCHDOG=1 from pids %r, gemmd is %d" % (senders,
                                                                              daemon.pid)
    # Half of 200 ms: about 15 pings in 1.5 s. At least a third of them, whatever the load.
    expected = window / (WATCHDOG_USEC / 2e6)
    assert len(pings) >= expected / 3, "%d WATCHDOG=1 in %.1fs, expected about %d" % (
        len(pings), window, expected)
    gaps = watchdog_intervals(listener, since)
    median = statistics.median(gaps)
    # The median interval shows the period the daemon chose, free of scheduling outliers:
    # half of WATCHDOG_USEC (100 ms). Below 30 ms is a busy loop; above 200 ms (the whole
    # interval) systemd would have killed the service.
    assert 0.03 <= median <= 0.2 * max(1.0, scale / 2), \
        "median WATCHDOG=1 interval %.0f ms, expected about 100 ms" % (median * 1e3)
    print("  %d pings in %.1fs, median interval %.0f ms, longest %.0f ms" %
          (len(pings), window, median * 1e3, max(gaps) * 1e3), flush=True)


def test_ready_watchdog_stopping(ctx):
    listener = NotifyListener()
    try:
        daemon = start_with(ctx, listener, WATCHDOG_USEC=WATCHDOG_USEC)
        expect_ready(daemon, listener, ctx.scale)
        check_pings(daemon, listener, ctx.scale)
        statuses = [m[2]["STATUS"] for m in listener.messages if "STATUS" in m[2]]
        print("  STATUS lines: %r" % statuses[:5], flush=True)
        expect_stopping(daemon, listener, ctx.scale)
    finally:
        listener.close()


def test_watchdog_pid_is_gemmd(ctx):
    listener = NotifyListener()
    try:
        daemon = start_with(ctx, listener, cls=WrappedDaemon, WATCHDOG_USEC=WATCHDOG_USEC)
        expect_ready(daemon, listener, ctx.scale)
        check_pings(daemon, listener, ctx.scale, window=1.0)
        expect_stopping(daemon, listener, ctx.scale)
    finally:
        listener.close()


def test_watchdog_for_another_pid(ctx):
    # sd_watchdog_enabled(): WATCHDOG_PID naming some other process means "not for you".
    listener = NotifyListener()
    try:
        daemon = start_with(ctx, listener, WATCHDOG_USEC=WATCHDOG_USEC, WATCHDOG_PID=os.getpid())
        expect_ready(daemon, listener, ctx.scale)
        since = time.monotonic()
        listener.receive(0.6)
        pings = listener.with_field("WATCHDOG", "1", since)
        assert not pings, "%d WATCHDOG=1 although WATCHDOG_PID is another process" % len(pings)
        expect_stopping(daemon, listener, ctx.scale)
    finally:
        listener.close()


def test_no_watchdog_without_usec(ctx):
    listener = NotifyListener()
    try:
        daemon = start_with(ctx, listener)
        expect_ready(daemon, listener, ctx.scale)
        listener.receive(0.6)
        pings = listener.with_field("WATCHDOG", "1")
        assert not pings, "%d WATCHDOG=1 without WATCHDOG_USEC" % len(pings)
        expect_stopping(daemon, listener, ctx.scale)
    finally:
        listener.close()


def expect_reload_cycle(daemon, listener, scale, what):
    """SIGHUP: RELOADING=1, then READY=1 again (else systemd shows the unit reloading for
    ever), and the daemon still serves."""
    since = time.monotonic()
    daemon.send_signal(signal.SIGHUP)
    reloading = ready = None
    deadline = time.monotonic() + 10.0 * scale
    while time.monotonic() < deadline and ready is None:
        for message in listener.receive(0.05):
            if message[0] < since:
                continue
            if reloading is None and message[2].get("RELOADING") == "1":
                reloading = message
            elif reloading is not None and message[2].get("READY") == "1":
                ready = message
    assert reloading is not None, "%s: no RELOADING=1 after SIGHUP" % what
    assert ready is not None, "%s: RELOADING=1 but no READY=1 after it" % what
    assert reloading[1] == daemon.pid and ready[1] == daemon.pid, "%s: sent by another pid" % what
    print("  %s: RELOADING=1, then READY=1 (STATUS=%s)" % (what, ready[2].get("STATUS")),
          flush=True)
    with h.Client("unix:" + daemon.unix_path, timeout=10.0 * scale) as client:
        assert client.call("ping") == "pong", "%s: no pong after the reload" % what


def test_reload_notifies(ctx):
    listener = NotifyListener()
    try:
        daemon = start_with(ctx, listener)
        expect_ready(daemon, listener, ctx.scale)
        daemon.write_config({"log_level": "debug"})
        expect_reload_cycle(daemon, listener, ctx.scale, "valid config")
        daemon.write_config(config_text="log_level: [not, a, level]\n")
        expect_reload_cycle(daemon, listener, ctx.scale, "broken config")
        expect_stopping(daemon, listener, ctx.scale)
    finally:
        listener.close()


if __name__ == "__main__":
    sys.exit(h.main([test_ready_watchdog_stopping, test_watchdog_pid_is_gemmd,
                     test_watchdog_for_another_pid, test_no_watchdog_without_usec,
                     test_reload_notifies]))
