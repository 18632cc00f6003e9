#!/usr/bin/python3
"""gemmd under socket activation: it adopts the sockets it is handed (LISTEN_FDS).

systemd-socket-activate plays systemd: it binds the listening sockets, waits for the first
client, then execs gemmd with LISTEN_FDS/LISTEN_PID set (the same process, so LISTEN_PID is
gemmd's pid), exactly what gemmd.socket does. The tests check that
  - gemmd serves ping and GEMMs (checked against a float64 reference) on the handed socket,
    including the connection that triggered the activation;
  - it does so when its config lists the same path as a listen address (what the installed
    gemmd.yaml and gemmd.socket do: both name /run/gemmd/gemmd.sock);
  - handed sockets replace the config's listen list, and --listen adds to them (gemmd(8));
  - it adopts every socket handed over (a Unix and a TCP one at once);
  - it exits 0 on SIGTERM and leaves the socket file in place: it belongs to systemd, which
    keeps listening on it across daemon restarts;
  - activated and given NOTIFY_SOCKET at once, it sends READY=1, WATCHDOG=1 and STOPPING=1.

Run: test_socket_activation.py --gemmd PATH (PYTHONPATH must hold tests/integration).
"""

import os
import shutil
import signal
import socket
import sys
import time

import gemmd_harness as h

ACTIVATE = shutil.which("systemd-socket-activate")
# systemd-socket-activate hands its child only LISTEN_*, PATH, HOME, TERM and what -E names:
# pass the sanitizer settings through so that an ASan build behaves as it does elsewhere.
PASS_ENV = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "GEMMD_TEST_SEED", "LANG")


class ActivatedDaemon(h.Daemon):
    """A Daemon whose listening sockets systemd-socket-activate binds and hands over."""

    def __init__(self, gemmd, extra_listen=(), activate_env=None, **kwargs):
        self.extra_listen = list(extra_listen)  # further -l addresses
        self.activate_env = dict(activate_env or {})  # -E NAME=VALUE for gemmd
        super().__init__(gemmd, **kwargs)

    def command(self):
        cmd = [ACTIVATE, "-l", self.unix_path]
        for addr in self.extra_listen:
            cmd += ["-l", addr]
        for name in PASS_ENV:
            if name in os.environ:
                cmd += ["-E", name]
        for name, value in self.activate_env.items():
            cmd += ["-E", "%s=%s" % (name, value)]
        return cmd + super().command()


def wait_accepts(daemon, path):
    """Waits until a Unix socket at path accepts (the daemon's own listener, opened after it
    adopted the handed ones)."""
    deadline = time.monotonic() + 15.0 * daemon.scale
    while True:
        if not daemon.running():
            raise h.DaemonError("gemmd exited before listening on %s\n%s" %
                                (path, daemon.log_tail()))
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(path)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise h.DaemonError("gemmd did not accept on %s in time\n%s" %
                                    (path, daemon.log_tail()))
            time.sleep(0.02)


def need_activate():
    if not ACTIVATE:
        raise h.Skip("systemd-socket-activate is not installed")


def serve_checks(ctx, client):
    assert client.call("ping") == "pong", "ping on the handed socket"
    h.check_gemm(client, ctx.rng, 7, 5, 3, "f32")
    h.check_gemm(client, ctx.rng, 1, 9, 13, "f64", trans_a=True, alpha=-0.5, beta=2.0)
    h.check_gemm(client, ctx.rng, 17, 3, 1, "f32", trans_b=True, alpha=1.5, beta=0.0)


def stop_and_check_socket_kept(daemon):
    daemon.stop()  # SIGTERM; asserts exit 0 and a log free of sanitizer reports
    assert os.path.exists(daemon.unix_path), \
        "gemmd removed %s, which systemd handed it: the socket unit would be cut off from " \
        "its clients" % daemon.unix_path


def test_handed_unix_socket(ctx):
    """Config lists the very path systemd bound: gemmd must adopt it, not bind it again."""
    need_activate()
    daemon = ActivatedDaemon(ctx.gemmd)
    daemon.start(wait=False)
    # The first connection is what makes systemd-socket-activate exec gemmd; it must be
    # served too (it waits in the socket's backlog meanwhile).
    daemon.wait_listening()  # the path exists as soon as the activator has bound it
    with h.Client(daemon.address(), timeout=30.0 * daemon.scale) as client:
        serve_checks(ctx, client)
    assert daemon.running(), "gemmd exited after serving\n" + daemon.log_tail()
    stop_and_check_socket_kept(daemon)


def test_handed_socket_replaces_config(ctx):
    """The config lists another Unix path: the handed socket replaces the config's list."""
    need_activate()
    daemon = ActivatedDaemon(ctx.gemmd)
    own_path = os.path.join(daemon.dir, "own.sock")
    daemon.write_config({"listen": ["unix:" + own_path]})
    daemon.start(wait=False)
    daemon.wait_listening()
    with h.Client(daemon.address(), timeout=30.0 * daemon.scale) as client:
        serve_checks(ctx, client)
    assert not os.path.exists(own_path), \
        "gemmd bound the config's %s although systemd handed it a socket" % own_path
    stop_and_check_socket_kept(daemon)


