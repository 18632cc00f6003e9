#!/usr/bin/python3
"""TCP authentication (auth.token_file, the `auth` method) and the refusal of exposed TCP without
a token: no token, a wrong token (answered, then closed), the right one (str or bin), every
method before it refused and a gemm refused at its header, Unix connections trusted, the token
file's checks, SIGHUP re-reading the token, a non-loopback listener refused unless
auth.allow_unauthenticated_tcp, and --check-config saying so."""
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402

TOKEN = "s3cret-token-for-tests"


def _token_file(d, text=TOKEN + "\n", mode=0o600, name="token"):
    path = os.path.join(d.dir, name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def _authed_daemon(ctx, token_text=TOKEN + "\n", auth=None):
    """A daemon with TCP and a token file (written before it starts); auth: more auth keys."""
    d = ctx.daemon(tcp=True)
    path = _token_file(d, token_text)
    d.write_config({"listen": d.default_listen(),
                    "auth": h.deep_merge({"token_file": path}, auth or {})})
    return d


def _expect_error(client, method, params, code, words):
    try:
        result = client.call(method, params)
    except h.RpcError as e:
        assert e.code == code and words in e.message, "%s: got %s: %s" % (method, e.code,
                                                                           e.message)
        return
    raise AssertionError("%s answered %r, expected %s" % (method, result, code))


def test_no_token_configured(ctx):
    with ctx.daemon(tcp=True) as d, d.connect("tcp") as client:
        assert client.call("ping") == "pong"
        assert "auth" in client.call("info").get("features", []), "info does not list auth"
        assert client.call("auth", ["anything"]) is True  # nothing to check it against
        h.check_gemm(client, ctx.rng, 5, 4, 3, "f32")


def test_methods_refused_before_auth(ctx):
    with _authed_daemon(ctx) as d, d.connect("tcp") as client:
        for method in ("ping", "info", "stats", "frobnicate"):
            _expect_error(client, method, [], "UNAUTHENTICATED", "authenticate first")
        # a malformed request says no more than that either
        _expect_error(client, "ping", [1], "UNAUTHENTICATED", "authenticate first")
        # a gemm is refused at its header: the reply comes before any payload byte is sent
        m = n = k = 128  # operands over 64 KiB: bin32, a 5-byte header each
        hdr = {"m": m, "n": n, "k": k, "dtype": "f64"}
        a, b = h.random_operands(ctx.rng, m, n, k, "f64")
        whole = h.Client.pack_gemm(7, hdr, a, b)
        payloads = 2 * m * k * 8 + 2 * 5  # both operands and their bin32 headers
        client.send_raw(whole[:len(whole) - payloads])
        reply = client.wait(7)
        assert reply.error and reply.error["code"] == "UNAUTHENTICATED", reply
        client.send_raw(whole[len(whole) - payloads:])  # skipped, never stored
        # the connection is still usable: authenticate, then everything works
        assert client.call("auth", [TOKEN]) is True
        assert client.call("ping") == "pong"
        h.check_gemm(client, ctx.rng, 9, 7, 5, "f64")
        stats = client.call("stats")
        assert h.dig(stats, "requests.auth") == 1, stats.get("requests")
        assert h.dig(stats, "errors.UNAUTHENTICATED") >= 6, stats.get("errors")


def test_right_token_as_str_and_bin(ctx):
    with _authed_daemon(ctx) as d:
        with d.connect("tcp") as client:
            assert client.call("auth", [TOKEN]) is True
            h.check_gemm(client, ctx.rng, 16, 8, 4, "f32")
        with d.connect("tcp") as client:
            assert client.call("auth", [TOKEN.encode()]) is True
            assert client.call("ping") == "pong"


def test_wrong_token_closes(ctx):
    # more wrong tokens a second than auth.max_failures_per_second lets through by default
    with _authed_daemon(ctx, auth={"max_failures_per_second": 0}) as d:
        for wrong in (TOKEN + "x", TOKEN[:-1], "", "A" * 300, TOKEN.upper()):
            with d.connect("tcp") as client:
                _expect_error(client, "auth", [wrong], "UNAUTHENTICATED", "invalid token")
                assert client.is_closed(5 * ctx.scale), "connection open after a wrong token"
        with d.connect("tcp") as client:  # params of the wrong shape are no token either
            _expect_error(client, "auth", [], "INVALID_ARGUMENT", "auth takes [token]")
            _expect_error(client, "auth", [5], "INVALID_ARGUMENT", "token")
        with d.connect("tcp") as client:  # and the daemon still serves the right one
            assert client.call("auth", [TOKEN]) is True


def test_unix_needs_no_token(ctx):
    with _authed_daemon(ctx) as d, d.connect("unix") as client:
        h.check_gemm(client, ctx.rng, 6, 6, 6, "f32")
        _expect_error(client, "auth", ["wrong"], "UNAUTHENTICATED", "invalid token")
        assert not client.is_closed(0.5), "a Unix connection was closed for a wrong token"
        assert client.call("auth", [TOKEN]) is True
        assert client.call("ping") == "pong"


def _refused_start(d, words):
    d.start(wait=False)
    code = d.wait_exit(15 * d.scale)
    if code is None:
        d.kill()
        raise AssertionError("gemmd started, expected a refusal (%s)\n%s" % (words, d.log_tail()))
    d.check_log()
    assert code != 0 and words in d.log(), "exit %d, no %r in\n%s" % (code, words, d.log_tail())


def test_token_file_checks(ctx):
    for text, mode, words in ((TOKEN, 0o644, "chmod 0600"), (TOKEN, 0o640, "group or others"),
                              ("", 0o600, "1..256 bytes"), ("\n", 0o600, "1..256 bytes"),
                              ("x" * 257, 0o600, "1..256 bytes")):
        d = ctx.daemon(tcp=True)
        path = _token_file(d, text, mode)
        d.write_config({"listen": d.default_listen(), "auth": {"token_file": path}})
        _refused_start(d, words)
        code, out = h.run_gemmd(ctx.gemmd, ["--config", d.config_path, "--check-config"])
        assert code == 1 and words in out, "--check-config: %d\n%s" % (code, out)
    d = ctx.daemon(tcp=True)
    d.write_config({"listen": d.default_listen(),
                    "auth": {"token_file": os.path.join(d.dir, "missing")}})
    _refused_start(d, "No such file")
    # one trailing newline is stripped, a second one is part of the token
    with _authed_daemon(ctx, TOKEN + "\n\n") as d, d.connect("tcp") as client:
        assert client.call("auth", [TOKEN + "\n"]) is True


def test_reload_rereads_token(ctx):
    with _authed_daemon(ctx) as d:
        early = d.connect("tcp")
        assert early.call("auth", [TOKEN]) is True
        _token_file(d, "the-next-token\n")
        d.send_signal(signal.SIGHUP)
        h.wait_until(lambda: "reloaded" in d.log(), 10 * d.scale, "the reload")
        with d.connect("tcp") as client:
            _expect_error(client, "auth", [TOKEN], "UNAUTHENTICATED", "invalid token")
        with d.connect("tcp") as client:
            assert client.call("auth", ["the-next-token"]) is True
        assert early.call("ping") == "pong"  # authenticated connections stay so
        # a token file that goes bad is a failed reload: the old token stays
        os.chmod(os.path.join(d.dir, "token"), 0o644)
        d.send_signal(signal.SIGHUP)
        h.wait_until(lambda: "reload failed" in d.log(), 10 * d.scale, "the failed reload")
        with d.connect("tcp") as client:
            assert client.call("auth", ["the-next-token"]) is True
        early.close()


def test_exposed_tcp_refused(ctx):
    port = h.free_tcp_port()
    d = ctx.daemon()
    d.write_config({"listen": [d.address("unix"), "tcp:0.0.0.0:%d" % port]})
    _refused_start(d, "auth.token_file")
    code, out = h.run_gemmd(ctx.gemmd, ["--config", d.config_path, "--check-config"])
    assert code == 1 and "tcp:0.0.0.0" in out and "auth.token_file" in out, out
    # the command line's --listen is checked the same way
    d2 = ctx.daemon(args=["--listen", d.address("unix"), "--listen", "tcp:[::]:%d" % port])
    _refused_start(d2, "auth.token_file")


def test_exposed_tcp_allowed_on_purpose(ctx):
    port = h.free_tcp_port()
    d = ctx.daemon()
    d.write_config({"listen": [d.address("unix"), "tcp:0.0.0.0:%d" % port],
                    "auth": {"allow_unauthenticated_tcp": True}})
    code, out = h.run_gemmd(ctx.gemmd, ["--config", d.config_path, "--check-config"])
    assert code == 0 and "without a token" in out, out
    with d:
        assert "TCP without authentication" in d.log(), d.log_tail()
        with h.Client("tcp:127.0.0.1:%d" % port) as client:
            assert client.call("ping") == "pong"
    # and with a token, exposed TCP starts without the override
    d2 = ctx.daemon()
    path = _token_file(d2)
    d2.write_config({"listen": [d2.address("unix"), "tcp:0.0.0.0:%d" % port],
                     "auth": {"token_file": path}})
    with d2, h.Client("tcp:127.0.0.1:%d" % port) as client:
        _expect_error(client, "ping", [], "UNAUTHENTICATED", "authenticate first")
        assert client.call("auth", [TOKEN]) is True


if __name__ == "__main__":
    h.main([test_no_token_configured, test_methods_refused_before_auth,
            test_right_token_as_str_and_bin, test_wrong_token_closes, test_unix_needs_no_token,
            test_token_file_checks, test_reload_rereads_token, test_exposed_tcp_refused,
            test_exposed_tcp_allowed_on_purpose])
