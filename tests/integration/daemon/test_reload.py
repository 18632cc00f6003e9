#!/usr/bin/python3
"""SIGHUP re-reads the config file and applies what can change live (log level, limits), keeps
serving, and survives a broken file (keeping the old settings)."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402


def _refused(client, m):
    hdr = {"m": m, "n": 2, "k": 2, "dtype": "f32"}
    try:
        client.gemm(hdr, b"\0" * (m * 2 * 4), b"\0" * 16)
        return False
    except h.RpcError as exc:
        assert exc.code == "RESOURCE_EXHAUSTED", exc
        return True


def _max_dim(client):
    return h.dig(client.call("info"), "limits.max_dim")


def test_sighup_applies_limits_and_log_level(ctx):
    config = {"limits": {"max_dim": 1000}, "log_level": "error"}
    with ctx.daemon(config=config) as d, d.connect() as client:
        assert not _refused(client, 200)
        h.check_gemm(client, ctx.rng, 200, 2, 2, "f32")
        lines_before = len(d.log().splitlines())
        d.write_config({"limits": {"max_dim": 100}, "log_level": "debug"})
        d.send_signal(signal.SIGHUP)
        h.wait_until(lambda: _refused(client, 200), 5.0 * ctx.scale,
                     "max_dim 100 to apply after SIGHUP")
        assert _max_dim(client) in (None, 100), "info.limits.max_dim %r" % _max_dim(client)
        h.check_gemm(client, ctx.rng, 100, 3, 7, "f32")  # within the new limit
        with d.connect() as fresh:  # new connections get the new limits too
            assert _refused(fresh, 101)
            h.check_gemm(fresh, ctx.rng, 50, 50, 50, "f64")
        # log_level debug now: serving a request logs at debug
        h.check_gemm(client, ctx.rng, 5, 5, 5, "f64")
        new_lines = d.log().splitlines()[lines_before:]
        assert any(line.startswith("debug:") for line in new_lines), \
            "log_level debug after SIGHUP, yet no debug line:\n%s" % "\n".join(new_lines)
        # and back up again
        d.write_config({"limits": {"max_dim": 1000}, "log_level": "info"})
        d.send_signal(signal.SIGHUP)
        h.wait_until(lambda: not _refused(client, 200), 5.0 * ctx.scale,
                     "max_dim 1000 to apply after a second SIGHUP")
        assert d.running()


def test_sighup_with_broken_file(ctx):
    with ctx.daemon(config={"limits": {"max_dim": 100}}) as d, d.connect() as client:
        assert _refused(client, 101)
        d.write_config(config_text="limits:\n  max_dim: [oops\n")
        d.send_signal(signal.SIGHUP)
        time.sleep(0.5 * ctx.scale)
        assert d.running(), "gemmd died on SIGHUP with a broken config file"
        assert client.call("ping") == "pong"
        assert _refused(client, 101), "a broken file changed max_dim"
        assert "gemmd.yaml" in d.log(), "the broken file is not named in the log"
        d.write_config({"limits": {"max_dim": 200}})
        d.send_signal(signal.SIGHUP)
        h.wait_until(lambda: not _refused(client, 150), 5.0 * ctx.scale,
                     "a fixed file to apply after SIGHUP")


def test_sighup_under_load(ctx):
    """SIGHUPs while pipelined jobs run: every reply is still right and the daemon stays up."""
    with ctx.daemon(config={"limits": {"max_dim": 500}}) as d, d.connect() as client:
        sent = []
        for i in range(40):
            m, n, k = 60 + i, 50, 70 - i
            a, b = h.random_operands(ctx.rng, m, n, k, "f32")
            hdr = {"m": m, "n": n, "k": k, "dtype": "f32"}
            sent.append((client.send_gemm(hdr, a, b), hdr, a, b))
            if i % 4 == 0:
                d.write_config({"limits": {"max_dim": 500 + i}, "log_level": "info"})
                d.send_signal(signal.SIGHUP)
        for msgid, hdr, a, b in sent:
            _, out = client.gemm_result(msgid, hdr)
            h.assert_close(out, a, b, None, 1.0, 0.0, False, False, "f32", "msgid %d" % msgid)
        assert d.running()


def test_sighup_unchangeable_keys(ctx):
    """listen cannot change live: the daemon keeps its sockets, says so, and stays up."""
    with ctx.daemon() as d, d.connect() as client:
        other = os.path.join(d.dir, "other.sock")
        d.write_config({"listen": ["unix:" + other], "log_level": "info"})
        lines_before = len(d.log().splitlines())
        d.send_signal(signal.SIGHUP)
        time.sleep(0.5 * ctx.scale)
        assert d.running()
        assert client.call("ping") == "pong"
        with d.connect() as again:
            assert again.call("ping") == "pong"
        new_lines = d.log().splitlines()[lines_before:]
        assert new_lines, "SIGHUP with a changed listen list: nothing logged"
        print("logged: %s" % new_lines)


if __name__ == "__main__":
    sys.exit(h.main([test_sighup_applies_limits_and_log_level, test_sighup_with_broken_file,
                     test_sighup_under_load, test_sighup_unchangeable_keys]))
