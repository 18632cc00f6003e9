#!/usr/bin/python3
"""The config file and the command line: --check-config accepts config/gemmd.yaml and rejects an
unknown key or a bad value with FILE:LINE:COLUMN; command-line flags (--log-level, --listen,
--backend) override the file."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
DEFAULT_CONFIG = os.path.join(SOURCE_DIR, "config", "gemmd.yaml")


def _check(ctx, text, name="bad.yaml"):
    d = ctx.daemon()
    path = os.path.join(d.dir, name)
    with open(path, "w") as f:
        f.write(text)
    code, out = h.run_gemmd(ctx.gemmd, ["--config", path, "--check-config"], timeout=15)
    return path, code, out


def test_default_config_passes(ctx):
    if not os.path.exists(DEFAULT_CONFIG):
        raise AssertionError("config/gemmd.yaml is missing")
    code, out = h.run_gemmd(ctx.gemmd, ["--config", DEFAULT_CONFIG, "--check-config"],
                            timeout=15)
    assert code == 0, "--check-config config/gemmd.yaml: exit %d\n%s" % (code, out)
    # the harness's own generated file passes too, and --check-config does not start serving
    d = ctx.daemon(tcp=True)
    code, out = h.run_gemmd(ctx.gemmd, ["--config", d.config_path, "--check-config"],
                            timeout=15)
    assert code == 0, "--check-config %s: exit %d\n%s\n%s" % (d.config_path, code, out,
                                                             d.config_text)
    assert not os.path.exists(d.unix_path), "--check-config created the socket"


def test_builtin_defaults_equal_config_file(ctx):
    """Without a key in the file, the built-in default applies; config/gemmd.yaml holds the same
    defaults: info.limits of a daemon on that file equals one on a near-empty file."""
    limits = []
    for text in (None, "log_level: info\n"):
        d = ctx.daemon(config_text=text)
        if text is None:
            d.config_path = DEFAULT_CONFIG  # the file as shipped, its listen list overridden
        d.args = ["--listen", "unix:" + d.unix_path]
        with d, d.connect() as client:
            limits.append(client.call("info")["limits"])
    assert limits[0] == limits[1], "config/gemmd.yaml %r\nbuilt-in defaults %r" % tuple(limits)


def test_check_config_without_file(ctx):
    if os.path.exists("/etc/gemmd/gemmd.yaml"):  # an installed gemmd, not a missing feature
        print("note: /etc/gemmd/gemmd.yaml exists here: the built-in defaults are not tested")
        return
    code, out = h.run_gemmd(ctx.gemmd, ["--check-config"], timeout=15)
    assert code == 0, "--check-config with the built-in defaults: exit %d\n%s" % (code, out)


BAD_FILES = [
    # (what, text, line, column of the offending key or value (1-based))
    ("unknown top-level key", "log_level: info\nfrobnicate: 3\n", 2, 1),
    ("unknown nested key", "limits:\n  max_connections: 8\n  max_dimm: 5\n", 3, 3),
    ("unknown key in timeouts", "timeouts:\n  idle_msec: 5\n", 2, 3),
    ("not a number", "limits:\n  max_dim: banana\n", 2, 12),
    ("negative count", "cpu:\n  threads: -1\n", 2, 12),
    ("bad size suffix", "limits:\n  max_buffered_bytes: 12XB\n", 2, 23),
    ("bad log level", "log_level: loud\n", 1, 12),
    ("bad backend", "backend: quantum\n", 1, 10),
    ("bad socket mode", "unix_socket_mode: \"0999\"\n", 1, 19),
    ("bad listen address", "listen:\n  - carrier-pigeon:/x\n", 2, 5),
    ("a map where a list goes", "listen:\n  unix: /tmp/x.sock\n", 2, 3),
    ("duration not an integer", "timeouts:\n  drain_ms: soon\n", 2, 13),
]


def test_bad_files_name_line_and_column(ctx):
    problems = []
    for what, text, line, column in BAD_FILES:
        path, code, out = _check(ctx, text)
        if code == 0:
            problems.append("%s: --check-config exit 0\n%s" % (what, text))
            continue
        found = re.search(re.escape(path) + r":(\d+):(\d+):\s*\S", out)
        if not found:
            problems.append("%s: no %s:LINE:COLUMN: message in %r" % (what, path, out))
            continue
        got_line, got_col = int(found.group(1)), int(found.group(2))
        if got_line != line:
            problems.append("%s: reported line %d, the mistake is on line %d (%r)" % (
                what, got_line, line, out.strip()))
        elif got_col != column:
            problems.append("%s: reported column %d, the mistake starts at column %d (%r)" % (
                what, got_col, column, out.strip()))
    if problems:
        raise AssertionError("\n".join(problems))


def test_yaml_syntax_error(ctx):
    path, code, out = _check(ctx, "limits:\n  max_dim: [1, 2\n")
    assert code != 0, "a YAML syntax error passed --check-config"
    assert re.search(re.escape(path) + r":\d+:\d+:", out), "no FILE:LINE:COLUMN in %r" % out


def test_missing_file(ctx):
    code, out = h.run_gemmd(ctx.gemmd, ["--config", "/nonexistent/gemmd.yaml",
                                        "--check-config"], timeout=15)
    assert code != 0 and "/nonexistent/gemmd.yaml" in out, "exit %d, %r" % (code, out)


def test_bad_flags(ctx):
    for args in (["--backend", "quantum"], ["--log-level", "loud"], ["--listen", "bogus:x"],
                 ["--frobnicate"]):
        d = ctx.daemon()
        code, out = h.run_gemmd(ctx.gemmd, ["--config", d.config_path, "--check-config"] + args,
                                timeout=15)
        assert code != 0 and out.strip(), "%s: exit %d, %r" % (" ".join(args), code, out)


def _levels(log):
    return {line.split(":", 1)[0] for line in log.splitlines() if ":" in line}


def test_log_level_flag_overrides(ctx):
    # the file says error: nothing below it is logged
    with ctx.daemon(config={"log_level": "error"}) as quiet, quiet.connect() as client:
        h.check_gemm(client, ctx.rng, 4, 4, 4, "f32")
    levels = _levels(quiet.log())
    assert not levels & {"info", "debug"}, "log_level error, yet:\n" + quiet.log_tail()
    # --log-level debug beats the file's error
    with ctx.daemon(config={"log_level": "error"}, args=["--log-level", "debug"]) as loud, \
            loud.connect() as client:
        h.check_gemm(client, ctx.rng, 4, 4, 4, "f32")
    levels = _levels(loud.log())
    assert levels & {"info", "debug"}, "--log-level debug, yet:\n" + loud.log_tail()


def test_listen_flag_replaces_file_list(ctx):
    d = ctx.daemon()
    flag_path = os.path.join(d.dir, "flag.sock")
    d.args = ["--listen", "unix:" + flag_path]
    with d.start(wait_addr="unix:" + flag_path):
        with h.Client("unix:" + flag_path) as client:
            h.check_gemm(client, ctx.rng, 6, 5, 4, "f32")
        assert not os.path.exists(d.unix_path), "the file's listen entry was used as well"
    # --listen twice: both
    d2 = ctx.daemon()
    p1, p2 = os.path.join(d2.dir, "one.sock"), os.path.join(d2.dir, "two.sock")
    d2.args = ["--listen", "unix:" + p1, "--listen", "unix:" + p2]
    with d2.start(wait_addr="unix:" + p1):
        d2.wait_listening(addr="unix:" + p2)
        for path in (p1, p2):
            with h.Client("unix:" + path) as client:
                assert client.call("ping") == "pong"


def test_backend_flag_overrides(ctx):
    # the file asks for the GPU (absent here, or not wanted); --backend cpu wins
    with ctx.daemon(config={"backend": "gpu"}, backend="cpu") as d, d.connect() as client:
        assert client.call("info")["backend"] == "cpu"
        h.check_gemm(client, ctx.rng, 5, 5, 5, "f32")
    # the file says cpu and no flag is given: cpu
    with ctx.daemon(config={"backend": "cpu"}, backend=None) as d, d.connect() as client:
        assert client.call("info")["backend"] == "cpu"


def test_backend_auto_serves(ctx):
    """backend auto (the default) serves on any machine: from the CPU where there is no GPU."""
    with ctx.daemon(config={"backend": "auto"}, backend=None) as d, d.connect() as client:
        backend = client.call("info")["backend"]
        if not os.path.exists("/dev/nvidiactl"):
            assert backend == "cpu", "backend auto without a GPU: info.backend %r" % backend
        h.check_gemm(client, ctx.rng, 33, 17, 65, "f32", True, True, alpha=0.5, beta=2.0)
        h.check_gemm(client, ctx.rng, 7, 7, 7, "f64")


if __name__ == "__main__":
    sys.exit(h.main([test_default_config_passes, test_builtin_defaults_equal_config_file,
                     test_check_config_without_file, test_bad_files_name_line_and_column,
                     test_yaml_syntax_error, test_missing_file, test_bad_flags,
                     test_log_level_flag_overrides, test_listen_flag_replaces_file_list,
                     test_backend_flag_overrides, test_backend_auto_serves]))
