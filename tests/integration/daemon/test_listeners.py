#!/usr/bin/python3
"""Listeners: the unix socket's mode (0660 by default, unix_socket_mode otherwise); a stale
socket file from a dead daemon is replaced; a live one makes a second daemon exit non-zero with a
clear message; an over-long path is an error at start; TCP on 127.0.0.1 (and [::1]) serves.
The socket is created with its mode whatever the umask, never through a symlink, with
unix_socket_group's group; a world-writable mode is warned about; a missing socket directory is
named as such."""
import grp
import os
import socket
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_socket_mode(ctx):
    with ctx.daemon() as d, d.connect() as client:
        assert stat.S_ISSOCK(os.stat(d.unix_path).st_mode)
        assert _mode(d.unix_path) == 0o660, "socket mode %o, expected 0660" % _mode(d.unix_path)
        assert client.call("ping") == "pong"
    with ctx.daemon(config={"unix_socket_mode": "0600"}) as d, d.connect() as client:
        assert _mode(d.unix_path) == 0o600, "socket mode %o, expected 0600" % _mode(d.unix_path)
        h.check_gemm(client, ctx.rng, 3, 3, 3, "f32")


def test_stale_socket_replaced(ctx):
    d = ctx.daemon()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(d.unix_path)  # bound, never listening, then closed: what a dead daemon leaves
    stale.close()
    assert os.path.exists(d.unix_path)
    with d, d.connect() as client:
        h.check_gemm(client, ctx.rng, 7, 7, 7, "f32")
    # and the file a SIGKILLed gemmd leaves behind
    d2 = ctx.daemon().start()
    path = d2.unix_path
    d2.kill()
    d3 = ctx.daemon()
    d3.unix_path = path
    d3.write_config({"listen": ["unix:" + path]})
    with d3, d3.connect() as client:
        h.check_gemm(client, ctx.rng, 5, 3, 2, "f64")


def test_live_socket_kept(ctx):
    with ctx.daemon() as first, first.connect() as client:
        second = ctx.daemon(config={"listen": ["unix:" + first.unix_path]})
        second.start(wait=False)
        code = second.wait_exit(15 * ctx.scale)
        if code is None:
            second.kill()
            raise AssertionError("a second gemmd on a live socket kept running\n" +
                                 second.log_tail())
        second.check_log()
        assert code != 0, "a second gemmd on a live socket exited 0"
        log = second.log()
        assert first.unix_path in log or "in use" in log.lower(), \
            "no clear message naming the socket:\n" + second.log_tail()
        # the first daemon's socket is untouched
        assert client.call("ping") == "pong"
        with first.connect() as again:
            h.check_gemm(again, ctx.rng, 4, 5, 6, "f32")


def test_long_path_refused(ctx):
    d = ctx.daemon()
    long_dir = os.path.join(d.dir, "x" * 100)
    os.mkdir(long_dir)
    long_path = os.path.join(long_dir, "gemmd.sock")  # well over sun_path's 107 bytes
    d.write_config({"listen": ["unix:" + long_path]})
    d.start(wait=False)
    code = d.wait_exit(15 * ctx.scale)
    if code is None:
        d.kill()
        raise AssertionError("gemmd started on an over-long socket path\n" + d.log_tail())
    d.check_log()
    assert code != 0, "over-long unix path: exit 0"
    assert d.log().strip(), "over-long unix path: exit %d without a message" % code
    expected = ("gemmd.yaml", "gemmd.log", os.path.basename(long_dir))
    leftovers = os.listdir(long_dir) + [n for n in os.listdir(d.dir) if n not in expected]
    assert not leftovers, "a socket was created at a truncated path: %r" % leftovers
    # the same path through --listen
    code, out = h.run_gemmd(ctx.gemmd, ["--config", d.config_path, "--backend", "cpu",
                                        "--listen", "unix:" + long_path], timeout=15)
    assert code != 0 and out.strip(), "--listen with an over-long path: exit %d, %r" % (code, out)


def test_tcp_ipv4(ctx):
    with ctx.daemon(tcp=True) as d, d.connect("tcp") as client:
        assert client.call("ping") == "pong"
        h.check_gemm(client, ctx.rng, 33, 17, 65, "f32", True, False, alpha=0.5, beta=0.25)
        h.check_gemm(client, ctx.rng, 200, 100, 150, "f64")
        with d.connect("unix") as local:  # both listeners at once
            h.check_gemm(local, ctx.rng, 3, 3, 3, "bf16")