def test_handed_socket_and_cli_listen(ctx):
    """--listen addresses are opened beside the handed socket."""
    need_activate()
    daemon = ActivatedDaemon(ctx.gemmd)
    extra = os.path.join(daemon.dir, "extra.sock")
    daemon.args = ["--listen", "unix:" + extra]  # read by command() at start
    daemon.start(wait=False)
    daemon.wait_listening()
    with h.Client(daemon.address(), timeout=30.0 * daemon.scale) as client:
        assert client.call("ping") == "pong", "ping on the handed socket"
    wait_accepts(daemon, extra)
    with h.Client("unix:" + extra, timeout=30.0 * daemon.scale) as client:
        serve_checks(ctx, client)
    stop_and_check_socket_kept(daemon)
    assert not os.path.exists(extra), "gemmd left its own socket file %s behind" % extra


def test_two_handed_sockets(ctx):
    """LISTEN_FDS=2: a Unix socket and a TCP one, both adopted."""
    need_activate()
    port = h.free_tcp_port()
    daemon = ActivatedDaemon(ctx.gemmd, extra_listen=["127.0.0.1:%d" % port])
    daemon.start(wait=False)
    daemon.wait_listening()
    with h.Client(daemon.address(), timeout=30.0 * daemon.scale) as client:
        serve_checks(ctx, client)
    with h.Client("tcp:127.0.0.1:%d" % port, timeout=30.0 * daemon.scale) as client:
        assert client.call("ping") == "pong", "ping on the handed TCP socket"
        h.check_gemm(client, ctx.rng, 5, 11, 7, "f32", trans_a=True, trans_b=True, alpha=0.75,
                     beta=-1.25)
    stop_and_check_socket_kept(daemon)


def test_handed_exposed_tcp_needs_a_token(ctx):
    need_activate()
    port = h.free_tcp_port()
    daemon = ActivatedDaemon(ctx.gemmd, extra_listen=["0.0.0.0:%d" % port])
    daemon.start(wait=False)

    def triggered():                            # the first connection execs gemmd
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                return True
        except OSError:
            return False
    h.wait_until(triggered, 10 * daemon.scale, "systemd-socket-activate listening")
    code = daemon.wait_exit(15 * daemon.scale)
    if code is None:
        daemon.kill()
        raise AssertionError("gemmd adopted an exposed TCP socket without a token\n" +
                             daemon.log_tail())
    daemon.check_log()
    assert code != 0 and "auth.token_file" in daemon.log(), daemon.log_tail()
    allowed = ActivatedDaemon(ctx.gemmd, extra_listen=["0.0.0.0:%d" % port],
                              config={"auth": {"allow_unauthenticated_tcp": True}})
    allowed.start(wait=False)
    allowed.wait_listening()
    with h.Client("tcp:127.0.0.1:%d" % port, timeout=30.0 * allowed.scale) as client:
        assert client.call("ping") == "pong"
    stop_and_check_socket_kept(allowed)


def test_activated_and_notifying(ctx):
    """What gemmd.socket + gemmd.service do together: activation, READY=1 once the handed
    socket is served, WATCHDOG=1, and STOPPING=1 on SIGTERM."""
    need_activate()
    from test_notify import NotifyListener  # same directory
    listener = NotifyListener()
    try:
        daemon = ActivatedDaemon(ctx.gemmd, activate_env={"NOTIFY_SOCKET": listener.path,
                                                          "WATCHDOG_USEC": "200000"})
        daemon.start(wait=False)
        daemon.wait_listening()  # triggers the exec
        ready = listener.wait_for("READY", "1", 20.0 * daemon.scale)
        assert ready is not None, "no READY=1 from the activated gemmd\n" + daemon.log_tail()
        assert ready[1] == daemon.pid, "READY=1 from pid %r, gemmd is %d" % (ready[1], daemon.pid)
        with h.Client(daemon.address(), timeout=30.0 * daemon.scale) as client:
            serve_checks(ctx, client)
        assert listener.wait_for("WATCHDOG", "1", 2.0 * daemon.scale) is not None, \
            "no WATCHDOG=1 from the activated gemmd"
        daemon.send_signal(signal.SIGTERM)
        daemon.wait_exit(25.0 * daemon.scale)
        assert listener.wait_for("STOPPING", "1", 0.5) is not None, "no STOPPING=1 on SIGTERM"
        stop_and_check_socket_kept(daemon)
    finally:
        listener.close()


if __name__ == "__main__":
    sys.exit(h.main([test_handed_unix_socket, test_handed_socket_replaces_config,
                     test_handed_socket_and_cli_listen, test_two_handed_sockets,
                     test_handed_exposed_tcp_needs_a_token, test_activated_and_notifying]))