def test_tcp_ipv6(ctx):
    if not h.ipv6_loopback_works():  # the machine's, not gemmd's: no reason to skip the script
        print("note: no IPv6 loopback on this machine: tcp:[::1] not tested")
        return
    with ctx.daemon(tcp6=True) as d, d.connect("tcp6") as client:
        assert client.call("ping") == "pong"
        h.check_gemm(client, ctx.rng, 33, 17, 65, "f16", False, True)


def test_tcp_only(ctx):
    port = h.free_tcp_port()
    d = ctx.daemon(config={"listen": ["tcp:127.0.0.1:%d" % port]})
    d.start(wait_addr="tcp:127.0.0.1:%d" % port)
    with h.Client("tcp:127.0.0.1:%d" % port) as client:
        h.check_gemm(client, ctx.rng, 8, 8, 8, "f32")
    assert not os.path.exists(d.unix_path)
    d.stop()



def test_socket_mode_whatever_the_umask(ctx):
    for umask in (0o000, 0o077, 0o777):
        d = h.ShellDaemon(ctx.gemmd, "umask %03o" % umask, config={"unix_socket_mode": "0640"})
        with d, d.connect() as client:
            assert _mode(d.unix_path) == 0o640, "umask %03o: socket mode %o, expected 0640" % (
                umask, _mode(d.unix_path))
            assert client.call("ping") == "pong"


def _start_fails(ctx, d, what):
    d.start(wait=False)
    code = d.wait_exit(15 * ctx.scale)
    if code is None:
        d.kill()
        raise AssertionError("%s: gemmd kept running\n%s" % (what, d.log_tail()))
    d.check_log()
    assert code != 0, "%s: gemmd exited 0" % what
    return d.log()


def test_symlink_at_socket_path_refused(ctx):
    d = ctx.daemon()
    victim = os.path.join(d.dir, "victim")
    with open(victim, "w") as f:
        f.write("x")
    os.chmod(victim, 0o600)
    os.symlink(victim, d.unix_path)
    log = _start_fails(ctx, d, "a symlink at the socket path")
    assert "not a socket" in log, log
    assert _mode(victim) == 0o600 and os.path.islink(d.unix_path), "the symlink was followed"


def _other_group():
    """A group this process may give its files (root: any), other than its own; or None."""
    mine = os.getegid()
    allowed = set(os.getgroups())
    for entry in grp.getgrall():
        if entry.gr_gid != mine and (os.geteuid() == 0 or entry.gr_gid in allowed):
            return entry
    return None


def test_socket_group(ctx):
    group = _other_group()
    if group is None:
        print("note: no second group this user may use: unix_socket_group not tested")
        return
    for value in (group.gr_name, str(group.gr_gid)):
        with ctx.daemon(config={"unix_socket_group": value}) as d, d.connect() as client:
            st = os.lstat(d.unix_path)
            assert st.st_gid == group.gr_gid, "unix_socket_group %s: socket group %d" % (
                value, st.st_gid)
            assert _mode(d.unix_path) == 0o660
            assert client.call("ping") == "pong"
    d = ctx.daemon(config={"unix_socket_group": "no-such-group-here"})
    log = _start_fails(ctx, d, "an unknown unix_socket_group")
    assert 'no group "no-such-group-here"' in log, log


def test_world_writable_mode_warned(ctx):
    with ctx.daemon(config={"unix_socket_mode": "0666"}) as d, d.connect() as client:
        assert _mode(d.unix_path) == 0o666
        assert client.call("ping") == "pong"
        assert "unix_socket_mode 0666 lets every local user connect" in d.log(), d.log_tail()
    with ctx.daemon() as d:
        assert "lets every local user connect" not in d.log()


def test_missing_socket_directory_named(ctx):
    d = ctx.daemon()
    path = os.path.join(d.dir, "no-such-dir", "gemmd.sock")
    d.write_config({"listen": ["unix:" + path]})
    log = _start_fails(ctx, d, "a socket in a missing directory")
    assert "does not exist" in log and "permission denied" not in log.lower(), log


if __name__ == "__main__":
    sys.exit(h.main([test_socket_mode, test_stale_socket_replaced, test_live_socket_kept,
                     test_long_path_refused, test_tcp_ipv4, test_tcp_ipv6, test_tcp_only,
                     test_socket_mode_whatever_the_umask, test_symlink_at_socket_path_refused,
                     test_socket_group, test_world_writable_mode_warned,
                     test_missing_socket_directory_named]))
